from st2common.runners.base_action import Action

from fleet_rollout import service


class PlanRollout(Action):
    def run(self, profile, targets='all', rollout_id=None):
        _, who = service.action_caller(self.config)
        return service.plan_rollout(self.config, self.action_service, profile, targets,
                                    rollout_id, caller=who)
