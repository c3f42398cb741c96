from st2common.runners.base_action import Action

from fleet_rollout import inquiries, service
from fleet_rollout.approvals import ApprovalRefused
from fleet_rollout.st2api import ActionApi


class Respond(Action):
    def run(self, rollout_id, decision):
        config = service.pack_config(self.config)
        try:
            return inquiries.respond(config, rollout_id, decision, ActionApi.from_env(),
                                     service.as_store(self.action_service, config))
        except ApprovalRefused as err:
            return (False, {"rollout_id": rollout_id, "decision": decision, "refused": True,
                            "message": f"Refused: {err}"})
