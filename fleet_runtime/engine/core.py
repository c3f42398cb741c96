"""The engine's core: `Runtime` assembled from the mixins of this package, its construction,
the engine lock, the API requests (run, pause / resume / cancel, delegation to the engine
process), the run loop and timers.
"""
from __future__ import annotations

import datetime
import fcntl
import heapq
import itertools
import os
import queue
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from fleet_runtime import compat, masking, st2ctx, templating
from fleet_runtime import params as params_util
from fleet_runtime.database import Store, new_id
from fleet_runtime.datastore import Datastore
from fleet_runtime.engine.actions import ActionsMixin
from fleet_runtime.engine.configs import ConfigsMixin
from fleet_runtime.engine.events import (
    ControlRequested,
    InquiryCompleted,
    InquiryExpired,
    Message,
    PendingArrived,
    ResumeArrived,
    StartRequested,
    StatusReported,
)
from fleet_runtime.engine.inquiries import InquiriesMixin
from fleet_runtime.engine.model import (
    ENV_KILL_AFTER,
    LOG,
    ExecInfo,
    WorkflowRun,
)
from fleet_runtime.engine.persistence import PersistenceMixin
from fleet_runtime.engine.triggers import TriggersMixin
from fleet_runtime.engine.workflows import WorkflowsMixin
from fleet_runtime.home import RuntimeHome
from fleet_runtime.packs import Action, Registry
from fleet_runtime.packs.builtin_content import INTERVAL_TIMER
from fleet_runtime.packs.registry import interval_seconds
from fleet_runtime.runtime_errors import (
    ExecutionStateError,
    NotFoundError,
    ParameterError,
    RuntimeErrorBase,
)
from fleet_runtime.statuses import (
    CANCELING,
    COMPLETED,
    DELAYED,
    FAILED,
    PAUSE_STATES,
    PAUSING,
    REQUESTED,
    RESUMING,
)
from fleet_runtime.warm import WarmPool

if TYPE_CHECKING:
    from fleet_runtime.action_runners import ActionRunners


