from st2common.runners.base_action import Action

from fleet_rollout import service


class Abort(Action):
    def run(self, rollout_id, cause='operator', batch=-1):
        _, user = service.action_identity()
        return service.abort(self.config, self.action_service, rollout_id, cause, int(batch),
                             user)
