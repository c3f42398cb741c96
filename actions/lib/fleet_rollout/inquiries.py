"""Answer a rollout's pending question (core.ask) on behalf of the caller.

`fleet_rollout.respond` (the chat aliases `rollout approve|reject|extend <id>`, or
`st2 run fleet_rollout.respond`) finds the rollout's pending inquiry by the `rollout_id` default
in its schema, checks the caller (approvals.caller: the chat user behind an alias execution, else
the API user) and answers through the StackStorm API with the action's own token. StackStorm
then checks that token's account against the inquiry's users/roles and records it as the
requester; the batch workflow reads the approver from there (approvals.answer_author).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

from fleet_rollout import approvals
from fleet_rollout.config import PackConfig
from fleet_rollout.errors import ConfigError
from fleet_rollout.st2api import ActionApi

DECISIONS = {
    "approve": {"approved": True, "choice": "proceed"},
    "reject": {"approved": False, "choice": "rollback"},
    "extend": {"choice": "extend"},
}


def pending_for(rollout_id: str, inquiries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for inquiry in inquiries:
        props = ((inquiry.get("schema") or {}).get("properties") or {})
        if (props.get("rollout_id") or {}).get("default") == rollout_id:
            out.append(inquiry)
    return out


def build_response(rollout_id: str, decision: str, props: Mapping[str, Any],
                   who: approvals.Identity) -> Dict[str, Any]:
    response: Dict[str, Any] = {k: v for k, v in DECISIONS[decision].items() if k in props}
    if not response:
        raise ConfigError(f"rollout {rollout_id} asks something `{decision}` cannot answer "
                          f"(it expects {', '.join(sorted(props))})")
    response["rollout_id"] = rollout_id
    if who.via == "chat" and approvals.CHAT_USER_FIELD in props:
        response[approvals.CHAT_USER_FIELD] = who.name
    return response


def respond(config: PackConfig, rollout_id: str, decision: str, api: ActionApi) -> Dict[str, Any]:
    """Answer as the caller; raises ApprovalRefused (caller may not answer) or ConfigError."""
    if decision not in DECISIONS:
        raise ConfigError(f"decision {decision!r}: one of {', '.join(DECISIONS)}")
    who = approvals.caller(api.own_execution())
    approvals.check_may_answer(who, config)
    matches = pending_for(rollout_id, api.get("inquiries"))
    if not matches:
        raise ConfigError(f"rollout {rollout_id} is not waiting for an answer")
    inquiry = matches[0]
    props = (inquiry.get("schema") or {}).get("properties") or {}
    response = build_response(rollout_id, decision, props, who)
    api.put(f"inquiries/{inquiry['id']}", {"id": inquiry["id"], "response": response})
    return {"rollout_id": rollout_id, "inquiry": inquiry["id"], "decision": decision,
            "by": who.name, "via": who.via,
            "message": f"{who.name} answered {decision} for rollout {rollout_id} "
                       f"(inquiry {inquiry['id']})"}
