"""The embedded StackStorm engine: executions, the Orquesta workflow engine, runners, triggers.

One engine thread owns every workflow conductor and all workflow state; a thread pool runs
actions that leave the process (python-script and local runners, chat posts). Durability:

1. every status change of an execution (a worker's result, an inquiry going pending, a child
   workflow finishing, a pause/resume/cancel request, an inquiry response) is written to SQLite
   as an event (with the execution row) *before* the engine applies it (transaction 1);
2. the engine applies the batch of events to the conductors (orquesta's own state machines),
   asks them for the next tasks and creates the child executions;
3. the conductor snapshots, task executions and new child executions are committed together
   (transaction 2); only then are the children started.

A runtime killed at any moment recovers on its next start (`Runtime.recover`): snapshots are
reloaded and the events after them replayed; children that were started but never reported
(status `running`) are marked `abandoned` like st2 marks executions of a dead action runner,
and orquesta turns that into a failed task (retry / remediation decide what happens next);
children created but never started are started; delays and inquiry timeouts are re-armed.
"""
from __future__ import annotations

import copy
import fcntl
import heapq
import itertools
import logging
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from orquesta import events as wf_events
from orquesta import exceptions as wf_exc
from orquesta import statuses as wf_statuses

from fleet_runtime import (
    chatlog,
    compat,
    runners,
    st2ctx,
    templating,
)
from fleet_runtime import params as params_util
from fleet_runtime import rules as rules_util
from fleet_runtime.conductor import RuntimeConductor
from fleet_runtime.datastore import Datastore
from fleet_runtime.errors import (
    ExecutionStateError,
    InquiryError,
    MetadataError,
    NotFoundError,
    ParameterError,
    RuntimeErrorBase,
    WorkflowLoadError,
)
from fleet_runtime.home import RuntimeHome
from fleet_runtime.packs import Action, Registry
from fleet_runtime.schema import validate_instance
from fleet_runtime.store import Store, new_id

LOG = logging.getLogger("fleet_runtime.engine")

REQUESTED = "requested"
SCHEDULED = "scheduled"
DELAYED = "delayed"
RUNNING = "running"
PENDING = "pending"
PAUSING = "pausing"
PAUSED = "paused"
RESUMING = "resuming"
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMEOUT = "timeout"
ABANDONED = "abandoned"
CANCELING = "canceling"
CANCELED = "canceled"

COMPLETED = (SUCCEEDED, FAILED, TIMEOUT, ABANDONED, CANCELED)
REQUESTER_KEYS = st2ctx.REQUESTER_KEYS
PAUSE_STATES = (PAUSING, PAUSED)
# Statuses of a task's action execution that the conductor is told about (st2's list).
TO_CONDUCTOR = set(COMPLETED) | {PAUSED, PENDING}

NOOP_RESULT = {"failed": False, "succeeded": True, "return_code": 0, "stdout": "", "stderr": ""}
ABANDONED_ERROR = (
    "The runtime stopped while this action was running; the execution is abandoned (as st2"
    " abandons executions of an action runner that went away)."
)
INLINE_RUNNERS = ("noop",)
WORKER_RUNNERS = ("python-script", "local-shell-cmd", "local-shell-script", "announcement")

# A hook for the kill/resume tests: SIGKILL ourselves after N committed engine batches.
ENV_KILL_AFTER = "FLEET_ROLLOUT_KILL_AFTER_COMMITS"


@dataclass
class ExecInfo:
    """What the engine keeps in memory about an execution that is not finished."""

    id: str
    action: str
    runner: str
    status: str
    parent_id: Optional[str]
    root_id: str
    context: Dict[str, Any]
    parameters: Dict[str, Any]
    task_ex_id: Optional[str] = None
    task_id: Optional[str] = None
    task_route: Optional[int] = None
    item_id: Optional[int] = None
    start_ts: Optional[float] = None
    due_ts: Optional[float] = None
    log: List[Dict[str, Any]] = field(default_factory=list)
    handle: Optional[runners.ProcessHandle] = None
    result: Any = None
    dispatched: bool = False


@dataclass
class TaskRun:
    """A task execution of a workflow (st2's TaskExecutionDB)."""

    id: str
    wf: WorkflowRun
    task_id: str
    route: int
    itemized: bool
    items_count: Optional[int]
    concurrency: Optional[int]
    status: str
    start_ts: float
    item_results: List[Any] = field(default_factory=list)
    item_status: List[Optional[str]] = field(default_factory=list)
    result: Any = None
    end_ts: Optional[float] = None
    attempt: int = 0
    items_done: int = 0


class WorkflowRun:
    """An orquesta workflow execution driven by this engine."""

    def __init__(
        self,
        ex_id: str,
        wf_id: str,
        conductor: RuntimeConductor,
        root_id: str,
        parent_id: Optional[str],
        st2_ctx: Dict[str, Any],
        notify_tasks: List[str],
        notify_cfg: Optional[Dict[str, Any]],
    ) -> None:
        self.ex_id = ex_id
        self.wf_id = wf_id
        self.conductor = conductor
        self.root_id = root_id
        self.parent_id = parent_id
        self.st2_ctx = st2_ctx
        self.notify_tasks = notify_tasks
        self.notify_cfg = notify_cfg
        self.last_seq = 0
        self.tasks: Dict[Tuple[str, int], TaskRun] = {}
        self.reported_status: Optional[str] = None
        self.cancel_result: Optional[Dict[str, Any]] = None  # st2's result of a quick cancel


