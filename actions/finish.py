from st2common.runners.base_action import Action

from fleet_rollout import service


class Finish(Action):
    def run(self, rollout_id, status):
        return service.finish(self.config, self.action_service, rollout_id, status)
