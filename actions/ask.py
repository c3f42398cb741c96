from st2common.runners.base_action import Action

from fleet_rollout import service


class Ask(Action):
    def run(self, rollout_id, batch, question):
        return service.ask(self.config, self.action_service, rollout_id, int(batch), question)
