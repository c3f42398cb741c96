from st2common.runners.base_action import Action

from fleet_rollout import service


class RecordApproval(Action):
    def run(self, rollout_id, batch, approved, by=None, auto=False):
        return service.record_approval(self.config, self.action_service, rollout_id, int(batch),
                                       approved, by or '', auto)
