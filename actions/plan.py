from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.st2api import ActionApi


class PlanRollout(Action):
    def run(self, profile, targets='all', rollout_id=None):
        api = ActionApi.from_env()
        own = api.own_execution()
        _, who = service.action_caller(self.config, api, own)
        return service.plan_rollout(self.config, self.action_service, profile, targets,
                                    rollout_id, caller=who,
                                    workflow=service.rollout_workflow_of(api, own))
