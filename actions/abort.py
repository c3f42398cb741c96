from st2common.runners.base_action import Action

from fleet_rollout import service


class Abort(Action):
    def run(self, rollout_id, reason='aborted by operator', user=None):
        return service.abort(self.config, self.action_service, rollout_id, reason, user or '')
