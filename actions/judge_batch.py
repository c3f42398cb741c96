from st2common.runners.base_action import Action

from fleet_rollout import service


class JudgeBatch(Action):
    def run(self, rollout_id, batch):
        return service.judge_batch(self.config, self.action_service, rollout_id, int(batch))
