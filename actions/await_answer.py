from st2common.runners.base_action import Action

from fleet_rollout import service


class AwaitAnswer(Action):
    def run(self, rollout_id, batch, question, wait):
        return service.await_answer(self.config, self.action_service, rollout_id, int(batch),
                                    question, float(wait))
