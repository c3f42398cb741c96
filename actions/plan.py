from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.st2api import ActionApi


class PlanRollout(Action):
    def run(self, profile, targets='all', rollout_id=None):
        api = ActionApi.from_env()
        _, who = service.action_caller(self.config, api)
        workflow = service.rollout_workflow_of(api, api.own_execution())
        return service.plan_rollout(self.config, self.action_service, profile, targets,
                                    rollout_id, caller=who, workflow=workflow)
