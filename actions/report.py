from st2common.runners.base_action import Action

from fleet_rollout import service


class Report(Action):
    def run(self, rollout_id):
        return service.report(self.config, self.action_service, rollout_id)
