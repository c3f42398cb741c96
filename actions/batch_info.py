from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.st2api import ActionApi


class BatchInfo(Action):
    def run(self, rollout_id, batch):
        return service.batch_info(self.config, self.action_service, rollout_id, int(batch),
                                  ActionApi.from_env())
