"""Execution contexts exactly as StackStorm (3.9) builds them, for each way an execution starts.

- the API / CLI (`run`): user, pack (st2api controllers/v1/actionexecutions.py; services/
  action.py create_request adds pack);
- a rule: trigger_instance {id, name}, rule {id, name}, user (the system user), pack
  (st2reactor/rules/enforcer.py get_action_execution_context);
- an alias (chat): action_alias_ref {id, name}, api_user (the chat user), user (the bot's st2
  account), source_channel, pack (st2api controllers/v1/aliasexecution.py _post);
- a workflow task: pack, user, parent {execution_id, user, pack, [api_user],
  [source_channel]}, orquesta {workflow_execution_id, task_execution_id, task_name, task_id,
  task_route, [item_id]}, [api_user], [source_channel] (services/workflows.py
  request_next_tasks, request_action_execution);
- a retry policy: the failed execution's context plus policies.retry (st2actions/policies/
  retry.py).

`ctx(st2)` of a workflow: action_execution_id, api_url, user, pack, action, runner,
workflow_execution_id, and api_user / source_channel only when the execution's context has
them (orquesta_runner.py _construct_st2_context; services/workflows.py request). A missing key
read as `ctx(st2).api_user` fails the expression with "Unable to resolve key 'api_user'";
`ctx(st2).get("api_user")` gives null.

The ids of rules, aliases and trigger instances here are their refs / runtime ids (st2: database
object ids).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

# Shown as ctx(st2).api_url; the local API actions reach is ST2_ACTION_API_URL.
API_URL = "http://127.0.0.1/api/v1"

# services/action.py request_pause / request_resume / request_cancellation.
REQUESTER_KEYS = {"pause": "paused_by", "resume": "resumed_by", "cancel": "cancelled_by"}

_CHAT_KEYS = ("api_user", "source_channel")


def _chat_keys(source: Dict[str, Any]) -> Dict[str, Any]:
    """api_user and source_channel, copied only when set (st2 tests truthiness)."""
    return {key: source[key] for key in _CHAT_KEYS if source.get(key)}


def api_context(user: str, pack: str) -> Dict[str, Any]:
    return {"user": user, "pack": pack}


def rule_context(trigger_instance_id: str, rule_ref: str, rule_name: str, system_user: str,
                 pack: str) -> Dict[str, Any]:
    return {
        "trigger_instance": {"id": trigger_instance_id, "name": None},
        "rule": {"id": rule_ref, "name": rule_name},
        "user": system_user,
        "pack": pack,
    }


def alias_context(alias_ref: str, alias_name: str, chat_user: Optional[str], bot_user: str,
                  source_channel: Optional[str]) -> Dict[str, Any]:
    return {
        "action_alias_ref": {"id": alias_ref, "name": alias_name},
        "api_user": chat_user,
        "user": bot_user,
        "source_channel": source_channel,
    }


def workflow_st2(context: Dict[str, Any], action_ref: str, runner: str, ex_id: str,
                 wf_id: str, system_user: str) -> Dict[str, Any]:
    """ctx(st2) of a workflow execution."""
    st2 = {
        "action_execution_id": ex_id,
        "api_url": API_URL,
        "user": context.get("user", system_user),
        "pack": context.get("pack"),
        "action": action_ref,
        "runner": runner,
    }
    st2.update(_chat_keys(context))
    st2["workflow_execution_id"] = wf_id
    return st2


def task_action_context(st2: Dict[str, Any], wf_ex_id: str, wf_id: str, task_ex_id: str,
                        task_id: str, route: int, item_id: Optional[int],
                        action_ref: str) -> Dict[str, Any]:
    """The context of the action execution of a workflow task."""
    parent = {"execution_id": wf_ex_id, "user": st2.get("user"), "pack": st2.get("pack")}
    parent.update(_chat_keys(st2))
    ctx: Dict[str, Any] = {
        "pack": action_ref.split(".")[0] if action_ref else st2.get("pack"),
        "user": st2.get("user"),
        "parent": parent,
        "orquesta": {
            "workflow_execution_id": wf_id,
            "task_execution_id": task_ex_id,
            "task_name": task_id,
            "task_id": task_id,
            "task_route": route,
        },
    }
    ctx.update(_chat_keys(st2))
    if item_id is not None:
        ctx["orquesta"]["item_id"] = item_id
    return ctx
