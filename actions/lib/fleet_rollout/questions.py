"""A batch's questions, asked without pausing the batch.

A question (core.ask) pauses the root of its workflow until it is answered, and on StackStorm
the answer reaches that workflow in two steps that race (st2common services/inquiry.py
respond: the parent's resume is only requested, then the inquiry succeeds at once). When the
completion wins, the workflow stays paused, or `resuming` with the answer lost from its state:
no resume repairs that. So the batch workflow never asks itself: `fleet_rollout.ask` starts the
question as a workflow of its own (`fleet_rollout.question`, a root execution through the st2
API), and `fleet_rollout.await_answer` reads the inquiry's status from the API, a poll at a
time, until it is answered, times out or the rollout is halted. The race can only touch the
question's own workflow, which nothing waits for.

Who answered is what StackStorm recorded: respond() resumes the asking workflow as the
requester (`context.resumed_by` of the question's workflow, with a `resuming` entry in its
log) and ends the inquiry, in one API request. await_answer reads it once it sees the answer
and keeps it, bound to the inquiry's id, in the batch's state; record_answer reads it from
there. resumed_by names the answerer only when the log shows that request and nothing else:
the workflow had paused before the inquiry ended, and it was resumed at most once, within
`answer_gap` seconds of the inquiry's end. Anyone else's resume (`st2 execution resume` of
the question before or after the answer) or an answer given in the moment between the
inquiry appearing and its workflow pausing (respond() resumes nothing then, and records
nobody) leaves the answer without an author. Such an answer is not counted either way: the
question is asked again (the `reask` callback), with a note saying why and the rest of its
ttl, and the unattributed answer goes to the audit trail. Then the question's workflow is
given a few seconds to end by itself; on StackStorm the race can leave it paused, resuming
or running for good, so one that has not ended is canceled (st2's orquesta runner cancels a
workflow with no active task at once).
"""
from __future__ import annotations

import contextlib
import datetime
import math
import re
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from fleet_rollout.approvals import CHAT_USER_FIELD
from fleet_rollout.errors import ConfigError
from fleet_rollout.names import ROLLOUT_ID_PATTERN
from fleet_rollout.st2api import ApiRefused
from fleet_rollout.store import RolloutState

# asks a question again: (kind, the unattributed inquiry's id, ttl minutes left, why nobody
# is named) -> its record
Reask = Callable[[str, str, int, str], Dict[str, Any]]

QUESTION_WORKFLOW = "fleet_rollout.question"
ASK_ACTION = "core.ask"
KINDS = ("approval", "inconclusive")
COMPLETED = ("succeeded", "failed", "timeout", "canceled", "abandoned")
CHOICES = ("extend", "proceed", "rollback")

PENDING, ANSWERED, TIMED_OUT, HALTED = "pending", "answered", "timed_out", "halted"
POLL = 1.0    # seconds between two reads of a pending question
WAIT = 240.0  # seconds one await_answer run waits before the workflow runs it again
SETTLE = 5.0  # seconds an answered question's workflow has to end before it is canceled
# seconds at most between the resume an answer requests and the inquiry's end (the pack
# config's answer_gap): respond() writes both in one API request, which a loaded st2 (its
# database slow) was seen to stretch to 35 s; a resume further away is somebody else's
ANSWER_GAP = 300.0
# why an answer given before its question's workflow paused names nobody
BEFORE_PAUSE = ("the answer came before StackStorm had paused that question, so StackStorm "
                "recorded nobody as giving it")
STAMP_PRECISION = 0.01  # seconds: the coarsest timestamps an st2-like API writes


def schema(kind: str, rollout_id: str, message: str) -> Dict[str, Any]:
    """The inquiry's schema: the decision, the rollout it belongs to (fleet_rollout.respond
    finds a rollout's question by it) and the chat user a chat bot answers for."""
    if kind == "approval":
        decision: Dict[str, Any] = {"approved": {"type": "boolean", "description": message,
                                                 "required": True}}
    else:
        decision = {"choice": {"type": "string", "enum": list(CHOICES), "required": True,
                               "description": "INCONCLUSIVE canary verdict: extend the "
                                              "observation, proceed, or roll back. " + message}}
    props = dict(decision)
    props["rollout_id"] = {"type": "string", "default": rollout_id}
    props[CHAT_USER_FIELD] = {"type": "string", "description": (
        "Set by fleet_rollout.respond for chat answers (counted only from a chat bot "
        "account).")}
    return {"type": "object", "additionalProperties": False, "properties": props}


def _ref(execution: Dict[str, Any]) -> str:
    return str((execution.get("action") or {}).get("ref") or "")


