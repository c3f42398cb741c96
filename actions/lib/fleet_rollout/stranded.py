"""A batch workflow left paused after its question was answered: found and resumed.

On StackStorm an answer reaches the asking workflow in two steps that race each other
(st2common services/inquiry.py respond): the workflow's resume is only requested (an action
runner applies it later), then the inquiry succeeds and the workflow engine applies that at
once. When the completion comes first, the workflow stays paused with its next task staged and
nothing scheduled, until someone resumes it. (When the two steps interleave inside the workflow
engine, the answer can be lost from the workflow's state: it then stays `resuming` with nothing
scheduled, which no resume repairs; the pack reports that in chat.) The pack resumes a paused
one itself: the rule
`resume_answered_batch` runs `fleet_rollout.resume_answered` on every completed rollout
question, and `fleet_rollout.respond` checks the same after it answered.

Resuming records the resumer as the workflow's `resumed_by`, where the batch reads who answered
(approvals.answer_author). So before it resumes, the pack keeps the `resumed_by` StackStorm wrote
for the answer itself, bound to that inquiry's id, in the batch's state (`answer_by`);
record_answer reads it from there.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from fleet_rollout.names import check_rollout_id
from fleet_rollout.st2api import ApiRefused

BATCH_WORKFLOW = "fleet_rollout.rollout_batch"
ASK_ACTION = "core.ask"
COMPLETED = ("succeeded", "failed", "timeout", "canceled", "abandoned")
ACTIVE = ("requested", "scheduled", "delayed", "running", "pending", "pausing", "paused",
          "resuming", "canceling")

SETTLE = 2.0   # seconds a workflow looks stranded before the pack resumes it
STUCK = 30.0   # seconds a workflow may stay resuming after its answer before it is reported
WAIT = 60.0    # seconds the pack watches a workflow after its answer
POLL = 0.5


def _ref(execution: Dict[str, Any]) -> str:
    return str((execution.get("action") or {}).get("ref") or "")


def _started(execution: Dict[str, Any]) -> str:
    return str(execution.get("start_timestamp") or "")


def answered_question(children: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The workflow's latest child when it is a completed question and nothing else of the
    workflow is under way: what a batch left paused after its answer looks like. None when
    a question is still pending or any task is active (then it is paused for a reason)."""
    if not children or any(c.get("status") in ACTIVE for c in children):
        return None
    latest = max(children, key=_started)
    if _ref(latest) != ASK_ACTION or latest.get("status") not in COMPLETED:
        return None
    return latest


class Stranded:
    """Watch one batch workflow after an answer; resume it when it stays paused."""

    def __init__(self, api: Any, keep_author: Callable[[str, int, str, str], None],
                 record: Callable[[str, int, str, str], None],
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.keep_author = keep_author  # (rollout_id, batch, inquiry id, resumed_by)
        self.record = record            # (rollout_id, batch, workflow id, inquiry id)
        self.sleep = sleep
        self.clock = clock

    def asking_workflow(self, inquiry_id: str) -> Optional[Dict[str, Any]]:
        inquiry = self.api.execution(inquiry_id)
        if _ref(inquiry) != ASK_ACTION:
            return None
        parent = str(((inquiry.get("context") or {}).get("parent") or {}).get("execution_id")
                     or "")
        if not parent:
            return None
        workflow = self.api.execution(parent)
        return workflow if _ref(workflow) == BATCH_WORKFLOW else None

    def settle(self, inquiry_id: str, wait: float = WAIT, settle: float = SETTLE,
               stuck: float = STUCK) -> Dict[str, Any]:
        """Watch the workflow that asked `inquiry_id` until it runs (or ends) or `wait`
        seconds pass; resume it once it has looked stranded (paused) for `settle` seconds;
        report it stuck once it has stayed resuming for `stuck` seconds."""
        workflow = self.asking_workflow(inquiry_id)
        if workflow is None:
            return {"inquiry": inquiry_id, "resumed": False, "stuck": False,
                    "status": "not a rollout batch's question"}
        wf_id = str(workflow["id"])
        params = workflow.get("parameters") or {}
        rollout_id = check_rollout_id(str(params.get("rollout_id")))
        batch = int(params.get("batch"))
        out = {"inquiry": inquiry_id, "workflow": wf_id, "rollout_id": rollout_id,
               "batch": batch, "resumed": False, "stuck": False}
        deadline = self.clock() + wait
        since: Optional[float] = None
        while True:
            status = str(workflow.get("status"))
            out["status"] = status
            if status not in ("paused", "resuming"):
                return out
            children = self.api.get(f"executions/{wf_id}/children?depth=1")
            answered = answered_question(children)
            now = self.clock()
            if answered is None or str(answered["id"]) != inquiry_id:
                # waiting for another reason: the next question, a task still under way
                return out
            if since is None:
                since = now
            elif status == "paused" and now - since >= settle:
                author = str((workflow.get("context") or {}).get("resumed_by") or "")
                self.keep_author(rollout_id, batch, inquiry_id, author)
                try:
                    self.api.put(f"executions/{wf_id}", {"status": "resuming"})
                except ApiRefused as err:
                    if err.status != 400:  # 400: it is no longer paused
                        raise
                if not out["resumed"]:
                    self.record(rollout_id, batch, wf_id, inquiry_id)
                out["resumed"] = True
                since = None
            elif status == "resuming" and now - since >= stuck:
                out["stuck"] = True
                return out
            if now >= deadline:
                return out
            self.sleep(POLL)
            workflow = self.api.execution(wf_id)
