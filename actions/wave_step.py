from st2common.runners.base_action import Action

from fleet_rollout import service


class WaveStep(Action):
    def run(self, rollout_id, hosts, step):
        execution_id, who = service.action_caller(self.config)
        return service.wave_step(self.config, self.action_service, rollout_id, hosts, step,
                                 execution_id, who.name)
