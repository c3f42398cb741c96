from st2common.runners.base_action import Action

from fleet_rollout import service


class HostStep(Action):
    def run(self, rollout_id, host, step, leave_drained=None):
        execution_id, who = service.action_caller(self.config)
        return service.host_step(self.config, self.action_service, rollout_id, host, step,
                                 execution_id, who.name, leave_drained=leave_drained,
                                 caller=who if step == "restore" else None)