class _Timer:
    __slots__ = ("active_work", "data", "due", "kind", "seq")

    def __init__(self, due: float, seq: int, kind: str, data: Any, active_work: bool) -> None:
        self.due, self.seq, self.kind, self.data = due, seq, kind, data
        self.active_work = active_work

    def __lt__(self, other: _Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class Runtime:
    """Packs + store + engine. One process at a time runs the engine for a home (flock)."""

    def __init__(
        self,
        home: RuntimeHome,
        pack_paths: List[str],
        workers: Optional[int] = None,
    ) -> None:
        self.home = home
        self.registry = Registry(pack_paths)
        self.store = Store(str(home.db_path))
        self.datastore = Datastore(str(home.db_path), home.key_path)
        templating.set_datastore(self.datastore)
        compat.set_services(self)
        self.user = home.user
        self.roles = home.roles
        self.time_factor = home.time_factor
        self._configs: Dict[str, Dict[str, Any]] = {}
        self._config_secrets: Dict[str, List[str]] = {}
        for ref, pack in self.registry.packs.items():
            if pack.path is not None:
                self.pack_config(ref)
        self.workers = workers or home.workers
        self._lock_fd: Optional[int] = None
        self.is_engine = False
        self.api: Any = None
        self.queue: queue.Queue = queue.Queue()
        self.pool: Optional[ThreadPoolExecutor] = None
        self.active: Dict[str, ExecInfo] = {}
        self.workflows: Dict[str, WorkflowRun] = {}
        self._timers: List[_Timer] = []
        self._timer_seq = itertools.count()
        self._writes: List[Callable[[], None]] = []
        self._dirty: Dict[str, WorkflowRun] = {}
        self._to_start: List[str] = []
        self._post: List[Callable[[], None]] = []
        self._in_worker = 0
        self._occupying: Dict[Tuple[str, Any], set] = {}
        self._policy_waiting: Dict[Tuple[str, Any], List[str]] = {}
        self._commits = 0
        kill_after = os.environ.get(ENV_KILL_AFTER)
        self._kill_after = int(kill_after) if kill_after else None
        self._last_request_poll = 0.0

    # ================================================================== lifecycle
    def try_become_engine(self) -> bool:
        """Take the home's engine lock; False when another live process holds it."""
        if self.is_engine:
            return True
        fd = os.open(str(self.home.lock_path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        self.is_engine = True
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="action")
        from fleet_runtime.api import LocalApi

        self.api = LocalApi(self)
        self.recover()
        return True

    def close(self) -> None:
        if self.pool is not None:
            for info in list(self.active.values()):
                if info.handle is not None:
                    info.handle.cancel()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        if self.api is not None:
            self.api.close()
            self.api = None
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None
        self.is_engine = False

    def engine_pid(self) -> Optional[int]:
        try:
            text = self.home.lock_path.read_text().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    # ================================================================== configs
    def pack_config(self, pack_ref: str) -> Dict[str, Any]:
        if pack_ref in self._configs:
            return self._configs[pack_ref]
        pack = self.registry.packs.get(pack_ref)
        schema = pack.config_schema if pack else {}
        path = self.home.pack_config_path(pack_ref)
        shown = str(path)
        config: Dict[str, Any] = {}
        exists = path.exists()
        if exists:
            import yaml

            try:
                config = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError as e:
                raise MetadataError(shown, None, f"not valid YAML: {e}") from e
            if not isinstance(config, dict):
                raise MetadataError(shown, None, "a pack config must be a mapping")
        if schema:
            # st2 validates the config file as written (its registration: models/api/pack.py
            # ConfigAPI, util/pack.py validate_config_against_schema), before dynamic values
            # are rendered (util/config_loader.py, when an action runs)
            full = {"type": "object", "properties": copy.deepcopy(schema),
                    "additionalProperties": False}
            if exists:
                try:
                    config = validate_instance(config, full, use_default=True, none_ok=True)
                except Exception as e:
                    where = ".".join(str(p) for p in getattr(e, "path", []))
                    raise MetadataError(shown, where or None,
                                        getattr(e, "message", str(e))) from e
            else:
                from fleet_runtime.schema import assign_default_values

                config = assign_default_values(config, full)
        config = self._render_dynamic_config(config, shown)
        self._configs[pack_ref] = config
        self._config_secrets[pack_ref] = _secret_paths(schema)
        return config

    def _render_dynamic_config(self, value: Any, shown: str, path: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self._render_dynamic_config(v, shown, f"{path}.{k}".strip("."))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self._render_dynamic_config(v, shown, f"{path}[{i}]")
                    for i, v in enumerate(value)]
        if isinstance(value, str) and templating.is_jinja_expression(value):
            try:
                return templating.render(value, {"st2kv": templating.kv_context(self.user)})
            except Exception as e:
                raise MetadataError(shown, path, f"cannot render dynamic value: {e}") from e
        return value

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

    # ================================================================== requests (API)
    def request(
        self,
        action_ref: str,
        parameters: Optional[Dict[str, Any]] = None,
        context: Optional[Dict[str, Any]] = None,
        notify: Optional[Dict[str, Any]] = None,
        additional: Optional[Dict[str, Any]] = None,
    ) -> str:
        """Create a root execution (st2 API POST /executions); the engine starts it."""
        action = self.registry.action(action_ref)
        if not action.enabled:
            raise ParameterError(f'Action "{action.ref}" cannot be executed because it is'
                                 ' disabled.')
        ctx = st2ctx.api_context(self.user, action.pack)
        ctx.update(context or {})
        ctx["pack"] = action.pack  # create_request sets it whatever the caller gave
        live = params_util.render_live_params(
            action, parameters or {}, ctx, self.pack_config(action.pack), additional
        )
        params_util.validate_parameters(action, live)
        ex_id = new_id()
        record = self._new_record(ex_id, action, live, ctx, REQUESTED, None, ex_id, notify)
        with self.store.transaction():
            self.store.insert_execution(record)
        self._track(record)
        self.queue.put(("start", ex_id))
        return ex_id

    def record_failed_request(self, action: Action, parameters: Dict[str, Any],
                              context: Dict[str, Any], result: Dict[str, Any]) -> str:
        """A root execution created failed (st2: a rule whose parameters do not render);
        its actiontrigger is emitted as for any finished execution."""
        params_util.validate_parameters(action, parameters)
        ex_id = new_id()
        ctx = dict(context, pack=action.pack)
        record = self._new_record(ex_id, action, parameters, ctx, REQUESTED, None, ex_id)
        now = record["created_ts"]
        record.update(status=FAILED, result=result, start_ts=now, end_ts=now)
        record["log"].append({"status": FAILED, "timestamp": now})
        with self.store.transaction():
            self.store.insert_execution(record)
        info = ExecInfo(id=ex_id, action=action.ref, runner=action.runner_type, status=FAILED,
                        parent_id=None, root_id=ex_id, context=ctx, parameters=parameters,
                        start_ts=now)
        self._post.append(lambda: self._on_completed(info, FAILED, result))
        return ex_id

    def _new_record(
        self,
        ex_id: str,
        action: Action,
        parameters: Dict[str, Any],
        context: Dict[str, Any],
        status: str,
        parent_id: Optional[str],
        root_id: str,
        notify: Optional[Dict[str, Any]] = None,
        task: Optional[Dict[str, Any]] = None,
        due_ts: Optional[float] = None,
    ) -> Dict[str, Any]:
        now = time.time()
        ctx = dict(context)
        if notify:
            ctx["notify"] = notify
        record = {
            "id": ex_id,
            "action": action.ref,
            "runner": action.runner_type,
            "status": status,
            "parent_id": parent_id,
            "root_id": root_id,
            "parameters": parameters,
            "context": ctx,
            "result": None,
            "created_ts": now,
            "start_ts": None,
            "end_ts": None,
            "due_ts": due_ts,
            "log": [{"status": status, "timestamp": now}],
        }
        if task:
            record.update(task)
        return record

    def _track(self, record: Dict[str, Any]) -> ExecInfo:
        info = ExecInfo(
            id=record["id"],
            action=record["action"],
            runner=record["runner"],
            status=record["status"],
            parent_id=record.get("parent_id"),
            root_id=record["root_id"],
            context=record["context"],
            parameters=record["parameters"],
            task_ex_id=record.get("task_ex_id"),
            task_id=record.get("task_id"),
            task_route=record.get("task_route"),
            item_id=record.get("item_id"),
            start_ts=record.get("start_ts"),
            due_ts=record.get("due_ts"),
            log=list(record.get("log") or []),
        )
        self.active[info.id] = info
        return info

    def submit(self, op: str, payload: Dict[str, Any]) -> Any:
        """Run an operation in the engine thread (or delegate to the engine process)."""
        if self.is_engine:
            return self._do_request(op, payload)
        seq = self.store.add_request(op, payload)
        while True:
            row = self.store.get_request(seq)
            if row and row["status"] != "new":
                if row["status"] == "error":
                    raise _error_from(row["response"])
                return row["response"]
            if not self.engine_alive():
                raise RuntimeErrorBase("the engine process went away before answering")
            time.sleep(0.05)

    def engine_alive(self) -> bool:
        fd = os.open(str(self.home.lock_path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def _do_request(self, op: str, payload: Dict[str, Any]) -> Any:
        if op == "run":
            return {"id": self.request(payload["action"], payload.get("parameters"),
                                       payload.get("context"), payload.get("notify"))}
        if op == "pause":
            return self.pause(payload["id"], payload.get("requester"))
        if op == "resume":
            return self.resume(payload["id"], payload.get("requester"))
        if op == "cancel":
            return self.cancel(payload["id"], payload.get("requester"))
        if op == "respond":
            return self.respond(payload["id"], payload["response"], payload.get("requester"))
        if op == "noop":
            return {}
        raise RuntimeErrorBase(f"unknown request {op}")

    # ------------------------------------------------------------------ pause / resume / cancel
    def _execution(self, ex_id: str) -> Dict[str, Any]:
        full = self.store.resolve_execution_id(ex_id)
        record = self.store.get_execution(full) if full else None
        if record is None:
            raise NotFoundError(f'Execution "{ex_id}" not found.')
        return record

    def pause(self, ex_id: str, requester: Optional[str] = None) -> Dict[str, Any]:
        record = self._execution(ex_id)
        if record["runner"] != "orquesta":
            raise ExecutionStateError(
                f'Execution "{record["id"]}" ({record["action"]}) is not a workflow: only'
                " workflows can be paused."
            )
        if record["status"] in COMPLETED:
            raise ExecutionStateError(
                f'Execution "{record["id"]}" is already {record["status"]}.'
            )
        if record["status"] in PAUSE_STATES:
            return {"id": record["id"], "status": record["status"]}
        self._control(record["id"], "pause", requester)
        return {"id": record["id"], "status": PAUSING}

    def resume(self, ex_id: str, requester: Optional[str] = None) -> Dict[str, Any]:
        record = self._execution(ex_id)
        if record["status"] in COMPLETED:
            raise ExecutionStateError(
                f'Execution "{record["id"]}" is already {record["status"]}.'
            )
        if record["runner"] == "orquesta" and record["status"] in PAUSE_STATES:
            self._control(record["id"], "resume", requester)
            return {"id": record["id"], "status": RESUMING}
        # Not paused: resuming means "drive it again" (it was recovered when we started).
        return {"id": record["id"], "status": record["status"]}

    def cancel(self, ex_id: str, requester: Optional[str] = None) -> Dict[str, Any]:
        record = self._execution(ex_id)
        if record["status"] in COMPLETED:
            raise ExecutionStateError(
                f'Execution "{record["id"]}" is already {record["status"]}.'
            )
        self._control(record["id"], "cancel", requester)
        return {"id": record["id"], "status": CANCELING}

    def _control(self, ex_id: str, op: str, requester: Optional[str] = None) -> None:
        self.queue.put(("control", ex_id, op, requester or self.user))

    # ------------------------------------------------------------------ inquiries
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
        if record["status"] != PENDING:
            raise InquiryError(f'Inquiry "{record["id"]}" has already been responded to'
                               f' (status {record["status"]}).')
        result = record["result"] or {}
        roles = result.get("roles") or []
        users = result.get("users") or []
        roles_ok = not roles or any(r in self.roles for r in roles)
        users_ok = not users or requester in users
        if not (roles_ok and users_ok):
            why = []
            if not users_ok:
                why.append(f"users allowed: {', '.join(users)}")
            if not roles_ok:
                why.append(f"roles allowed: {', '.join(roles)}; roles of {requester}:"
                           f" {', '.join(self.roles) or 'none'}")
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
        self.queue.put(("respond", record["id"], response, requester))
        return {"id": record["id"], "response": response}

    # ================================================================== engine loop
    def run(
        self,
        until: Optional[Callable[[], bool]] = None,
        forever: bool = False,
        timeout: Optional[float] = None,
        eager: bool = False,
    ) -> None:
        """Process work until `until()` holds and nothing is in flight.

        Without `forever`, also returns when nothing is in flight and no timer of active work
        (task delays, retries) is pending: inquiries waiting for a person (and their ttl) do
        not keep the process alive. With `forever`, returns only when `until()` holds (never
        without `until`) or at the timeout. With `eager`, returns as soon as `until()` holds,
        even with work in flight (it continues on the next call).
        """
        assert self.is_engine, "run() needs the engine lock"
        deadline = time.time() + timeout if timeout else None
        while True:
            self._poll_requests()
            self._fire_timers()
            msgs = self._drain(self._wait_time())
            if msgs:
                self._process_batch(msgs)
            if self._to_start or self._writes or self._dirty or self._post:
                self._flush()
            if eager and until is not None and until():
                return
            if self.queue.empty() and not self._busy():
                if until is not None and until():
                    return
                if not forever and (until is None or not self._has_work_timers()):
                    return
            if deadline and time.time() > deadline:
                return

    def _busy(self) -> bool:
        return self._in_worker > 0 or self._has_work_timers() or bool(self._to_start)

    def _has_work_timers(self) -> bool:
        return any(t.active_work for t in self._timers)

    def _wait_time(self) -> float:
        wait = 0.2
        if self._timers:
            wait = min(wait, max(0.0, self._timers[0].due - time.time()))
        return wait

    def _drain(self, wait: float) -> List[Any]:
        msgs = []
        try:
            msgs.append(self.queue.get(timeout=wait) if wait > 0 else self.queue.get_nowait())
        except queue.Empty:
            return msgs
        while True:
            try:
                msgs.append(self.queue.get_nowait())
            except queue.Empty:
                return msgs

    def _poll_requests(self) -> None:
        now = time.time()
        if now - self._last_request_poll < 0.1:
            return
        self._last_request_poll = now
        for req in self.store.pending_requests():
            try:
                response = self._do_request(req["op"], req["payload"])
                self.store.finish_request(req["seq"], "done", response)
            except RuntimeErrorBase as e:
                self.store.finish_request(req["seq"], "error",
                                          {"type": type(e).__name__, "message": str(e)})
            except Exception as e:  # pragma: no cover - defensive
                LOG.exception("request failed")
                self.store.finish_request(req["seq"], "error", f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------------ timers
    def _add_timer(self, delay: float, kind: str, data: Any, active_work: bool = True) -> None:
        heapq.heappush(self._timers, _Timer(time.time() + max(0.0, delay),
                                            next(self._timer_seq), kind, data, active_work))

    def _fire_timers(self) -> None:
        now = time.time()
        while self._timers and self._timers[0].due <= now:
            timer = heapq.heappop(self._timers)
            if timer.kind == "start":
                info = self.active.get(timer.data)
                if info is not None and info.status == DELAYED:
                    self._start(info)
            elif timer.kind == "ttl":
                self.queue.put(("ttl", timer.data))
            elif timer.kind == "retry":
                self._policy_retry_fire(timer.data)

    # ------------------------------------------------------------------ batches
    def _process_batch(self, msgs: List[Any]) -> None:
        # Transaction 1: persist every incoming status change (and its workflow event).
        persisted: List[Any] = []
        with self.store.transaction():
            for msg in msgs:
                kind = msg[0]
                if kind == "status":
                    persisted.append(self._persist_status(msg[1], msg[2], msg[3]))
                elif kind == "control":
                    persisted.append(self._persist_control(msg[1], msg[2],
                                                           msg[3] if len(msg) > 3 else None))
                elif kind == "respond":
                    persisted.append(self._persist_respond(msg[1], msg[2], msg[3]))
                elif kind == "ttl":
                    persisted.append(self._persist_ttl(msg[1]))
                elif kind == "started":
                    info = self.active.get(msg[1])
                    if info is not None and info.status in (SCHEDULED, REQUESTED, DELAYED):
                        info.status = RUNNING
                        info.start_ts = msg[2]
                        info.log.append({"status": RUNNING, "timestamp": msg[2]})
                    persisted.append(None)
                elif kind == "worker_done":
                    self._in_worker -= 1
                    persisted.append(None)
                else:
                    persisted.append(None)
        self._durable_point()
        # Apply.
        for msg, ev in zip(msgs, persisted):
            kind = msg[0]
            if kind == "start":
                info = self.active.get(msg[1])
                if info is not None:
                    self._to_start.append(info.id)
            elif ev is not None:
                for item in ev if isinstance(ev, list) else [ev]:
                    self._apply(item)

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
            if info is not None and info.status in (REQUESTED, SCHEDULED, DELAYED):
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

    def _persist_status(self, ex_id: str, status: str, result: Any) -> Optional[Dict[str, Any]]:
        info = self.active.get(ex_id)
        if info is None:
            return None
        if info.status in COMPLETED:
            return None
        self._set_status_row(info, status, result)
        event = {"kind": "status", "ex_id": ex_id, "status": status, "result": result,
                 "info": info}
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
            event["seq"] = self.store.append_event(parent.wf_id, "action", payload)
            event["payload"] = payload
            event["wf"] = parent
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

    def _persist_control(self, ex_id: str, op: str,
                         requester: Optional[str] = None) -> Optional[Dict[str, Any]]:
        self._mark_requester(ex_id, op, requester)
        wf = self.workflows.get(ex_id)
        if wf is not None:
            seq = self.store.append_event(wf.wf_id, "request", {"op": op})
            return {"kind": "control", "wf": wf, "op": op, "seq": seq}
        info = self.active.get(ex_id)
        if info is None:
            return None
        return {"kind": "control_action", "info": info, "op": op}

    def _persist_respond(self, ex_id: str, response: Any, requester: str) -> Any:
        info = self.active.get(ex_id)
        if info is None or info.status != PENDING:
            return None
        events_out: List[Dict[str, Any]] = []
        # like st2's inquiry service: resume the ROOT workflow; its resume reaches every paused
        # workflow below it (resuming only the direct parent leaves a paused grandparent that
        # never hears its child finish)
        # st2 (services/inquiry.py respond) resumes the inquiry's parent workflow as the
        # requester, which records it there as resumed_by
        parent = self.active.get(info.parent_id or "")
        if parent is not None and parent.runner == "orquesta" and parent.status == PAUSED:
            self._mark_requester(parent.id, "resume", requester)
        root = self.workflows.get(info.root_id) or self.workflows.get(info.parent_id or "")
        if root is not None and root.ex_id != info.id and (
                root.conductor.get_workflow_status() in (PAUSING, PAUSED)):
            events_out.append(self._internal_resume(root))
        result = dict(info.result or {})
        result["response"] = response
        info.context.setdefault("inquiry", {})["responder"] = requester
        self.store.update_execution(info.id, context=info.context)
        status_event = self._persist_status(ex_id, SUCCEEDED, result)
        if status_event:
            events_out.append(status_event)
        return events_out

    def _internal_resume(self, root: WorkflowRun) -> Dict[str, Any]:
        """Resume the root workflow so that the resume reaches every paused workflow below it
        (the runtime's way to deliver an answer or a timeout), recording no requester below."""
        seq = self.store.append_event(root.wf_id, "request", {"op": "resume", "internal": True})
        return {"kind": "control", "wf": root, "op": "resume", "seq": seq, "internal": True}

    def _persist_ttl(self, ex_id: str) -> Any:
        """An inquiry past its ttl: like st2's garbage collector, mark it timed out and ask
        the root workflow to resume (the resume is recorded first: st2's GC updates the root
        synchronously, the timeout reaches the conductor later through the message bus)."""
        info = self.active.get(ex_id)
        if info is None or info.status != PENDING:
            return None
        events_out: List[Dict[str, Any]] = []
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

    # ------------------------------------------------------------------ applying events
    def _apply(self, ev: Dict[str, Any]) -> None:
        kind = ev["kind"]
        if kind == "status":
            self._apply_status(ev)
        elif kind == "control":
            wf = ev["wf"]
            wf.last_seq = max(wf.last_seq, ev["seq"])
            self._apply_control(wf, ev["op"], mark=not ev.get("internal"))
        elif kind == "control_action":
            self._control_action(ev["info"], ev["op"])

    def _apply_status(self, ev: Dict[str, Any]) -> None:
        info: ExecInfo = ev["info"]
        status = ev["status"]
        if status in COMPLETED:
            self.active.pop(info.id, None)
            self._release_policy_slot(info)
            self._post.append(lambda i=info, s=status, r=ev["result"]: self._on_completed(i, s, r))
        wf: Optional[WorkflowRun] = ev.get("wf")
        if wf is not None and wf.ex_id in self.workflows:
            wf.last_seq = max(wf.last_seq, ev["seq"])
            self._apply_action_event(wf, ev["payload"])

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
                    self.queue.put(("control", root.ex_id, "cancel"))
        self._dirty[wf.ex_id] = wf
        self._sync_workflow(wf)

    def _control_action(self, info: ExecInfo, op: str) -> None:
        if op != "cancel":
            return
        if info.status in COMPLETED:
            return
        if info.handle is not None and info.status == RUNNING:
            info.handle.cancel()
            return
        if info.status in (REQUESTED, SCHEDULED, DELAYED, PENDING, RUNNING):
            self.queue.put(("status", info.id, CANCELED, info.result))

    def _children(self, ex_id: str) -> List[ExecInfo]:
        return [i for i in self.active.values() if i.parent_id == ex_id]

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
            self.queue.put(("status", info.id, FAILED,
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
        live = params_util.render_live_params(action, spec.get("input") or {}, ctx,
                                              self.pack_config(action.pack))
        params_util.validate_parameters(action, live)
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
            self.queue.put(("status", wf.ex_id, status, result))
            self.workflows.pop(wf.ex_id, None)
            # Pending inquiries of a finished workflow cannot resume anything any more.
            for child in self._children(wf.ex_id):
                if child.status == PENDING:
                    self.queue.put(("status", child.id, CANCELED, child.result))
            self._dirty[wf.ex_id] = wf
        elif status in (PAUSED, RUNNING, PAUSING, CANCELING, RESUMING):
            if status in (PAUSED, RUNNING):
                self.queue.put(("status", wf.ex_id, status, None))
            else:
                now = time.time()
                info.status = status
                info.log.append({"status": status, "timestamp": now})
                log = list(info.log)
                self._writes.append(lambda: self.store.update_execution(
                    wf.ex_id, status=status, log=log))

    # ------------------------------------------------------------------ starting executions
    def _start(self, info: ExecInfo) -> None:
        if info.dispatched or info.status in COMPLETED:
            return
        info.dispatched = True
        action = self.registry.actions.get(info.action)
        if action is None:
            self.queue.put(("status", info.id, FAILED,
                            {"error": f'Action "{info.action}" is not registered'}))
            return
        decision = self._policy_admit(info, action)
        if decision == "delay":
            info.dispatched = False
            if info.status != DELAYED:
                info.status = DELAYED
                info.log.append({"status": DELAYED, "timestamp": time.time()})
                self.store.update_execution(info.id, status=DELAYED, log=info.log)
            return
        if decision == "cancel":
            self.queue.put(("status", info.id, CANCELED,
                            {"error": "canceled by the concurrency policy"}))
            return
        runner = action.runner_type
        if runner == "orquesta":
            self._start_workflow(info)
        elif runner == "inquirer":
            self._start_inquiry(info, action)
        elif runner in INLINE_RUNNERS:
            self.queue.put(("status", info.id, SUCCEEDED, dict(NOOP_RESULT)))
        elif action.ref == "core.inject_trigger":
            self._inject_trigger(info)
        else:
            self._in_worker += 1
            info.handle = runners.ProcessHandle()
            assert self.pool is not None
            self.pool.submit(self._worker, info, action)

    def _worker(self, info: ExecInfo, action: Action) -> None:
        status, result = FAILED, None
        report = True
        try:
            now = time.time()
            log = info.log + [{"status": RUNNING, "timestamp": now}]
            with self.store.transaction() as conn:
                cur = conn.execute(
                    "UPDATE executions SET status='running', start_ts=?, log=? WHERE id=? AND"
                    " status IN ('requested','scheduled','delayed')",
                    (now, _json(log), info.id))
                started = cur.rowcount == 1
            if not started:
                # Canceled (or otherwise finished) before it could start: nothing to report.
                report = False
                return
            if info.handle is not None and info.handle.canceled:
                status, result = CANCELED, info.result
                return
            self.queue.put(("started", info.id, now))
            status, result = self._run_action(info, action)
        except RuntimeErrorBase as e:
            status, result = FAILED, {"error": str(e)}
        except Exception as e:
            LOG.exception("action %s failed in the runner", info.id)
            status, result = FAILED, {"error": f"{type(e).__name__}: {e}"}
        finally:
            if report:
                self.queue.put(("status", info.id, status, result))
            self.queue.put(("worker_done",))

    def _run_action(self, info: ExecInfo, action: Action) -> Tuple[str, Any]:
        config = self.pack_config(action.pack)
        runner_params, action_params = params_util.render_final_params(
            action, info.parameters, info.context, config)
        handle = info.handle or runners.ProcessHandle()
        user = info.context.get("user") or self.user
        token = self.api.issue_token(user) if self.api is not None else ""
        env_extra = {
            "ST2_ACTION_PACK_NAME": action.pack,
            "ST2_ACTION_EXECUTION_ID": info.id,
            "ST2_ACTION_API_URL": self.api.url if self.api is not None else "",
            "ST2_ACTION_AUTH_TOKEN": token,
            "FLEET_ROLLOUT_HOME": str(self.home.path),
        }
        try:
            return self._run_runner(info, action, config, runner_params, action_params,
                                    env_extra, handle)
        finally:
            if self.api is not None:
                self.api.revoke(token)

    def _run_runner(self, info: ExecInfo, action: Action, config: Dict[str, Any],
                    runner_params: Dict[str, Any], action_params: Dict[str, Any],
                    env_extra: Dict[str, str], handle: runners.ProcessHandle
                    ) -> Tuple[str, Any]:
        if action.runner_type == "python-script":
            return runners.run_python(
                action.entry_point or "", action.pack, action.pack_path, config, action_params,
                runner_params, info.context.get("user") or self.user, str(self.home.db_path),
                str(self.home.key_path), env_extra, handle)
        if action.runner_type == "local-shell-cmd":
            cmd = runner_params.get("cmd") or action_params.get("cmd") or ""
            return runners.run_local_cmd(cmd, runner_params, env_extra, handle)
        if action.runner_type == "local-shell-script":
            return runners.run_local_script(action.entry_point or "", action_params,
                                            action.merged_parameters(), runner_params,
                                            env_extra, handle)
        if action.runner_type == "announcement":
            return runners.post_message(self.home.path, self.home.webhook_url,
                                        dict(action_params),
                                        runner_params.get("route") or chatlog.CHAT_ROUTE)
        return FAILED, {"error": f"runner {action.runner_type} cannot run {action.ref}"}

    def _start_inquiry(self, info: ExecInfo, action: Action) -> None:
        try:
            runner_params, _ = params_util.render_final_params(
                action, info.parameters, info.context, self.pack_config(action.pack))
        except RuntimeErrorBase as e:
            self.queue.put(("status", info.id, FAILED, {"error": str(e)}))
            return
        result = {
            "schema": runner_params.get("schema"),
            "roles": runner_params.get("roles") or [],
            "users": runner_params.get("users") or [],
            "route": runner_params.get("route") or "",
            "ttl": runner_params.get("ttl"),
        }
        self.queue.put(("status", info.id, PENDING, result))
        self._post.append(lambda: self.emit_trigger(
            "core.st2.generic.inquiry", {"id": info.id, "route": result["route"]}))
        self._arm_ttl(info.id, time.time(), result["ttl"])

    def _arm_ttl(self, ex_id: str, start_ts: float, ttl: Any) -> None:
        try:
            ttl_minutes = float(ttl or 0)
        except (TypeError, ValueError):
            return
        if ttl_minutes <= 0:
            return
        due = start_ts + ttl_minutes * 60.0 * self.time_factor
        self._add_timer(due - time.time(), "ttl", ex_id, active_work=False)

    def _inject_trigger(self, info: ExecInfo) -> None:
        trigger = info.parameters.get("trigger_name") or info.parameters.get("trigger")
        payload = info.parameters.get("payload") or {}
        if not trigger:
            self.queue.put(("status", info.id, FAILED,
                            {"error": 'either "trigger" or "trigger_name" is required'}))
            return
        if trigger not in self.registry.trigger_types:
            self.queue.put(("status", info.id, FAILED,
                            {"error": f'unknown trigger type "{trigger}"'}))
            return
        self.queue.put(("status", info.id, SUCCEEDED, {"trigger": trigger, "payload": payload}))
        self._post.append(lambda: self.emit_trigger(trigger, payload))

    # ------------------------------------------------------------------ completion hooks
    def _on_completed(self, info: ExecInfo, status: str, result: Any) -> None:
        action = self.registry.actions.get(info.action)
        masked = params_util.mask_secrets(action, info.parameters)
        self.emit_trigger("core.st2.generic.actiontrigger", {
            "execution_id": info.id,
            "status": status,
            "start_timestamp": _iso(info.start_ts),
            "action_name": info.action,
            "action_ref": info.action,
            "runner_ref": info.runner,
            "parameters": masked,
            "result": result,
        })
        notify = info.context.get("notify") or (action.notify if action else None)
        if notify:
            self._post_notify(info, status, result, notify, masked)
        if action is not None:
            self._policy_retry(info, status, action)

    def _post_notify(self, info: ExecInfo, status: str, result: Any,
                     notify: Dict[str, Any], masked: Dict[str, Any]) -> None:
        sections = [("on-complete", "completed.")]
        if status == SUCCEEDED:
            sections.append(("on-success", "succeeded."))
        if status in (FAILED, TIMEOUT, ABANDONED):
            sections.append(("on-failure", "failed."))
        for key, suffix in sections:
            sub = notify.get(key) or notify.get(key.replace("-", "_"))
            if not sub:
                continue
            routes = sub.get("routes") or sub.get("channels") or []
            ctx = {"action_parameters": masked, "action_context": info.context,
                   "action_results": result,
                   "st2kv": templating.kv_context(info.context.get("user"))}
            message = sub.get("message") or f"Action {info.action} {suffix}"
            try:
                message = templating.render(message, ctx)
                data = templating.render_values(sub.get("data") or {}, ctx) or {}
            except Exception as e:
                data = {"error": f"cannot render notify data: {e}"}
            data = dict(data)
            data["result"] = _json(result)
            for route in routes:
                self.emit_trigger("core.st2.generic.notifytrigger", {
                    "message": message, "data": data, "execution_id": info.id,
                    "status": status, "start_timestamp": _iso(info.start_ts),
                    "end_timestamp": _iso(time.time()), "action_ref": info.action,
                    "runner_ref": info.runner, "route": route, "channel": route,
                })

    # ------------------------------------------------------------------ triggers and rules
    def emit_trigger(self, trigger: str, payload: Dict[str, Any]) -> Optional[str]:
        """Dispatch a trigger instance to the rules that listen to its type."""
        listening = [r for r in self.registry.rules if r.trigger_type == trigger and r.enabled]
        if not listening:
            return None
        ti_id = new_id()
        now = time.time()
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO trigger_instances(id, trigger, payload, occurrence_ts, status)"
                " VALUES(?,?,?,?,?)", (ti_id, trigger, _json(payload), now, "processing"))
        for rule in listening:
            matched, reason = rules_util.rule_matches(rule, payload)
            if not matched:
                if reason:
                    self._record_enforcement(rule.ref, ti_id, None, "failed", reason)
                continue
            ex_id, failure = rules_util.enforce(self, rule, ti_id, payload)
            self._record_enforcement(rule.ref, ti_id, ex_id,
                                     "failed" if failure else "succeeded", failure)
        with self.store.transaction() as conn:
            conn.execute("UPDATE trigger_instances SET status='processed' WHERE id=?", (ti_id,))
        return ti_id

    def _record_enforcement(self, rule: str, ti_id: str, ex_id: Optional[str], status: str,
                            reason: Optional[str]) -> None:
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO rule_enforcements(id, rule, trigger_instance_id, execution_id,"
                " status, failure_reason, ts) VALUES(?,?,?,?,?,?,?)",
                (new_id(), rule, ti_id, ex_id, status, reason, time.time()))

    # ------------------------------------------------------------------ policies
    def _concurrency_policies(self, action_ref: str) -> List[Any]:
        return [p for p in self.registry.policies if p.enabled and p.resource_ref == action_ref
                and p.policy_type in ("action.concurrency", "action.concurrency.attr")]

    def _policy_key(self, policy: Any, info: ExecInfo) -> Tuple[str, Any]:
        if policy.policy_type == "action.concurrency.attr":
            attrs = tuple(_json(info.parameters.get(a))
                          for a in policy.parameters.get("attributes") or [])
            return (policy.ref, attrs)
        return (policy.ref, None)

    def _policy_admit(self, info: ExecInfo, action: Action) -> str:
        policies = self._concurrency_policies(action.ref)
        if not policies:
            return "run"
        keys = []
        for policy in policies:
            key = self._policy_key(policy, info)
            holders = self._occupying.setdefault(key, set())
            holders.discard(info.id)
            if len(holders) >= int(policy.parameters.get("threshold", 0)):
                if policy.parameters.get("action", "delay") == "cancel":
                    return "cancel"
                waiting = self._policy_waiting.setdefault(key, [])
                if info.id not in waiting:
                    waiting.append(info.id)
                return "delay"
            keys.append(key)
        for key in keys:
            self._occupying[key].add(info.id)
        return "run"

    def _release_policy_slot(self, info: ExecInfo) -> None:
        for key, holders in self._occupying.items():
            if info.id in holders:
                holders.discard(info.id)
                waiting = self._policy_waiting.get(key) or []
                while waiting:
                    nxt = self.active.get(waiting.pop(0))
                    if nxt is not None and nxt.status == DELAYED:
                        self._to_start.append(nxt.id)
                        break

    def _policy_retry(self, info: ExecInfo, status: str, action: Action) -> None:
        for policy in self.registry.policies:
            if not (policy.enabled and policy.resource_ref == action.ref
                    and policy.policy_type == "action.retry"):
                continue
            if info.context.get("parent"):
                # st2actions/policies/retry.py apply_after: never inside a workflow (orquesta's
                # task retry is the way there); st2 logs this warning for every completion of
                # such an execution and leaves it as it ended
                LOG.warning("Retry cannot be applied to this liveaction because it is executed"
                            " under a workflow. Use workflow specific retry functionality where"
                            " applicable. %s (%s, policy %s)", info.id, status, policy.ref)
                continue
            if status not in (FAILED, TIMEOUT):
                continue
            retry_on = policy.parameters.get("retry_on")
            if (status == FAILED and retry_on != "failure") or (
                    status == TIMEOUT and retry_on != "timeout"):
                continue
            count = ((info.context.get("policies") or {}).get("retry") or {}).get(
                "retry_count", 0)
            if count + 1 > int(policy.parameters.get("max_retry_count", 2)):
                continue
            delay = float(policy.parameters.get("delay") or 0) * self.time_factor
            self._add_timer(max(delay, 0.01), "retry", (info, policy.ref, count))

    def _policy_retry_fire(self, data: Any) -> None:
        info, policy_ref, count = data
        context = copy.deepcopy(info.context)
        context["policies"] = {"retry": {"applied_policy": policy_ref,
                                         "retry_count": count + 1,
                                         "retried_liveaction_id": info.id}}
        try:
            self.request(info.action, info.parameters, context)
        except RuntimeErrorBase:
            LOG.exception("retry policy could not re-run %s", info.id)

    # ================================================================== recovery
    def recover(self) -> None:
        """Resume everything a previous (killed) engine left unfinished."""
        rows = self.store.find_executions(
            "status NOT IN ('succeeded','failed','timeout','abandoned','canceled')")
        for row in rows:
            self._track(row)
        events_by_wf: Dict[str, List[Dict[str, Any]]] = {}
        # Workflows: reload snapshots and replay the events after them.
        for row in rows:
            if row["runner"] != "orquesta" or row["status"] in (REQUESTED, SCHEDULED, DELAYED):
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
        # Children whose current status the parent has not heard of; abandoned actions.
        with self.store.transaction():
            for info in list(self.active.values()):
                parent = self.workflows.get(info.parent_id or "")
                if info.runner not in ("orquesta", "inquirer") and info.status == RUNNING:
                    reported.add((info.id, ABANDONED))
                    event = self._persist_status(info.id, ABANDONED, {"error": ABANDONED_ERROR})
                    if event:
                        self._apply(event)
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
                        "parent_id=? AND status IN ('succeeded','failed','timeout','abandoned',"
                        "'canceled')", (ex_id,)):
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
        # Executions to (re)start, delays and inquiry timeouts to re-arm.
        for info in list(self.active.values()):
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


def _error_from(response: Any) -> RuntimeErrorBase:
    """Re-create an error another engine process reported for a delegated request."""
    from fleet_runtime import errors

    if isinstance(response, dict):
        cls = getattr(errors, str(response.get("type")), None)
        message = str(response.get("message"))
        if isinstance(cls, type) and issubclass(cls, RuntimeErrorBase) and cls not in (
                errors.MetadataError,):
            return cls(message)
        return RuntimeErrorBase(message)
    return RuntimeErrorBase(str(response))


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


def _secret_paths(schema: Dict[str, Any], prefix: str = "") -> List[str]:
    out = []
    for name, attr in (schema or {}).items():
        if not isinstance(attr, dict):
            continue
        path = f"{prefix}.{name}" if prefix else name
        if attr.get("secret"):
            out.append(path)
        out.extend(_secret_paths(attr.get("properties") or {}, path))
        if isinstance(attr.get("additionalProperties"), dict):
            out.extend(_secret_paths(attr["additionalProperties"].get("properties") or {},
                                     path + ".*"))
    return out


def _iso(ts: Optional[float]) -> Optional[str]:
    if ts is None:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


def _json(value: Any) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)

