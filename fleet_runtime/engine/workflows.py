"""Conducting Orquesta workflows: starting a workflow, asking its conductor for the next tasks
and creating their action executions, feeding it the children's status changes, applying
pause/resume/cancel (and cascading them to child workflows), and propagating the conductor's
status to the workflow's execution. Also the task-execution service orquesta expressions use.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Dict, List, Optional

from orquesta import events as wf_events
from orquesta import exceptions as wf_exc
from orquesta import statuses as wf_statuses

from fleet_runtime import params as params_util
from fleet_runtime import st2ctx
from fleet_runtime.conductor import RuntimeConductor
from fleet_runtime.database import new_id
from fleet_runtime.engine.events import ControlRequested, StatusReported
from fleet_runtime.engine.model import (
    EngineState,
    ExecInfo,
    TaskRun,
    WorkflowRun,
    _iso,
)
from fleet_runtime.runtime_errors import NotFoundError, WorkflowLoadError
from fleet_runtime.statuses import (
    CANCELED,
    CANCELING,
    COMPLETED,
    DELAYED,
    FAILED,
    PAUSED,
    PAUSING,
    PENDING,
    REQUESTED,
    RESUMING,
    RUNNING,
    SCHEDULED,
    SUCCEEDED,
    TO_CONDUCTOR,
)


class WorkflowsMixin(EngineState):
    """The workflow engine: conductors, task executions, workflow controls."""

    # ================================================================== services for orquesta
    def expression_kv_get(self, user: str, key: str, decrypt: bool) -> Any:
        return self.datastore.expression_get(user, key, decrypt)

    def task_execution(self, wf_id: str, task_id: str, route: int) -> Optional[Dict[str, Any]]:
        for wf in self.workflows.values():
            if wf.wf_id == wf_id:
                tr = wf.tasks.get((task_id, route))
                if tr is not None:
                    return self._format_task(tr.id, wf_id, task_id, route, tr.status,
                                             tr.result, tr.start_ts, tr.end_ts)
        rows = self.store.task_executions("wf_ex_id=? AND task_id=? AND task_route=?",
                                          (wf_id, task_id, route))
        if not rows:
            return None
        row = rows[-1]
        return self._format_task(row["id"], wf_id, task_id, route, row["status"],
                                 row["result"], row["start_ts"], row["end_ts"])

    @staticmethod
    def _format_task(tex_id: str, wf_id: str, task_id: str, route: int, status: str,
                     result: Any, start: Optional[float], end: Optional[float]) -> Dict[str, Any]:
        return {
            "task_execution_id": tex_id,
            "workflow_execution_id": wf_id,
            "task_name": task_id,
            "task_id": task_id,
            "route": route,
            "result": result,
            "status": status,
            "start_timestamp": _iso(start),
            "end_timestamp": _iso(end),
        }

    # ------------------------------------------------------------------ workflow engine
    def _start_workflow(self, info: ExecInfo) -> None:
        action = self.registry.action(info.action)
        now = time.time()
        try:
            runner_params, action_params = params_util.render_final_params(
                action, info.parameters, info.context, self.pack_config(action.pack))
            wf_id = new_id()
            st2 = st2ctx.workflow_st2(info.context, action.ref, action.runner_type, info.id,
                                      wf_id, self.home.system_user)
            st2_ctx = {"st2": st2, "parent": info.context}
            spec = self.registry.inspect_workflow(action)
            conductor = RuntimeConductor(spec, context=st2_ctx, inputs=action_params)
            conductor.workflow_state  # noqa: B018  (renders inputs and vars)
        except Exception as e:  # loading, inspection, parameter or input rendering errors
            # st2's orquesta runner (start_workflow): failed, {"errors": [{message}], output}
            message = e.orquesta_message if isinstance(e, WorkflowLoadError) else str(e)
            self.queue.put(StatusReported(info.id, FAILED,
                            {"errors": [{"message": message}], "output": None}))
            return
        wf = WorkflowRun(info.id, wf_id, conductor, info.root_id, info.parent_id,
                         st2_ctx, runner_params.get("notify") or [], info.context.get("notify"))
        self.workflows[info.id] = wf
        if conductor.get_workflow_status() not in wf_statuses.ABENDED_STATUSES:
            conductor.request_workflow_status(wf_statuses.REQUESTED)
        data = conductor.serialize()
        record = {
            "id": wf_id, "action_ex_id": info.id, "spec": data["spec"], "graph": data["graph"],
            "input": data["input"], "context": data["context"], "state": data["state"],
            "errors": data["errors"], "log": data["log"], "output": data["output"],
            "status": data["state"]["status"], "notify": {"tasks": wf.notify_tasks,
                                                         "config": wf.notify_cfg},
        }
        self._writes.append(lambda: self.store.insert_workflow(record))
        info.status = RUNNING
        info.start_ts = now
        info.log.append({"status": RUNNING, "timestamp": now})
        log = list(info.log)
        self._writes.append(lambda: self.store.update_execution(
            info.id, status=RUNNING, start_ts=now, log=log))
        wf.reported_status = RUNNING
        self._dirty[wf.ex_id] = wf
        if conductor.get_workflow_status() not in wf_statuses.COMPLETED_STATUSES:
            self._advance(wf)
        self._sync_workflow(wf)

    def _advance(self, wf: WorkflowRun) -> None:
        """st2's request_next_tasks: mark the next tasks running, then request them."""
        c = wf.conductor
        if c.get_workflow_status() in (wf_statuses.REQUESTED, wf_statuses.SCHEDULED):
            c.request_workflow_status(wf_statuses.RUNNING)
        for _ in range(100000):
            next_tasks = c.get_next_tasks()
            if not next_tasks:
                break
            for task in next_tasks:
                if task["spec"].has_items() and task.get("items_count") == 0:
                    c.update_task_state(task["id"], task["route"],
                                        wf_events.ActionExecutionEvent(RUNNING))
                for spec in task["actions"]:
                    if spec.get("item_id") is None:
                        event = wf_events.ActionExecutionEvent(RUNNING)
                    else:
                        event = wf_events.TaskItemActionExecutionEvent(spec["item_id"], RUNNING)
                    c.update_task_state(task["id"], task["route"], event)
            completed_inline = False
            for task in next_tasks:
                try:
                    completed_inline |= self._request_task_execution(wf, task)
                except Exception as e:
                    c.request_workflow_status(wf_statuses.FAILED)
                    c.log_error(e, task_id=task["id"], route=task["route"])
                    return
            if not completed_inline:
                # Nothing finished synchronously: the next tasks come with the next event.
                break
        self._dirty[wf.ex_id] = wf

    def _request_task_execution(self, wf: WorkflowRun, task: Dict[str, Any]) -> bool:
        """Create the task's action executions; True when the task completed right away."""
        task_id, route, task_spec = task["id"], task["route"], task["spec"]
        now = time.time()
        key = (task_id, route)
        tr = wf.tasks.get(key)
        itemized = task_spec.has_items()
        if tr is None or not (tr.itemized and tr.status == RUNNING):
            attempt = 0 if tr is None else tr.attempt + 1
            tr = TaskRun(
                id=new_id(), wf=wf, task_id=task_id, route=route, itemized=itemized,
                items_count=task.get("items_count"), concurrency=task.get("concurrency"),
                status=RUNNING, start_ts=now, attempt=attempt,
            )
            if itemized and tr.items_count:
                tr.item_results = [None] * tr.items_count
                tr.item_status = [None] * tr.items_count
            wf.tasks[key] = tr
            row = {"id": tr.id, "wf_ex_id": wf.wf_id, "action_ex_id": wf.ex_id,
                   "task_id": task_id, "task_route": route, "status": RUNNING,
                   "itemized": itemized, "items_count": tr.items_count,
                   "concurrency": tr.concurrency, "attempt": attempt, "start_ts": now}
            self._writes.append(lambda: self.store.insert_task_execution(row))
        c = wf.conductor
        if task_spec.action is None or (itemized and tr.items_count == 0):
            tr.status = SUCCEEDED
            tr.end_ts = now
            tr.result = [] if itemized else None
            self._update_task_row(tr)
            c.update_task_state(task_id, route, wf_events.ActionExecutionEvent(
                SUCCEEDED, result=[] if itemized else None))
            return True
        for spec in task["actions"]:
            delay = _eval_delay(task, spec, itemized)
            self._request_action_execution(wf, tr, spec, delay)
        return False

    def _request_action_execution(
        self, wf: WorkflowRun, tr: TaskRun, spec: Dict[str, Any], delay: Optional[float]
    ) -> None:
        action_ref = spec["action"]
        action = self.registry.actions.get(action_ref)
        if action is None:
            raise NotFoundError(f'Unable to find action "{action_ref}".')
        ctx = st2ctx.task_action_context(wf.st2_ctx["st2"], wf.ex_id, wf.wf_id, tr.id,
                                         tr.task_id, tr.route, spec.get("item_id"), action_ref)
        given = spec.get("input") or {}
        # orquesta rendered the task input: it is data here, never rendered again
        live = params_util.render_live_params(action, given, ctx, self.pack_config(action.pack))
        params_util.validate_parameters(action, live)
        live = self.without_rendered_secrets(given, live)
        notify = wf.notify_cfg if (wf.notify_cfg and tr.task_id in wf.notify_tasks) else None
        ex_id = new_id()
        scaled = (delay or 0) * self.time_factor
        due = time.time() + scaled if delay else None
        record = self._new_record(
            ex_id, action, live, ctx, DELAYED if delay else SCHEDULED, wf.ex_id, wf.root_id,
            notify,
            task={"task_ex_id": tr.id, "task_id": tr.task_id, "task_route": tr.route,
                  "item_id": spec.get("item_id")},
            due_ts=due,
        )
        self._writes.append(lambda: self.store.insert_execution(record))
        self._track(record)
        if delay:
            self._add_timer(scaled, "start", ex_id)
        else:
            self._to_start.append(ex_id)

    def _sync_workflow(self, wf: WorkflowRun) -> None:
        """Propagate a conductor status change to the execution (and so to the parent)."""
        c = wf.conductor
        status = c.get_workflow_status()
        if status in wf_statuses.COMPLETED_STATUSES:
            c.render_workflow_output()
            status = c.get_workflow_status()
        if status == wf.reported_status:
            return
        info = self.active.get(wf.ex_id)
        if info is None:
            return
        wf.reported_status = status
        self._dirty[wf.ex_id] = wf
        if status in wf_statuses.COMPLETED_STATUSES:
            result: Dict[str, Any] = {"output": c.get_workflow_output() or None}
            if status == wf_statuses.CANCELED and wf.cancel_result is not None:
                result = dict(wf.cancel_result)
            if status in wf_statuses.ABENDED_STATUSES:
                result["errors"] = copy.deepcopy(c.errors)
            self.queue.put(StatusReported(wf.ex_id, status, result))
            self.workflows.pop(wf.ex_id, None)
            # Pending inquiries of a finished workflow cannot resume anything any more.
            for child in self._children(wf.ex_id):
                if child.status == PENDING:
                    self.queue.put(StatusReported(child.id, CANCELED, child.result))
            self._dirty[wf.ex_id] = wf
        elif status in (PAUSED, RUNNING, PAUSING, CANCELING, RESUMING):
            if status in (PAUSED, RUNNING):
                self.queue.put(StatusReported(wf.ex_id, status, None))
            else:
                now = time.time()
                info.status = status
                info.log.append({"status": status, "timestamp": now})
                log = list(info.log)
                self._writes.append(lambda: self.store.update_execution(
                    wf.ex_id, status=status, log=log))

    # ------------------------------------------------------------------ children's events
    def _apply_action_event(self, wf: WorkflowRun, payload: Dict[str, Any]) -> None:
        """st2's handle_action_execution_{completion,pending,pause,resume} for one child."""
        status = payload["status"]
        key = (payload["task_id"], payload["route"])
        tr = wf.tasks.get(key)
        if tr is None or tr.id != payload["task_ex_id"]:
            tr = self._load_task_run(wf, payload["task_ex_id"])
            if tr is None:
                return
        c = wf.conductor
        item_id = payload.get("item_id")
        if status == RUNNING:
            # A paused child workflow resumed: resume the task and this workflow.
            if tr.status == PAUSED:
                tr.status = RUNNING
                self._update_task_row(tr)
            try:
                c.request_workflow_status(wf_statuses.RUNNING)
            except wf_exc.InvalidWorkflowStatusTransition:
                pass
            c.update_task_state(tr.task_id, tr.route, wf_events.ActionExecutionEvent(RUNNING))
        elif status in TO_CONDUCTOR:
            if tr.status == PAUSED and status in COMPLETED:
                # a paused child finished without this workflow seeing it resume (its resume
                # came from above): resume the task in the conductor first, as st2 does when
                # the child's running status arrives, or the completion is not taken
                tr.status = RUNNING
                try:
                    c.request_workflow_status(wf_statuses.RUNNING)
                except wf_exc.InvalidWorkflowStatusTransition:
                    pass
                c.update_task_state(tr.task_id, tr.route, wf_events.ActionExecutionEvent(RUNNING))
            self._update_task_run(tr, status, payload.get("result"), item_id)
            if item_id is None:
                event = wf_events.ActionExecutionEvent(status, result=payload.get("result"))
            else:
                event = wf_events.TaskItemActionExecutionEvent(
                    item_id, status, result=payload.get("result"),
                    accumulated_result=tr.item_results,
                )
            c.update_task_state(tr.task_id, tr.route, event)
        else:
            return
        self._dirty[wf.ex_id] = wf
        if c.get_workflow_status() not in wf_statuses.COMPLETED_STATUSES:
            self._advance(wf)
        self._sync_workflow(wf)

    def _update_task_run(self, tr: TaskRun, status: str, result: Any, item_id: Optional[int]
                         ) -> None:
        if not tr.itemized or not tr.items_count:
            if status != tr.status or result is not None:
                tr.status = status
                if result is not None:
                    tr.result = result
        else:
            if item_id is None:
                return
            if tr.item_status[item_id] not in COMPLETED and status in COMPLETED:
                tr.items_done += 1
            elif tr.item_status[item_id] in COMPLETED and status not in COMPLETED:
                tr.items_done -= 1
            tr.item_status[item_id] = status
            tr.item_results[item_id] = result
            if tr.items_done == len(tr.item_status):
                tr.status = (SUCCEEDED if all(s == SUCCEEDED for s in tr.item_status)
                             else FAILED)
                tr.result = {"items": [{"status": s, "result": r} for s, r in
                                       zip(tr.item_status, tr.item_results)]}
        if tr.status in COMPLETED or status in (PAUSED, PENDING):
            if tr.status in COMPLETED:
                tr.end_ts = time.time()
            self._update_task_row(tr)

    def _update_task_row(self, tr: TaskRun) -> None:
        tex_id, status, result, end_ts = tr.id, tr.status, tr.result, tr.end_ts
        self._writes.append(lambda: self.store.update_task_execution(
            tex_id, status=status, result=result, end_ts=end_ts))

    def _load_task_run(self, wf: WorkflowRun, tex_id: Optional[str]) -> Optional[TaskRun]:
        if not tex_id:
            return None
        for tr in wf.tasks.values():
            if tr.id == tex_id:
                return tr
        rows = self.store.task_executions("id=?", (tex_id,))
        if not rows:
            return None
        return self._task_run_from_row(wf, rows[0])

    def _task_run_from_row(self, wf: WorkflowRun, row: Dict[str, Any]) -> TaskRun:
        tr = TaskRun(
            id=row["id"], wf=wf, task_id=row["task_id"], route=row["task_route"],
            itemized=bool(row["itemized"]), items_count=row["items_count"],
            concurrency=row["concurrency"], status=row["status"], start_ts=row["start_ts"],
            result=row["result"], end_ts=row["end_ts"], attempt=row["attempt"],
        )
        if tr.itemized and tr.items_count:
            tr.item_results = [None] * tr.items_count
            tr.item_status = [None] * tr.items_count
            children = self.store.find_executions("task_ex_id=?", (tr.id,))
            for child in children:
                if child["item_id"] is not None and child["item_id"] < tr.items_count:
                    tr.item_status[child["item_id"]] = child["status"]
                    if child["status"] in COMPLETED:
                        tr.item_results[child["item_id"]] = child["result"]
            tr.items_done = sum(1 for st in tr.item_status if st in COMPLETED)
        return tr

    # ------------------------------------------------------------------ controls
    def _apply_control(self, wf: WorkflowRun, op: str, mark: bool = True) -> None:
        """Apply pause/resume/cancel to a workflow and cascade it; `mark`: record the
        requester on the children (not for the runtime's internal resumes)."""
        c = wf.conductor
        status = c.get_workflow_status()
        if status in wf_statuses.COMPLETED_STATUSES:
            return
        if op == "pause":
            if status in (PAUSING, PAUSED):
                return
            c.request_workflow_status(wf_statuses.PAUSED)
            for child in self._children(wf.ex_id):
                if child.runner == "orquesta" and child.id in self.workflows and (
                        self.workflows[child.id].conductor.get_workflow_status()
                        in wf_statuses.RUNNING_STATUSES):
                    self._cascade(wf, child, "pause", mark)
        elif op == "resume":
            if status in wf_statuses.RUNNING_STATUSES and status != wf_statuses.RESUMING:
                return
            if status != wf_statuses.RESUMING:
                c.request_workflow_status(wf_statuses.RESUMING)
            for child in self._children(wf.ex_id):
                if child.runner == "orquesta" and child.id in self.workflows and (
                        self.workflows[child.id].conductor.get_workflow_status()
                        in (PAUSING, PAUSED)):
                    self._cascade(wf, child, "resume", mark)
            if c.get_workflow_status() not in wf_statuses.COMPLETED_STATUSES:
                self._advance(wf)
        elif op == "cancel":
            info = self.active.get(wf.ex_id)
            if info is not None and not any(ch.status not in COMPLETED
                                            for ch in self._children(wf.ex_id)):
                # st2's request_cancellation: nothing running below, so the execution ends
                # canceled with this result at once (no workflow output)
                wf.cancel_result = {"message": "Action canceled by user.",
                                    "user": info.context.get("cancelled_by") or self.user}
            c.request_workflow_status(wf_statuses.CANCELED)
            for child in self._children(wf.ex_id):
                if child.runner == "orquesta" and child.id in self.workflows:
                    self._cascade(wf, child, "cancel", mark)
                elif child.status in (DELAYED, SCHEDULED, REQUESTED, PENDING):
                    self._control_action(child, "cancel")
            if wf.parent_id and wf.root_id in self.workflows and wf.root_id != wf.ex_id:
                root = self.workflows[wf.root_id]
                if root.conductor.get_workflow_status() not in (CANCELING, CANCELED):
                    self.queue.put(ControlRequested(root.ex_id, "cancel"))
        self._dirty[wf.ex_id] = wf
        self._sync_workflow(wf)

    def _cascade(self, wf: WorkflowRun, child: ExecInfo, op: str, mark: bool) -> None:
        """Pass pause/resume/cancel to a child workflow. st2's orquesta runner requests it as
        the workflow's own context user (orquesta_runner.py pause/resume/cancel), which the
        child records as paused_by/resumed_by/cancelled_by."""
        cwf = self.workflows[child.id]
        if mark:
            owner = self.active.get(wf.ex_id)
            self._mark_requester(child.id, op, owner.context.get("user") if owner else None,
                                 deferred=True)
        seq = self.store.append_event(cwf.wf_id, "request", {"op": op, "internal": not mark})
        cwf.last_seq = max(cwf.last_seq, seq)
        self._apply_control(cwf, op, mark)

    def _children(self, ex_id: str) -> List[ExecInfo]:
        return [i for i in self.active.values() if i.parent_id == ex_id]


def _eval_delay(task: Dict[str, Any], spec: Dict[str, Any], itemized: bool) -> Optional[float]:
    """st2's eval_action_execution_delay."""
    delay = task.get("delay")
    concurrency = task.get("concurrency")
    if delay and not itemized:
        return delay
    if delay and itemized and not concurrency:
        return delay
    if delay and itemized and spec.get("item_id") is not None and spec["item_id"] < concurrency:
        return delay
    return None
