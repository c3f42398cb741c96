"""Where a pack action keeps rollout state: the st2 datastore, as the action's user or as the
pack's state account.

st2-rbac-backend grants a system-scoped key by its exact name only (`key_value_pair:
st2kv.system:<name>`), and the pack's keys are named per rollout, batch and host: no role but
st2's `admin` can let a user read and write them. With `state_api_key` in the pack config, the
pack keeps its state through that API key (a service account holding st2's admin role), so
the people who run rollouts need the pack's roles only. Who may act is decided before any
state is touched: st2 RBAC on the pack's actions, and the pack's own operators and approvers
lists. Without it, the action's own user (`action_service`) reads and writes the keys.
"""
from __future__ import annotations

from typing import Any, Dict, Optional
from urllib.parse import quote, urlencode

from fleet_rollout.config import PackConfig
from fleet_rollout.st2api import ActionApi, ApiRefused
from fleet_rollout.store import PAGE, ActionServiceStore, Store


class KeyApiStore(Store):
    """System-scoped keys through st2's /api/v1/keys (keyvalue controller), as `api`'s user."""

    def __init__(self, api: ActionApi) -> None:
        self.api = api

    @staticmethod
    def _path(key: str, **query: Any) -> str:
        return f"keys/{quote(key, safe='')}?{urlencode(dict(query, scope='system'))}"

    def get(self, key: str) -> Optional[str]:
        try:
            item = self.api.get(self._path(key))
        except ApiRefused as err:
            if err.status == 404:
                return None
            raise
        value = item.get("value") if isinstance(item, dict) else None
        return None if value is None else str(value)

    def set(self, key: str, value: str) -> None:
        self.api.put(f"keys/{quote(key, safe='')}", {"name": key, "value": value,
                                                     "scope": "system"})

    def delete(self, key: str) -> None:
        try:
            self.api.delete(self._path(key))
        except ApiRefused as err:
            if err.status != 404:
                raise

    def list(self, prefix: str) -> Dict[str, str]:
        """Every key under `prefix`, a page (st2's api.max_page_size) per request."""
        out: Dict[str, str] = {}
        offset = 0
        while True:
            query = urlencode({"prefix": prefix, "scope": "system", "limit": PAGE,
                               "offset": offset})
            items = self.api.get(f"keys?{query}") or []
            for item in items:
                if item.get("name") is not None and item.get("value") is not None:
                    out[str(item["name"])] = str(item["value"])
            if len(items) < PAGE:
                return out
            offset += len(items)


def state_store(datastore: Any, config: PackConfig) -> Store:
    """The store an action keeps rollout state in: `datastore` itself when it is a Store (the
    pack's tests and tools), the pack's state account when the config names its API key, else
    st2's action_service (the action's user)."""
    if isinstance(datastore, Store):
        return datastore
    if config.state_api_key:
        return KeyApiStore(ActionApi.from_env(api_key=config.state_api_key))
    return ActionServiceStore(datastore)
