from st2common.runners.base_action import Action

from fleet_rollout import service
from fleet_rollout.st2api import ActionApi


class HostStep(Action):
    def run(self, rollout_id, host, step, leave_drained=None, unfinished_only=False):
        api = ActionApi.from_env()
        execution_id, who = service.action_caller(self.config, api)
        restore = step == "restore"
        return service.host_step(self.config, self.action_service, rollout_id, host, step,
                                 execution_id, who.name, leave_drained=leave_drained,
                                 caller=who if restore else None, api=api if restore else None,
                                 unfinished_only=unfinished_only)
