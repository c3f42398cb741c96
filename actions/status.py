from st2common.runners.base_action import Action

from fleet_rollout import service


class Status(Action):
    def run(self, rollout_id):
        return service.status(self.config, self.action_service, rollout_id)
