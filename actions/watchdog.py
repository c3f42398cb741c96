from st2common.runners.base_action import Action

from fleet_rollout import service


class Watchdog(Action):
    def run(self):
        return service.watchdog(self.config, self.action_service)
