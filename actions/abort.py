from st2common.runners.base_action import Action

from fleet_rollout import service


class Abort(Action):
    def run(self, rollout_id, cause='operator', batch=-1, force=False):
        _, who = service.action_caller(self.config)
        return service.abort(self.config, self.action_service, rollout_id, cause, int(batch),
                             caller=who, force=bool(force))
