from st2common.runners.base_action import Action

from fleet_rollout import service


class ResumeAnswered(Action):
    def run(self, inquiry):
        return service.resume_answered(self.config, self.action_service, inquiry)
