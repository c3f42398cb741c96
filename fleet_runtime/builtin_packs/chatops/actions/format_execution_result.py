"""chatops.format_execution_result: the chat message of an execution's result, with the result
format of the alias that started it (st2 contrib/chatops), read through the st2 API the runtime
gives every action (ST2_ACTION_API_URL, ST2_ACTION_AUTH_TOKEN)."""
from __future__ import annotations

import os
from typing import Any, Dict

import requests
from st2common.runners.base_action import Action

from fleet_runtime.alias_execution import result_message


class FormatResultAction(Action):
    def _get(self, path: str) -> Dict[str, Any]:
        url = os.environ["ST2_ACTION_API_URL"].rstrip("/") + path
        resp = requests.get(url, headers={"X-Auth-Token": os.environ["ST2_ACTION_AUTH_TOKEN"]},
                            timeout=30)
        resp.raise_for_status()
        return dict(resp.json())

    def run(self, execution_id: str) -> Dict[str, Any]:
        if not execution_id:
            raise ValueError("Invalid execution_id provided.")
        execution = self._get(f"/executions/{execution_id}")
        alias = None
        alias_id = ((execution.get("context") or {}).get("action_alias_ref") or {}).get("id")
        if alias_id:
            alias = self._get(f"/actionalias/{alias_id}")
        return result_message(alias, execution)