class _Timer:
    __slots__ = ("active_work", "data", "due", "kind", "seq")

    def __init__(self, due: float, seq: int, kind: str, data: Any, active_work: bool) -> None:
        self.due, self.seq, self.kind, self.data = due, seq, kind, data
        self.active_work = active_work

    def __lt__(self, other: _Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class Runtime(
    PersistenceMixin,
    WorkflowsMixin,
    ActionsMixin,
    InquiriesMixin,
    TriggersMixin,
    ConfigsMixin,
):
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
        self.masker = masking.SecretMasker(
            lambda: masking.config_secret_values(self._configs, self._config_secrets),
            self.datastore.secret_values)
        self.registry.secret_masker = self.masker
        masking.mask_logs(self.masker)
        self.workers = workers or home.workers
        self._lock_fd: Optional[int] = None
        self.is_engine = False
        self.api: Any = None
        self.queue: queue.Queue[Message] = queue.Queue()
        self.pool: Optional[ThreadPoolExecutor] = None
        self.warm_pool: Optional[WarmPool] = None
        self.action_runners: Optional[ActionRunners] = None
        self.lost: Set[str] = set()  # executions lost with their action runner
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
        self._answered: set = set()  # inquiries whose answer is accepted, not yet written
        # st2_races: an inquiry's statuses not yet told to its workflow (parent id, payloads)
        self._held_events: Dict[str, Tuple[str, List[Dict[str, Any]]]] = {}
        self._policy_waiting: Dict[Tuple[str, Any], List[str]] = {}
        self._commits = 0
        kill_after = os.environ.get(ENV_KILL_AFTER)
        self._kill_after = int(kill_after) if kill_after else None
        self._last_request_poll = 0.0
        self._race_rng = random.Random()

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
        from fleet_runtime.action_runners import lost_executions
        from fleet_runtime.api import LocalApi

        self.lost = lost_executions(self.home)
        self.action_runners = self._new_action_runners()
        if self.action_runners is None:
            self.warm_pool = self._new_warm_pool()

        self.api = LocalApi(self)
        self.recover()
        self._schedule_interval_timers()
        return True

    def close(self) -> None:
        if self.pool is not None:
            for info in list(self.active.values()):
                if info.handle is not None:
                    info.handle.cancel()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        if self.warm_pool is not None:
            self.warm_pool.close()
            self.warm_pool = None
        if self.action_runners is not None:
            self.action_runners.close()
            self.action_runners = None
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

    def _new_warm_pool(self) -> Optional[WarmPool]:
        """Warm python workers (fleet_runtime.warm) for the packs with python-script actions,
        unless `python_workers: cold`; a pack with `content_version` runs cold."""
        packs = self._warm_packs()
        return WarmPool(packs, self.home.warm_preload) if packs is not None else None

    def _warm_packs(self) -> Optional[Dict[str, List[str]]]:
        """WarmPool's packs (pack directory -> python entry points), None when cold."""
        if self.home.python_workers != "warm":
            return None
        packs: Dict[str, List[str]] = {}
        for pack in self.registry.packs.values():
            if pack.path is None or pack.meta.get("content_version"):
                continue
            entries = sorted({a.entry_point for a in pack.actions.values()
                              if a.runner_type == "python-script" and a.entry_point})
            if entries:
                packs[pack.path] = entries
        return packs

    def _new_action_runners(self) -> Optional[ActionRunners]:
        """The action runner processes (`runners` >= 2), each with warm python workers of its
        own unless `python_workers: cold`; None: actions run as this process's children."""
        count = self.home.runners
        if count < 2:
            return None
        from fleet_runtime.action_runners import ActionRunners

        return ActionRunners(self.home, count, self._warm_packs(), self.home.warm_preload,
                             self.lost)

    # ================================================================== action runners
    def runner_list(self) -> List[Dict[str, Any]]:
        """The action runners: index, hostname, pid, alive, running (count), executions,
        directory (fleet_runtime.action_runners.runner_status)."""
        from fleet_runtime.action_runners import runner_status

        return runner_status(self.home, self.store)

    def kill_runner(self, index: int) -> Dict[str, Any]:
        """SIGKILL action runner `index` (1-based) and every process it started, as an st2
        action runner machine dies: its running executions stay running, new ones go to
        the other runners; it stays dead until the engine starts again."""
        if self.action_runners is None:
            from fleet_runtime.action_runners import kill_runner

            return kill_runner(self.home, index)  # the engine runs in another process
        return self.action_runners.kill(index)

    def engine_pid(self) -> Optional[int]:
        try:
            text = self.home.lock_path.read_text().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    # ================================================================== requests (API)
    def request(
        self,
        action_ref: str,
        parameters: Optional[Dict[str, Any]] = None,
        context: Optional[Dict[str, Any]] = None,
        notify: Optional[Dict[str, Any]] = None,
        additional: Optional[Dict[str, Any]] = None,
        render_given: bool = False,
    ) -> str:
        """Create a root execution (st2 API POST /executions); the engine starts it.

        `parameters` are literals (what a caller passes is never rendered as Jinja); only a
        rule, whose action parameters the pack wrote, passes `render_given`."""
        action = self.registry.action(action_ref)
        if not action.enabled:
            raise ParameterError(f'Action "{action.ref}" cannot be executed because it is'
                                 ' disabled.')
        ctx = st2ctx.api_context(self.user, action.pack)
        ctx.update(context or {})
        ctx["pack"] = action.pack  # create_request sets it whatever the caller gave
        try:
            live = params_util.render_live_params(
                action, parameters or {}, ctx, self.pack_config(action.pack), additional,
                render_given=render_given)
            params_util.validate_parameters(action, live)
        except ParameterError as e:
            raise self.masker.masked_error(e) from None
        live = self.without_rendered_secrets(parameters or {}, live)
        ex_id = new_id()
        record = self._new_record(ex_id, action, live, ctx, REQUESTED, None, ex_id, notify)
        with self.store.transaction():
            self.store.insert_execution(record)
        self._track(record)
        self.queue.put(StartRequested(ex_id))
        return ex_id

    def without_rendered_secrets(self, given: Dict[str, Any], live: Dict[str, Any]
                                 ) -> Dict[str, Any]:
        """The parameters to store: a templated default whose rendering holds a config or
        datastore secret is left out (the runner renders the default again when the action
        starts), so the secret is not written to the database."""
        secrets = self.masker.secrets()
        return {name: value for name, value in live.items()
                if name in given or masking.mask_value(value, secrets) == value}

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
            # a pending inquiry's result is its question (schema, users, ttl): a restarted
            # engine re-arms the ttl from it, and keeps it when the inquiry times out
            result=record.get("result") if record["runner"] == "inquirer" else None,
        )
        self.active[info.id] = info
        return info

    def submit(self, op: str, payload: Dict[str, Any]) -> Any:
        """Run an operation in the engine thread (or delegate to the engine process)."""
        if self.is_engine:
            return self._do_request(op, payload)
        # the engine process acts for this process's user, not its own
        payload = dict(payload)
        if op == "run":
            payload["context"] = dict(payload.get("context") or {})
            payload["context"].setdefault("user", self.user)
        elif op in ("pause", "resume", "cancel", "respond"):
            payload.setdefault("requester", self.user)
        return self.submit_queued(op, payload)

    def submit_queued(self, op: str, payload: Dict[str, Any]) -> Any:
        """Run an operation through the request table: the engine loop answers it (as for
        another process; the local action API's threads use it too)."""
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

    def complete(self, ex_id: str, status: str, result: Any) -> Dict[str, Any]:
        """st2's update_status through PUT /executions/<id>: the execution ends with the
        status and result given, reported to its parent as any end; what it started (a
        workflow's tasks, an action's process) is left as it is, as on st2."""
        record = self._execution(ex_id)
        if record["status"] in COMPLETED:
            raise ExecutionStateError(
                f'Execution "{record["id"]}" is already {record["status"]}.'
            )
        self.queue.put(StatusReported(record["id"], status, result))
        return {"id": record["id"], "status": status}

    def _control(self, ex_id: str, op: str, requester: Optional[str] = None) -> None:
        self.queue.put(ControlRequested(ex_id, op, requester or self.user))

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

    def _drain(self, wait: float) -> List[Message]:
        msgs: List[Message] = []
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

    def _schedule_interval_timers(self) -> None:
        """st2timersengine: each enabled core.st2.IntervalTimer rule fires every interval,
        the first one interval after the engine starts. Not work in flight: a timer never
        keeps a run() alive."""
        for rule in self.registry.rules:
            if rule.enabled and rule.trigger_type == INTERVAL_TIMER:
                self._add_timer(interval_seconds(rule), "interval", rule, active_work=False)

    def _fire_interval(self, rule: Any) -> None:
        self.emit_trigger(INTERVAL_TIMER, {
            "executed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "schedule": None}, only=rule.ref)
        self._add_timer(interval_seconds(rule), "interval", rule, active_work=False)

    def _fire_timers(self) -> None:
        now = time.time()
        while self._timers and self._timers[0].due <= now:
            timer = heapq.heappop(self._timers)
            if timer.kind == "start":
                info = self.active.get(timer.data)
                if info is not None and info.status == DELAYED:
                    self._start(info)
            elif timer.kind == "ttl":
                self.queue.put(InquiryExpired(timer.data))
            elif timer.kind == "retry":
                self._policy_retry_fire(timer.data)
            elif timer.kind == "answer_resume":
                self.queue.put(ResumeArrived(*timer.data))
            elif timer.kind == "answer_complete":
                self.queue.put(InquiryCompleted(*timer.data))
            elif timer.kind == "pending_arrives":
                self.queue.put(PendingArrived(timer.data))
            elif timer.kind == "interval":
                self._fire_interval(timer.data)


def _error_from(response: Any) -> RuntimeErrorBase:
    """Re-create an error another engine process reported for a delegated request."""
    from fleet_runtime import runtime_errors

    if isinstance(response, dict):
        cls = getattr(runtime_errors, str(response.get("type")), None)
        message = str(response.get("message"))
        if isinstance(cls, type) and issubclass(cls, RuntimeErrorBase) and cls not in (
                runtime_errors.MetadataError,):
            return cls(message)
        return RuntimeErrorBase(message)
    return RuntimeErrorBase(str(response))
