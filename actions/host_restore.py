from st2common.runners.base_action import Action

from fleet_rollout import service


class HostRestore(Action):
    def run(self, rollout_id, host, execution_id=None, user=None, leave_drained=None):
        return service.host_restore(self.config, self.action_service, rollout_id, host,
                                    execution_id or '', user or '', leave_drained)
