from st2common.runners.base_action import Action

from fleet_rollout import service


class CollectCounters(Action):
    def run(self, rollout_id, batch, label):
        return service.collect_counters(self.config, self.action_service, rollout_id, int(batch),
                                        label)