def _latest(executions: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    return max(executions, key=lambda e: str(e.get("start_timestamp") or ""), default=None)


class NotOurQuestion(ConfigError):
    """An inquiry no rollout's batch asked (a core.ask or a question workflow somebody else
    started): never answered by respond, never announced."""


RECORD_WAIT = 30.0  # seconds a question's reader waits for `ask` to record it
# seconds an attempt's claim to ask an unattributed question again holds (await_answer's
# action timeout, 600 s, and a margin): another attempt meanwhile waits for its question
REASK_LEASE = 660.0


def question_of(api: Any, store: Any, inquiry_id: str, wait: float = RECORD_WAIT,
                sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.time) -> Tuple[str, int, str]:
    """(rollout id, batch, kind) of an inquiry the pack asked: its parent is a
    fleet_rollout.question workflow that the batch it names recorded as its question (ask).
    Anyone may start a fleet_rollout.question or a core.ask with a rollout's id in its schema;
    only the recorded one is the rollout's. `ask` records the question once StackStorm has
    started it, so its inquiry can be seen (by the chat rule, by an answer) a moment before:
    a question workflow of the right shape is read again for up to `wait` seconds."""
    end = clock() + wait
    while True:
        try:
            return _question_of(api, store, inquiry_id)
        except NotYetOurs:
            if clock() >= end:
                raise
            sleep(POLL)


class NotYetOurs(NotOurQuestion):
    """A fleet_rollout.question workflow that no batch has recorded (yet)."""


def _question_of(api: Any, store: Any, inquiry_id: str) -> Tuple[str, int, str]:
    asked = api.execution(inquiry_id)
    parent_id = str(asked.get("parent") or "")
    parent = api.execution(parent_id) if parent_id else {}
    params = parent.get("parameters") or {}
    rollout_id, kind = str(params.get("rollout_id") or ""), str(params.get("question") or "")
    if _ref(parent) != QUESTION_WORKFLOW or not re.match(ROLLOUT_ID_PATTERN, rollout_id) or \
            kind not in KINDS or not isinstance(params.get("batch"), int):
        raise NotOurQuestion(f"inquiry {inquiry_id} was not asked by a rollout's batch")
    batch = int(params["batch"])
    recorded = (RolloutState(store, rollout_id).batch(batch).get("questions") or {}).get(kind)
    if not isinstance(recorded, dict) or recorded.get("workflow") != parent_id:
        raise NotYetOurs(f"inquiry {inquiry_id} (workflow {parent_id}) is not the question "
                             f"rollout {rollout_id} asked for batch {batch + 1}")
    return rollout_id, batch, kind


class Questions:
    """Ask a batch's question and wait for its answer, through the st2 API."""

    def __init__(self, api: Any, state: RolloutState,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time,
                 answer_gap: float = ANSWER_GAP) -> None:
        self.api = api
        self.state = state
        self.sleep = sleep
        self.clock = clock
        self.answer_gap = answer_gap

    def asked(self, batch: int, kind: str) -> Dict[str, Any]:
        """The batch's latest question of this kind, as `ask` recorded it ({} if none)."""
        return (self.state.batch(batch).get("questions") or {}).get(kind) or {}

    def ask(self, batch: int, kind: str, message: str, users: List[str], roles: List[str],
            ttl: int, again: Optional[Dict[str, Any]] = None,
            reask_of: str = "") -> Dict[str, Any]:
        """Start the question's workflow and record it as the batch's question of this kind.
        `again`: the record of the question this one asks again, whose ttl it keeps (the new
        inquiry's own ttl is what is left of it); `reask_of`: the unattributed inquiry it asks
        again, marked asked again by the same write. A question that cannot be recorded is
        canceled: nobody waits for it."""
        started = self.api.post("executions", {"action": QUESTION_WORKFLOW, "parameters": {
            "rollout_id": self.state.id, "batch": batch, "question": kind,
            "schema": schema(kind, self.state.id, message), "users": users, "roles": roles,
            "ttl": ttl}})
        record: Dict[str, Any] = {"workflow": str(started["id"]), "asked": self.clock(),
                                  "ttl": ttl}
        if again:
            record.update(asked=again.get("asked", record["asked"]),
                          ttl=again.get("ttl", ttl),
                          asked_again=int(again.get("asked_again") or 0) + 1)

        def put(state: Dict[str, Any]) -> None:
            state.setdefault("questions", {})[kind] = record
            if reask_of:
                state.setdefault("reasked", {}).setdefault(reask_of, {})["workflow"] = \
                    record["workflow"]

        try:
            self.state.update_batch(batch, put)
        except Exception:
            with contextlib.suppress(Exception):  # the record's error is the one to tell
                self.cancel(record["workflow"])
            raise
        return record

    def claim_reask(self, batch: int, inquiry_id: str) -> Tuple[str, Dict[str, Any]]:
        """Who asks the unattributed `inquiry_id` again: ("ask", claim) this attempt (the claim
        is recorded first), ("asked", entry) nobody, its new question is entry["workflow"],
        or ("busy", entry) another attempt is asking it (its claim is younger than
        REASK_LEASE and not given up)."""
        now = self.clock()
        out: List[Tuple[str, Dict[str, Any]]] = []

        def put(state: Dict[str, Any]) -> None:
            reasked = state.setdefault("reasked", {})
            entry = reasked.get(inquiry_id) or {}
            if entry.get("workflow"):
                out.append(("asked", entry))
            elif entry and not entry.get("given_up") and \
                    now - float(entry.get("at") or 0) < REASK_LEASE:
                out.append(("busy", entry))
            else:
                reasked[inquiry_id] = {"at": now, "claim": uuid.uuid4().hex}
                out.append(("ask", reasked[inquiry_id]))

        self.state.update_batch(batch, put)
        return out[-1]

    def give_up_reask(self, batch: int, inquiry_id: str, claim: str) -> None:
        """This attempt could not ask again: the next attempt (orquesta's retry) may at once."""
        def put(state: Dict[str, Any]) -> None:
            entry = (state.get("reasked") or {}).get(inquiry_id) or {}
            if entry.get("claim") == claim and not entry.get("workflow"):
                entry["given_up"] = True

        self.state.update_batch(batch, put)

    def reasked(self, batch: int, inquiry_id: str) -> Dict[str, Any]:
        return (self.state.batch(batch).get("reasked") or {}).get(inquiry_id) or {}

    def inquiry(self, workflow_id: str) -> Optional[Dict[str, Any]]:
        """The question workflow's core.ask execution (None before it starts)."""
        children = self.api.get(f"executions/{workflow_id}/children?depth=1")
        return _latest([c for c in children if _ref(c) == ASK_ACTION])

    def ttl_left(self, asked: Dict[str, Any]) -> int:
        """Whole minutes left of a question's ttl (at least 1); 0: it has none."""
        ttl = float(asked.get("ttl") or 0)
        if ttl <= 0:
            return 0
        left = float(asked.get("asked") or 0) + ttl * 60.0 - self.clock()
        return max(1, int(math.ceil(left / 60.0)))

    def await_answer(self, batch: int, kind: str, wait: float = WAIT,
                     poll: float = POLL, reask: Optional[Reask] = None) -> Dict[str, Any]:
        """Wait up to `wait` seconds for the batch's question: answered, timed_out (the
        inquiry timed out or failed, or its ttl passed here), halted (the rollout was halted:
        the question is canceled) or still pending. An answer StackStorm recorded no requester
        for is asked again through `reask(kind, inquiry id, ttl minutes left)` (the result is
        then pending, naming the unattributed inquiry); without `reask` it is answered and
        record_answer refuses it."""
        asked = self.asked(batch, kind)
        if not asked.get("workflow"):
            raise ApiRefused(f"batch {batch} of rollout {self.state.id} has asked no "
                             f"{kind} question", 404)
        workflow_id = str(asked["workflow"])
        ttl_end = float(asked.get("asked") or 0) + float(asked.get("ttl") or 0) * 60.0
        end = self.clock() + wait
        while True:
            workflow = self.api.execution(workflow_id)
            inquiry = self.inquiry(workflow_id)
            status = str((inquiry or {}).get("status") or "")
            if status == "succeeded":
                inquiry_id = str(inquiry["id"])
                # read again: respond() writes resumed_by before the inquiry succeeds, and the
                # answer may have come after the first read
                workflow = self.api.execution(workflow_id)
                author, why = self.keep_author(batch, inquiry, workflow)
                ended = self.end_question(workflow, poll)
                if not author and reask is not None:
                    again = self.ask_again(batch, kind, inquiry_id, self.ttl_left(asked), why,
                                           reask, end, poll)
                    return {"status": PENDING, "workflow": again or workflow_id,
                            "unattributed": inquiry_id, "why": why,
                            "workflow_status": ended}
                return {"status": ANSWERED, "inquiry": inquiry_id, "workflow": workflow_id,
                        "workflow_status": ended}
            if status in COMPLETED or (inquiry is None and workflow.get("status") in COMPLETED):
                ended = status or str(workflow.get("status"))
                return {"status": TIMED_OUT, "inquiry": str((inquiry or {}).get("id") or ""),
                        "workflow": workflow_id, "why": f"the question ended {ended}"}
            halted = self.state.halted()
            if halted or (asked.get("ttl") and self.clock() >= ttl_end):
                self.cancel(workflow_id)
                out = HALTED if halted else TIMED_OUT
                return {"status": out, "workflow": workflow_id,
                        "why": (halted or {}).get("reason") or "its ttl passed"}
            if self.clock() >= end:
                return {"status": PENDING, "workflow": workflow_id}
            self.sleep(poll)

    def ask_again(self, batch: int, kind: str, inquiry_id: str, ttl_left: int, why: str,
                  reask: Reask, end: float, poll: float) -> str:
        """The question that asks the unattributed `inquiry_id` again, asked once however
        many attempts (orquesta's retries, a task run twice) get here: this attempt asks it
        when it claims it, else waits until `end` for the claiming attempt's question ("":
        not asked yet; the workflow runs await_answer again)."""
        verdict, entry = self.claim_reask(batch, inquiry_id)
        if verdict == "ask":
            try:
                return str(reask(kind, inquiry_id, ttl_left, why)["workflow"])
            except Exception:
                self.give_up_reask(batch, inquiry_id, str(entry["claim"]))
                raise
        while not entry.get("workflow") and self.clock() < end:
            self.sleep(poll)
            entry = self.reasked(batch, inquiry_id)
        return str(entry.get("workflow") or "")

    def keep_author(self, batch: int, inquiry: Dict[str, Any], workflow: Dict[str, Any]
                    ) -> Tuple[str, str]:
        """Keep who StackStorm recorded as answering the inquiry and return it with "", or
        ("", why nobody can be named): nothing is kept then. The first author kept wins."""
        inquiry_id = str(inquiry["id"])
        kept_before = self.author(batch, inquiry_id)
        if kept_before:
            return kept_before, ""
        author, why = answering_requester(inquiry, workflow, self.answer_gap)
        if not author:
            return "", why
        kept: List[str] = []

        def put(state: Dict[str, Any]) -> None:
            kept.append(state.setdefault("answer_by", {}).setdefault(inquiry_id, author))

        self.state.update_batch(batch, put)
        return (kept[-1] if kept else author), ""

    def author(self, batch: int, inquiry_id: str) -> str:
        return str((self.state.batch(batch).get("answer_by") or {}).get(inquiry_id) or "")

    def end_question(self, workflow: Dict[str, Any], poll: float = POLL,
                     settle: float = SETTLE) -> str:
        """An answered question's workflow: its status once it has ended by itself, else
        canceled (the race left it paused, resuming or running) and "canceling"."""
        end = self.clock() + settle
        while workflow.get("status") not in COMPLETED and self.clock() < end:
            self.sleep(poll)
            workflow = self.api.execution(str(workflow["id"]))
        if workflow.get("status") in COMPLETED:
            return str(workflow["status"])
        self.cancel(str(workflow["id"]))
        return "canceling"

    def cancel(self, workflow_id: str) -> None:
        """A question nobody may answer any more (ttl passed, rollout halted, answered):
        canceled, so that a late answer is refused by StackStorm itself."""
        try:
            self.api.put(f"executions/{workflow_id}", {"status": "canceling"})
        except ApiRefused as err:
            if err.status != 400:  # 400: it has ended already
                raise


def answering_requester(inquiry: Dict[str, Any], workflow: Dict[str, Any],
                        gap: float = ANSWER_GAP) -> Tuple[str, str]:
    """(who answered the inquiry, "") from its workflow's resumed_by and log, or ("", why
    nobody can be named): the workflow paused before the inquiry ended, and it was resumed
    at most once, within `gap` seconds of that end (st2's respond(): one request)."""
    author = str((workflow.get("context") or {}).get("resumed_by") or "")
    if not author:
        return "", BEFORE_PAUSE
    end = seconds_of(inquiry.get("end_timestamp"))
    log = [(str(e.get("status") or ""), seconds_of(e.get("timestamp")))
           for e in workflow.get("log") or [] if isinstance(e, dict)]
    if end is None or any(at is None for _status, at in log):
        return "", "StackStorm's records do not say when it was answered"
    if not any(status == "paused" and at is not None and at <= end + STAMP_PRECISION
               for status, at in log):
        return "", BEFORE_PAUSE
    resumes = [at for status, at in log if status == "resuming" and at is not None]
    if len(resumes) > 1:
        return "", (f"its workflow was resumed {len(resumes)} times, so the name StackStorm "
                    "recorded may not be who answered")
    if resumes and abs(resumes[0] - end) > gap:
        side = "before" if resumes[0] < end else "after"
        return "", (f"its workflow was resumed {abs(resumes[0] - end):.0f} s {side} the answer"
                    f" (by {author}), so the name StackStorm recorded may not be who answered")
    return author, ""


def seconds_of(value: Any) -> Optional[float]:
    """A StackStorm timestamp (ISO 8601, UTC) or epoch seconds as epoch seconds; None when it
    is missing or unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        match = re.match(r"^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(.*)$", text)
        if not match:
            return None
        fraction = (match.group(2) or "0")[:6].ljust(6, "0")
        try:
            when = datetime.datetime.fromisoformat(f"{match.group(1)}.{fraction}{match.group(3)}")
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()
