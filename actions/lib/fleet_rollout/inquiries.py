"""Answer a rollout's pending question (core.ask) on behalf of the caller.

`fleet_rollout.respond` (the chat aliases `rollout approve|reject|extend <id>`, or
`st2 run fleet_rollout.respond`) finds the rollout's pending inquiry (the one its batch recorded
as asked: a core.ask anyone else started with the rollout's id is never answered), checks the
caller (approvals.caller: the chat user behind an alias execution, else the API user) and
answers through the StackStorm API with the action's own token. StackStorm then checks that
token's account against the inquiry's users/roles and records it as the requester; the batch
workflow reads the approver from there (approvals.answer_author).

StackStorm records a requester only when the question's workflow has paused on its inquiry,
which it does a moment after the inquiry appears; so respond answers once that workflow is
paused (waiting up to PAUSE_WAIT seconds), and says so when the answer still came first
(the batch then asks the question again: questions.py).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping

from fleet_rollout import approvals, questions
from fleet_rollout.config import PackConfig
from fleet_rollout.errors import ConfigError
from fleet_rollout.st2api import ActionApi

PAUSE_WAIT = 30.0  # seconds respond waits for the question's workflow to pause
POLL = 0.5

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


def recorded_pending(rollout_id: str, api: ActionApi, store: Any,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.time) -> Dict[str, Any]:
    """The rollout's pending question: of the pending inquiries naming the rollout, the one
    its batch recorded as asked (questions.question_of); a question anyone else started with
    the rollout's id is never answered. One asked a moment ago may not be recorded yet: those
    are read again (after the others)."""
    later = []
    for inquiry in pending_for(rollout_id, api.get("inquiries")):
        try:
            owner, _batch, _kind = questions.question_of(api, store, str(inquiry.get("id")),
                                                         wait=0)
        except questions.NotYetOurs:
            later.append(inquiry)
            continue
        except questions.NotOurQuestion:
            continue
        if owner == rollout_id:
            return inquiry
    for inquiry in later:
        try:
            owner, _batch, _kind = questions.question_of(api, store, str(inquiry.get("id")),
                                                         sleep=sleep, clock=clock)
        except questions.NotOurQuestion:
            continue
        if owner == rollout_id:
            return inquiry
    raise ConfigError(f"rollout {rollout_id} is not waiting for an answer")


def respond(config: PackConfig, rollout_id: str, decision: str, api: ActionApi, store: Any,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.time) -> Dict[str, Any]:
    """Answer as the caller; raises ApprovalRefused (caller may not answer) or ConfigError."""
    if decision not in DECISIONS:
        raise ConfigError(f"decision {decision!r}: one of {', '.join(DECISIONS)}")
    who = approvals.caller(api.own_execution())
    approvals.check_may_answer(who, config)
    inquiry = recorded_pending(rollout_id, api, store, sleep, clock)
    props = (inquiry.get("schema") or {}).get("properties") or {}
    response = build_response(rollout_id, decision, props, who)
    workflow_id = asking_workflow_paused(api, str(inquiry["id"]), sleep, clock)
    api.put(f"inquiries/{inquiry['id']}", {"id": inquiry["id"], "response": response})
    out = {"rollout_id": rollout_id, "inquiry": inquiry["id"], "decision": decision,
           "by": who.name, "via": who.via, "attributed": True,
           "message": f"{who.name} answered {decision} for rollout {rollout_id} "
                      f"(inquiry {inquiry['id']})"}
    why = unattributed(api, str(inquiry["id"]), workflow_id, config.answer_gap, sleep, clock)
    if why:
        out["attributed"] = False
        out["message"] += (f": it is not counted ({why}); the question is asked again, "
                           "answer once more")
    return out


def unattributed(api: ActionApi, inquiry_id: str, workflow_id: str, answer_gap: float,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time) -> str:
    """Why the batch will not count an answer just given (questions.answering_requester),
    read once the inquiry has ended (up to PAUSE_WAIT seconds); "" when it counts."""
    if not workflow_id:
        return ""
    end = clock() + PAUSE_WAIT
    inquiry = api.execution(inquiry_id)
    while not inquiry.get("end_timestamp") and clock() < end:
        sleep(POLL)
        inquiry = api.execution(inquiry_id)
    return questions.answering_requester(inquiry, api.execution(workflow_id), answer_gap)[1]


def asking_workflow_paused(api: ActionApi, inquiry_id: str,
                           sleep: Callable[[float], None] = time.sleep,
                           clock: Callable[[], float] = time.time) -> str:
    """The id of the workflow that asked this inquiry ("" for none), once it is neither
    running nor pausing (st2 refuses to resume a pausing workflow: the answer fails), or after
    PAUSE_WAIT seconds."""
    workflow_id = str(api.execution(inquiry_id).get("parent") or "")
    end = clock() + PAUSE_WAIT
    while workflow_id and clock() < end:
        if api.execution(workflow_id).get("status") not in ("running", "pausing"):
            break
        sleep(POLL)
    return workflow_id
