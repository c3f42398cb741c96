from st2common.runners.base_action import Action

from fleet_rollout import service


class HostStep(Action):
    def run(self, rollout_id, host, step):
        execution_id, user = service.action_identity(self.config)
        return service.host_step(self.config, self.action_service, rollout_id, host, step,
                                 execution_id, user)
