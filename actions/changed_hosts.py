from st2common.runners.base_action import Action

from fleet_rollout import service


class ChangedHosts(Action):
    def run(self, rollout_id, hosts=None):
        return service.changed_hosts(self.config, self.action_service, rollout_id, hosts)
