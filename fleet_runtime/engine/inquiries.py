"""Inquiries (the `inquirer` runner): the respond API and its checks, starting an inquiry
(pending, its trigger, its ttl timer), and persisting a response or a timeout together with
the resume of the root workflow that delivers it.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from fleet_runtime import params as params_util
from fleet_runtime.engine.events import (
    ActionEventArrived,
    Event,
    InquiryAnswered,
    StatusReported,
    WorkflowControlled,
)
from fleet_runtime.engine.model import (
    LOG,
    EngineState,
    ExecInfo,
    WorkflowRun,
)
from fleet_runtime.packs import Action
from fleet_runtime.runtime_errors import ExecutionStateError, InquiryError, RuntimeErrorBase
from fleet_runtime.schema import validate_instance
from fleet_runtime.statuses import (
    FAILED,
    PAUSED,
    PAUSING,
    PENDING,
    SUCCEEDED,
    TIMEOUT,
)

# seconds within which the two halves of an answer reach the engine under st2_races
RACE_WINDOW = 0.3


class InquiriesMixin(EngineState):
    """Inquiry API, inquiry start and ttl, persisted responses and timeouts."""

    # ================================================================== inquiries (API)
    def inquiry(self, ex_id: str) -> Dict[str, Any]:
        record = self._execution(ex_id)
        if record["runner"] != "inquirer":
            raise InquiryError(f'Execution "{record["id"]}" is not an inquiry.')
        return record

    def respond(self, ex_id: str, response: Any, requester: Optional[str] = None) -> Dict[str, Any]:
        record = self.inquiry(ex_id)
        requester = requester or self.user
        if record["status"] == TIMEOUT:
            raise InquiryError(f'Inquiry "{record["id"]}" timed out and cannot be responded to.')
        if record["status"] != PENDING or record["id"] in self._answered:
            # an answer accepted a moment ago is written with the engine's next batch: until
            # then the record still says pending, and a second answer must not be accepted too
            status = record["status"] if record["status"] != PENDING else SUCCEEDED
            raise InquiryError(f'Inquiry "{record["id"]}" has already been responded to'
                               f' (status {status}).')
        result = record["result"] or {}
        roles = result.get("roles") or []
        users = result.get("users") or []
        requester_roles = self.home.roles_of(requester)
        roles_ok = not roles or any(r in requester_roles for r in roles)
        users_ok = not users or requester in users
        if not (roles_ok and users_ok):
            why = []
            if not users_ok:
                why.append(f"users allowed: {', '.join(users)}")
            if not roles_ok:
                why.append(f"roles allowed: {', '.join(roles)}; roles of {requester}:"
                           f" {', '.join(requester_roles) or 'none'}")
            raise InquiryError(f'User "{requester}" is not authorized to respond to inquiry'
                               f' "{record["id"]}" ({"; ".join(why)}).')
        try:
            response = validate_instance(response, result.get("schema") or {},
                                         use_default=True, none_ok=True)
        except Exception as e:  # st2: InvalidInquiryResponse, HTTP 400
            raise InquiryError(f'Response for inquiry "{record["id"]}" did not pass schema'
                               f" validation. {getattr(e, 'message', e)}") from e
        parent = self.store.get_execution(record["parent_id"]) if record["parent_id"] else None
        if parent is not None and parent["status"] == PAUSING:
            # st2's respond resumes the parent first; request_resume refuses a workflow still
            # pausing (other tasks running): the API answers 500 and the inquiry stays pending
            raise ExecutionStateError(
                f'Unable to resume liveaction "{parent["id"]}" because it is in "pausing"'
                ' state and not in "paused" state.')
        self._answered.add(record["id"])
        self.queue.put(InquiryAnswered(record["id"], response, requester))
        return {"id": record["id"], "response": response}

    # ------------------------------------------------------------------ starting an inquiry
    def _start_inquiry(self, info: ExecInfo, action: Action) -> None:
        try:
            runner_params, _ = params_util.render_final_params(
                action, info.parameters, info.context, self.pack_config(action.pack))
        except RuntimeErrorBase as e:
            self.queue.put(StatusReported(info.id, FAILED, {"error": str(e)}))
            return
        result = {
            "schema": runner_params.get("schema"),
            "roles": runner_params.get("roles") or [],
            "users": runner_params.get("users") or [],
            "route": runner_params.get("route") or "",
            "ttl": runner_params.get("ttl"),
        }
        self.queue.put(StatusReported(info.id, PENDING, result))
        self._post.append(lambda: self.emit_trigger(
            "core.st2.generic.inquiry", {"id": info.id, "route": result["route"]}))
        self._arm_ttl(info.id, time.time(), result["ttl"])

    def _hold_until_paused(self, info: ExecInfo, status: str, payload: Dict[str, Any]) -> bool:
        """st2_races: an inquiry's pending status, and what follows it, reach the workflow that
        asked a moment after the inquiry is visible and answerable. On st2 the inquirer runner
        returns pending, the action runner writes it, and the workflow engine pauses the
        workflow only when it handles that status from the message bus
        (services/workflows.py handle_action_execution_pending); respond() in between finds
        the workflow running, requests no resume and records no requester."""
        held = self._held_events.get(info.id)
        if held is not None:
            held[1].append(payload)
            return True
        if status != PENDING or info.runner != "inquirer" or not self.home.st2_races:
            return False
        self._held_events[info.id] = (str(info.parent_id), [payload])
        first = self.home.st2_races == "completion-first"
        window = self.home.st2_pause_window
        self._add_timer(window if first else self._race_rng.uniform(0, window),
                        "pending_arrives", info.id)
        return True

    def _persist_pending_arrived(self, ex_id: str) -> List[Event]:
        """The held statuses of an inquiry reach its workflow, in the order they came."""
        parent_id, payloads = self._held_events.pop(ex_id, ("", []))
        wf = self.workflows.get(parent_id)
        if wf is None:
            return []
        return [ActionEventArrived(wf, self.store.append_event(wf.wf_id, "action", payload),
                                   payload) for payload in payloads]

    def _arm_ttl(self, ex_id: str, start_ts: float, ttl: Any) -> None:
        try:
            ttl_minutes = float(ttl or 0)
        except (TypeError, ValueError):
            return
        if ttl_minutes <= 0:
            return
        due = start_ts + ttl_minutes * 60.0 * self.time_factor
        self._add_timer(due - time.time(), "ttl", ex_id, active_work=False)

    # ------------------------------------------------------------------ responses, timeouts
    def _persist_respond(self, ex_id: str, response: Any, requester: Optional[str]
                         ) -> List[Event]:
        info = self.active.get(ex_id)
        if info is None or info.status != PENDING:
            self._answered.discard(ex_id)
            return []
        # st2's inquiry service (services/inquiry.py respond), for an inquiry in an orquesta
        # workflow: resume the inquiry's own workflow, as the requester (recorded there as
        # resumed_by), before the inquiry succeeds; not the root: orquesta resumes one branch
        # while others stay paused, and the resume climbs to the paused workflows above as the
        # resumed one reports running (workflows.py _apply_action_event, st2's
        # handle_action_execution_resume). Resuming the root instead left the inquiry's workflow
        # paused whenever a parallel branch above it kept the root running.
        own = self.workflows.get(info.parent_id or "")
        paused = own is not None and own.conductor.get_workflow_status() == PAUSED
        if paused and own is not None:
            parent = self.active.get(own.ex_id)
            if parent is not None and parent.status == PAUSED:
                self._mark_requester(own.ex_id, "resume", requester)
            if self.home.st2_races:
                # st2: respond() only requests the resume (an action runner applies it later)
                # and then succeeds the inquiry, whose completion the workflow engine applies
                # at once: the two reach the workflow in either order
                first = self.home.st2_races == "completion-first"
                self._add_timer(RACE_WINDOW if first else self._race_rng.uniform(0, RACE_WINDOW),
                                "answer_resume", (own.ex_id, ex_id))
                self._add_timer(0.0 if first else self._race_rng.uniform(0, RACE_WINDOW),
                                "answer_complete", (ex_id, response, requester))
                return []
        events_out: List[Event] = []
        if paused and own is not None:
            events_out.append(self._internal_resume(own))
        events_out.extend(self._persist_inquiry_succeeded(ex_id, response, requester))
        return events_out

    def _persist_inquiry_succeeded(self, ex_id: str, response: Any, requester: Optional[str]
                                   ) -> List[Event]:
        self._answered.discard(ex_id)
        info = self.active.get(ex_id)
        if info is None or info.status != PENDING:
            return []
        result = dict(info.result or {})
        result["response"] = response
        info.context.setdefault("inquiry", {})["responder"] = requester
        self.store.update_execution(info.id, context=info.context)
        status_event = self._persist_status(ex_id, SUCCEEDED, result)
        return [status_event] if status_event else []

    def _persist_resume_arrived(self, wf_ex_id: str, inquiry_id: str) -> List[Event]:
        """The resume an answer requested reaches its workflow (st2_races). After the answer's
        completion it is lost, as on st2: the completion met a paused conductor, which staged
        the next task and scheduled nothing (orquesta has no transition for a task completing
        in a paused workflow), and the workflow stays paused until someone resumes it."""
        own = self.workflows.get(wf_ex_id)
        if own is None or own.conductor.get_workflow_status() != PAUSED:
            return []
        inquiry = self.active.get(inquiry_id)
        if inquiry is None or inquiry.status != PENDING:
            LOG.warning("st2 race: the resume requested by the answer to inquiry %s reached "
                        "workflow %s after the answer itself: the workflow stays paused",
                        inquiry_id, wf_ex_id)
            return []
        return [self._internal_resume(own)]

    def _internal_resume(self, wf: WorkflowRun) -> WorkflowControlled:
        """Resume a workflow to deliver an answer (its own) or a timeout (the root, whose resume
        reaches every paused workflow below it), recording no requester below it."""
        seq = self.store.append_event(wf.wf_id, "request", {"op": "resume", "internal": True})
        return WorkflowControlled(wf, "resume", seq, internal=True)

    def _persist_ttl(self, ex_id: str) -> List[Event]:
        """An inquiry past its ttl: like st2's garbage collector, mark it timed out and ask
        the root workflow to resume (the resume is recorded first: st2's GC updates the root
        synchronously, the timeout reaches the conductor later through the message bus)."""
        info = self.active.get(ex_id)
        if info is None or info.status != PENDING:
            return []
        events_out: List[Event] = []
        root = self.workflows.get(info.root_id)
        if root is not None and root.ex_id != info.id and (
                root.conductor.get_workflow_status() in (PAUSING, PAUSED)):
            # st2's garbage collector (garbage_collection/inquiries.py) resumes the root as the
            # system user
            root_info = self.active.get(root.ex_id)
            if root_info is not None and root_info.status == PAUSED:
                self._mark_requester(root.ex_id, "resume", self.home.system_user)
            events_out.append(self._internal_resume(root))
        status_event = self._persist_status(ex_id, TIMEOUT, info.result)
        if status_event:
            events_out.append(status_event)
        return events_out
