from st2common.runners.base_action import Action

from fleet_rollout import service


class BatchInfo(Action):
    def run(self, rollout_id, batch):
        return service.batch_info(self.config, self.action_service, rollout_id, int(batch))
