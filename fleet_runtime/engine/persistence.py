"""Persistence of the engine's state: the two transactions of a batch, execution status rows,
workflow events, crash recovery and the `settled` query.

Transaction 1 (`_process_batch`) writes every incoming status change / control request as an
event before it is applied; transaction 2 (`_flush`) commits the deferred writes (`_writes`),
conductor snapshots (`_dirty`) and new children, then starts them. `recover` rebuilds the
in-memory state of a killed engine from the store.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from orquesta import statuses as wf_statuses

from fleet_runtime.conductor import RuntimeConductor
from fleet_runtime.engine.events import (
    ActionControlled,
    ActionEventArrived,
    ControlRequested,
    Event,
    InquiryAnswered,
    InquiryCompleted,
    InquiryExpired,
    Message,
    PendingArrived,
    ResumeArrived,
    StartRequested,
    StatusChanged,
    StatusReported,
    WorkerDone,
    WorkerStarted,
    WorkflowControlled,
)
from fleet_runtime.engine.model import (
    ABANDONED_ERROR,
    LOG,
    REQUESTER_KEYS,
    EngineState,
    ExecInfo,
    WorkflowRun,
)
from fleet_runtime.statuses import (
    ABANDONED,
    COMPLETED,
    DELAYED,
    NOT_STARTED,
    PAUSED,
    PENDING,
    REQUESTED,
    RUNNING,
    SCHEDULED,
    TO_CONDUCTOR,
    sql_list,
)


class PersistenceMixin(EngineState):
    """Store writes, durability points, event persistence and recovery."""

    # ================================================================== batches (transactions)
    def _process_batch(self, msgs: List[Message]) -> None:
        # Transaction 1: persist every incoming message (status rows, workflow events) ...
        with self.store.transaction():
            persisted = [self._persist(msg) for msg in msgs]
        self._durable_point()
        # ... then apply what was persisted, in the order it came.
        for msg, events in zip(msgs, persisted):
            if isinstance(msg, StartRequested):
                if msg.ex_id in self.active:
                    self._to_start.append(msg.ex_id)
            for event in events:
                self._apply(event)

    def _persist(self, msg: Message) -> List[Event]:
        """Write one message to the store; the events to apply once the transaction is in."""
        if isinstance(msg, StatusReported):
            return _listed(self._persist_status(msg.ex_id, msg.status, msg.result))
        if isinstance(msg, ControlRequested):
            return _listed(self._persist_control(msg.ex_id, msg.op, msg.requester))
        if isinstance(msg, InquiryAnswered):
            return self._persist_respond(msg.ex_id, msg.response, msg.requester)
        if isinstance(msg, InquiryCompleted):
            return self._persist_inquiry_succeeded(msg.ex_id, msg.response, msg.requester)
        if isinstance(msg, ResumeArrived):
            return self._persist_resume_arrived(msg.wf_ex_id, msg.inquiry_id)
        if isinstance(msg, PendingArrived):
            return self._persist_pending_arrived(msg.ex_id)
        if isinstance(msg, InquiryExpired):
            return self._persist_ttl(msg.ex_id)
        if isinstance(msg, WorkerStarted):
            info = self.active.get(msg.ex_id)
            if info is not None and info.status in NOT_STARTED:
                info.status = RUNNING
                info.start_ts = msg.ts
                info.log.append({"status": RUNNING, "timestamp": msg.ts})
        elif isinstance(msg, WorkerDone):
            self._in_worker -= 1
            info = self.active.get(msg.dead) if msg.dead else None
            if info is not None:
                self._release_policy_slot(info)
        return []

    def _flush(self) -> None:
        """Transaction 2: snapshots, task executions, new children; then start them."""
        writes, self._writes = self._writes, []
        dirty, self._dirty = self._dirty, {}
        if writes or dirty:
            with self.store.transaction():
                for write in writes:
                    write()
                for wf in dirty.values():
                    c = wf.conductor
                    self.store.save_workflow_state(
                        wf.wf_id,
                        c.state_json(),
                        c.errors,
                        c.log,
                        c.get_workflow_output(),
                        c.get_workflow_status(),
                        wf.last_seq,
                    )
            self._durable_point()
        to_start, self._to_start = self._to_start, []
        for ex_id in to_start:
            info = self.active.get(ex_id)
            if info is not None and info.status in NOT_STARTED:
                self._start(info)
        post, self._post = self._post, []
        for fn in post:
            try:
                fn()
            except Exception:  # pragma: no cover - triggers must not kill the engine
                LOG.exception("post-commit action failed")
        if self._writes or self._dirty or self._to_start or self._post:
            self._flush()

    def _durable_point(self) -> None:
        """Test hook: SIGKILL this process at the N-th committed engine transaction."""
        self._commits += 1
        if self._kill_after is not None and self._commits >= self._kill_after:
            os.kill(os.getpid(), 9)

    # ------------------------------------------------------------------ persisting events
    def _set_status_row(self, info: ExecInfo, status: str, result: Any) -> Dict[str, Any]:
        now = time.time()
        fields: Dict[str, Any] = {"status": status}
        if info.status != status:
            info.log.append({"status": status, "timestamp": now})
            fields["log"] = info.log
        if result is not None or status in COMPLETED:
            fields["result"] = result
            info.result = result
        if status in COMPLETED:
            fields["end_ts"] = now
            if info.start_ts is None:
                info.start_ts = now
                fields["start_ts"] = now
        elif status in (RUNNING, PENDING) and info.start_ts is None:
            info.start_ts = now
            fields["start_ts"] = now
        info.status = status
        self.store.update_execution(info.id, **fields)
        return fields

    def _persist_status(self, ex_id: str, status: str, result: Any) -> Optional[StatusChanged]:
        info = self.active.get(ex_id)
        if info is None:
            return None
        if info.status in COMPLETED:
            return None
        # the execution record is what the API, the stream and the CLI show: secrets masked
        # there; the workflow that waits for this execution reads the result as the action
        # returned it (st2 masks what it shows, never what orquesta reads)
        shown = self.masker.mask(result)
        self._set_status_row(info, status, shown)
        event = StatusChanged(info, status, shown)
        parent = self.workflows.get(info.parent_id or "")
        if parent is not None and status in TO_CONDUCTOR | {RUNNING}:
            payload = {
                "ex_id": ex_id,
                "task_ex_id": info.task_ex_id,
                "task_id": info.task_id,
                "route": info.task_route,
                "item_id": info.item_id,
                "status": status,
                "result": result,
            }
            if self._hold_until_paused(info, status, payload):
                return event  # reaches the workflow later (PendingArrived)
            event.seq = self.store.append_event(parent.wf_id, "action", payload)
            event.payload = payload
            event.wf = parent
        return event

    def _mark_requester(self, ex_id: str, op: str, requester: Optional[str],
                        deferred: bool = False) -> None:
        """st2's request_pause/resume/cancellation record who asked in the execution's context
        (paused_by, resumed_by, cancelled_by): the API shows it; the pack reads resumed_by to
        learn who answered a question. `deferred`: written with the engine's next commit."""
        info = self.active.get(ex_id)
        if info is None or not requester:
            return
        info.context[REQUESTER_KEYS[op]] = requester
        if deferred:
            context = info.context
            self._writes.append(lambda: self.store.update_execution(ex_id, context=context))
        else:
            self.store.update_execution(ex_id, context=info.context)

    def _persist_control(self, ex_id: str, op: str,
                         requester: Optional[str] = None) -> Optional[Event]:
        self._mark_requester(ex_id, op, requester)
        wf = self.workflows.get(ex_id)
        if wf is not None:
            seq = self.store.append_event(wf.wf_id, "request", {"op": op})
            return WorkflowControlled(wf, op, seq)
        info = self.active.get(ex_id)
        if info is None:
            return None
        return ActionControlled(info, op)

    # ------------------------------------------------------------------ applying persisted events
    def _apply(self, event: Event) -> None:
        if isinstance(event, StatusChanged):
            self._apply_status(event)
        elif isinstance(event, ActionEventArrived):
            if event.wf.ex_id in self.workflows:
                event.wf.last_seq = max(event.wf.last_seq, event.seq)
                self._apply_action_event(event.wf, event.payload)
        elif isinstance(event, WorkflowControlled):
            event.wf.last_seq = max(event.wf.last_seq, event.seq)
            self._apply_control(event.wf, event.op, mark=not event.internal)
        else:
            self._control_action(event.info, event.op)

    def _apply_status(self, event: StatusChanged) -> None:
        info, status = event.info, event.status
        if status in COMPLETED:
            self.active.pop(info.id, None)
            self._release_policy_slot(info)
            self._post.append(
                lambda i=info, s=status, r=event.result: self._on_completed(i, s, r))
        wf = event.wf
        if wf is not None and wf.ex_id in self.workflows:
            wf.last_seq = max(wf.last_seq, event.seq)
            self._apply_action_event(wf, event.payload)

    # ================================================================== recovery
    def recover(self) -> None:
        """Resume everything a previous (killed) engine left unfinished."""
        rows = self.store.find_executions(
            f"status NOT IN ({sql_list(COMPLETED)})")
        for row in rows:
            self._track(row)
        events_by_wf: Dict[str, List[Dict[str, Any]]] = {}
        # Workflows: reload snapshots and replay the events after them.
        for row in rows:
            if row["runner"] != "orquesta" or row["status"] in NOT_STARTED:
                continue
            wf_row = self.store.get_workflow(action_ex_id=row["id"])
            if wf_row is None:
                info = self.active[row["id"]]
                info.status = SCHEDULED
                continue
            wf = self._load_workflow(row, wf_row)
            self.workflows[row["id"]] = wf
            events_by_wf[wf.ex_id] = self.store.events_after(wf.wf_id, 0)
        for wf in list(self.workflows.values()):
            for event in events_by_wf.get(wf.ex_id, []):
                if event["seq"] <= wf.last_seq:
                    continue
                wf.last_seq = event["seq"]
                if event["kind"] == "action":
                    self._apply_action_event(wf, event["payload"])
                elif event["kind"] == "request":
                    self._apply_control(wf, event["payload"]["op"],
                                        mark=not event["payload"].get("internal"))
        reported = {
            (e["payload"]["ex_id"], e["payload"]["status"])
            for evs in events_by_wf.values() for e in evs if e["kind"] == "action"
        }
        # Children whose current status the parent has not heard of; abandoned actions. The
        # execution of a runner killed (under dead_runner, or an action runner process that
        # died) is left as it is: st2 reconciles nothing after a runner dies.
        dead = self.dead_runner_executions() | self.lost
        with self.store.transaction():
            for info in list(self.active.values()):
                parent = self.workflows.get(info.parent_id or "")
                if info.id in dead:
                    continue
                if info.runner not in ("orquesta", "inquirer") and info.status == RUNNING:
                    reported.add((info.id, ABANDONED))
                    abandoned = self._persist_status(info.id, ABANDONED,
                                                     {"error": ABANDONED_ERROR})
                    if abandoned:
                        self._apply(abandoned)
                    continue
                if parent is None:
                    continue
                last = None
                for event in events_by_wf.get(parent.ex_id, []):
                    if event["kind"] == "action" and event["payload"]["ex_id"] == info.id:
                        last = event["payload"]["status"]
                if info.status in (PENDING, PAUSED, RUNNING) and info.status != last and (
                        info.status != RUNNING or last == PAUSED):
                    seq = self.store.append_event(parent.wf_id, "action", {
                        "ex_id": info.id, "task_ex_id": info.task_ex_id, "task_id": info.task_id,
                        "route": info.task_route, "item_id": info.item_id,
                        "status": info.status, "result": info.result})
                    parent.last_seq = max(parent.last_seq, seq)
            for ex_id, wf in list(self.workflows.items()):
                for row in self.store.find_executions(
                        f"parent_id=? AND status IN ({sql_list(COMPLETED)})", (ex_id,)):
                    if (row["id"], row["status"]) in reported:
                        continue
                    reported.add((row["id"], row["status"]))
                    payload = {"ex_id": row["id"], "task_ex_id": row["task_ex_id"],
                               "task_id": row["task_id"], "route": row["task_route"],
                               "item_id": row["item_id"], "status": row["status"],
                               "result": row["result"]}
                    seq = self.store.append_event(wf.wf_id, "action", payload)
                    wf.last_seq = max(wf.last_seq, seq)
                    self._apply_action_event(wf, payload)
        # Workflows that completed in their snapshot but whose execution row did not follow.
        for wf in list(self.workflows.values()):
            info = self.active.get(wf.ex_id)
            if info is not None:
                wf.reported_status = info.status
            self._dirty[wf.ex_id] = wf
            status = wf.conductor.get_workflow_status()
            if status in wf_statuses.RUNNING_STATUSES and wf.ex_id in self.workflows:
                self._advance(wf)
            self._sync_workflow(wf)
        # Executions to (re)start, delays and inquiry timeouts to re-arm; an execution lost
        # with its action runner holds its concurrency policy slot, as its running LiveAction
        # does on st2, until someone completes it.
        for info in list(self.active.values()):
            if info.id in self.lost and info.status == RUNNING:
                self._occupy_policy_slots(info)
            if info.status in (REQUESTED, SCHEDULED):
                self._to_start.append(info.id)
            elif info.status == DELAYED:
                if info.due_ts:
                    self._add_timer(info.due_ts - time.time(), "start", info.id)
                else:
                    self._to_start.append(info.id)
            elif info.status == PENDING and info.runner == "inquirer":
                self._arm_ttl(info.id, info.start_ts or time.time(),
                              (info.result or {}).get("ttl"))
        self._flush()

    def _load_workflow(self, row: Dict[str, Any], wf_row: Dict[str, Any]) -> WorkflowRun:
        data = {
            "spec": wf_row["spec"], "graph": wf_row["graph"], "input": wf_row["input"],
            "context": wf_row["context"], "state": wf_row["state"], "output": wf_row["output"],
            "errors": wf_row["errors"], "log": wf_row["log"],
        }
        conductor = RuntimeConductor.deserialize(data)
        notify = wf_row.get("notify") or {}
        wf = WorkflowRun(row["id"], wf_row["id"], conductor, row["root_id"], row["parent_id"],
                         wf_row["context"], notify.get("tasks") or [], notify.get("config"))
        wf.last_seq = wf_row["applied_seq"]
        for tex in self.store.task_executions("wf_ex_id=?", (wf.wf_id,)):
            tr = self._task_run_from_row(wf, tex)
            wf.tasks[(tr.task_id, tr.route)] = tr
        return wf

    # ================================================================== queries
    def settled(self, ex_id: str) -> bool:
        """Finished, or waiting for a person (paused / pending inquiry) with nothing in flight."""
        record = self.store.get_execution(ex_id)
        if record is None:
            return True
        if record["status"] in COMPLETED:
            return True
        if record["status"] in (PAUSED, PENDING):
            return True
        return False


def _listed(event: Optional[Event]) -> List[Event]:
    return [] if event is None else [event]
