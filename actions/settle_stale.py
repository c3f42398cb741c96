from st2common.runners.base_action import Action

from fleet_rollout import service


class SettleStale(Action):
    def run(self, rollout_id, stale, parent, succeeded):
        return service.settle_stale(self.config, self.action_service, rollout_id, stale, parent,
                                    succeeded)
