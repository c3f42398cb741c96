from st2common.runners.base_action import Action

from fleet_rollout import service


class MaintenanceWindow(Action):
    def run(self, rollout_id, batch=-1, hosts=None):
        return service.maintenance_window(self.config, self.action_service, rollout_id,
                                          int(batch), list(hosts or []))
