from st2common.runners.base_action import Action

from fleet_rollout import chat, service
from fleet_rollout.st2api import ActionApi


class ChatMessage(Action):
    def run(self, event, id, status=""):
        config = service.pack_config(self.config)
        return chat.compose(config, event, id, status, ActionApi.from_env(),
                            service.as_store(self.action_service, config))
