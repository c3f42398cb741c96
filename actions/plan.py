from st2common.runners.base_action import Action

from fleet_rollout import service


class PlanRollout(Action):
    def run(self, profile, targets, inventory=None, rollout_id=None, user=None):
        return service.plan_rollout(self.config, self.action_service, profile, targets, inventory,
                                    rollout_id, user or '')
