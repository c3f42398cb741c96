from st2common.runners.base_action import Action

from fleet_rollout import service


class HostRestore(Action):
    def run(self, rollout_id, host, leave_drained=None):
        execution_id, who = service.action_caller(self.config)
        return service.host_restore(self.config, self.action_service, rollout_id, host,
                                    execution_id, who.name, leave_drained, caller=who)
