from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.approvals import ApprovalRefused
from fleet_rollout.st2api import ActionApi


class Resume(Action):
    def run(self, rollout_id):
        api = ActionApi.from_env()
        execution_id, who = service.action_caller(self.config, api)
        try:
            return service.resume(self.config, self.action_service, rollout_id, who, api,
                                  execution_id)
        except ApprovalRefused as err:
            return (False, {"rollout_id": rollout_id, "refused": True,
                            "message": f"Refused: {err}"})
