from st2common.runners.base_action import Action

from fleet_rollout import inquiries


class RespondInquiry(Action):
    def run(self, rollout_id, decision, by=None):
        return inquiries.respond(rollout_id, decision, by or "")
