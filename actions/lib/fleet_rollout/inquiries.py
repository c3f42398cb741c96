"""Answer a rollout's pending inquiry (core.ask) through the StackStorm API.

A python action gets the API URL and a token from st2 (ST2_ACTION_API_URL,
ST2_ACTION_AUTH_TOKEN). The rollout's inquiries carry `rollout_id` as a schema default, which is
how `rollout approve <rollout id>` in chat finds the right one.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import ConfigError

DECISIONS = {
    "approve": {"approved": True, "choice": "proceed"},
    "reject": {"approved": False, "choice": "rollback"},
    "extend": {"choice": "extend"},
}


def _api() -> Tuple[str, Dict[str, str]]:
    url = os.environ.get("ST2_ACTION_API_URL")
    token = os.environ.get("ST2_ACTION_AUTH_TOKEN")
    if not url or not token:
        raise ConfigError("no StackStorm API in this action's environment (ST2_ACTION_API_URL, "
                          "ST2_ACTION_AUTH_TOKEN); answer with `st2 inquiry respond` instead")
    return url.rstrip("/"), {"X-Auth-Token": token}


def pending_for(rollout_id: str, inquiries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for inquiry in inquiries:
        props = ((inquiry.get("schema") or {}).get("properties") or {})
        if (props.get("rollout_id") or {}).get("default") == rollout_id:
            out.append(inquiry)
    return out


def respond(rollout_id: str, decision: str, by: str = "", comment: str = "",
            session: Optional[Any] = None) -> Dict[str, Any]:
    if decision not in DECISIONS:
        raise ConfigError(f"decision {decision!r}: one of {', '.join(DECISIONS)}")
    import requests

    http = session or requests
    base, headers = _api()
    listing = http.get(f"{base}/inquiries", headers=headers, timeout=30)
    listing.raise_for_status()
    matches = pending_for(rollout_id, listing.json())
    if not matches:
        raise ConfigError(f"rollout {rollout_id} is not waiting for an answer")
    inquiry = matches[0]
    props = (inquiry.get("schema") or {}).get("properties") or {}
    response: Dict[str, Any] = {k: v for k, v in DECISIONS[decision].items() if k in props}
    if not response:
        raise ConfigError(f"rollout {rollout_id} asks something `{decision}` cannot answer "
                          f"(it expects {', '.join(sorted(props))})")
    response["rollout_id"] = rollout_id
    if "by" in props:
        response["by"] = by or "chat"
    answer = http.put(f"{base}/inquiries/{inquiry['id']}", headers=headers, timeout=30,
                      json={"id": inquiry["id"], "response": response})
    if answer.status_code >= 400:
        raise ConfigError(f"inquiry {inquiry['id']}: the API refused the answer "
                          f"({answer.status_code}): {answer.text[:200]}")
    return {"rollout_id": rollout_id, "inquiry": inquiry["id"], "response": response}
