from st2common.runners.base_action import Action

from fleet_rollout import service


class Pause(Action):
    def run(self, rollout_id):
        execution_id, who = service.action_caller(self.config)
        return service.pause(self.config, self.action_service, rollout_id, who, execution_id)
