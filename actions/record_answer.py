from st2common.runners.base_action import Action

from fleet_rollout import service


class RecordAnswer(Action):
    def run(self, rollout_id, batch, question, outcome):
        return service.record_answer(self.config, self.action_service, rollout_id, int(batch),
                                     question, outcome)
