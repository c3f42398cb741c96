from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.approvals import ApprovalRefused


class Respond(Action):
    def run(self, rollout_id, decision):
        try:
            return service.respond(self.config, self.action_service, rollout_id, decision)
        except ApprovalRefused as err:
            return (False, {"rollout_id": rollout_id, "decision": decision, "refused": True,
                            "message": f"Refused: {err}"})
