"""The engine's data model: constants, the in-memory records of
executions (`ExecInfo`), task executions (`TaskRun`) and workflow executions (`WorkflowRun`),
`EngineState` (the attributes of `Runtime` that the engine mixins share) and small helpers.
"""
from __future__ import annotations

import logging
import queue
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from fleet_runtime import runners, st2ctx
from fleet_runtime.conductor import RuntimeConductor

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from fleet_runtime.action_runners import ActionRunners
    from fleet_runtime.database import Store
    from fleet_runtime.datastore import Datastore
    from fleet_runtime.engine.events import Message
    from fleet_runtime.home import RuntimeHome
    from fleet_runtime.packs import Registry

# the engine's logger keeps the name it had before the engine was split into modules
LOG = logging.getLogger("fleet_runtime.engine")

REQUESTER_KEYS = st2ctx.REQUESTER_KEYS

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



class EngineState:
    """The state of a `Runtime` that the engine mixins share (set in `Runtime.__init__`)."""

    home: RuntimeHome
    registry: Registry
    store: Store
    datastore: Datastore
    user: str
    roles: List[str]
    time_factor: float
    workers: int
    is_engine: bool
    api: Any
    queue: queue.Queue[Message]
    pool: Optional[ThreadPoolExecutor]
    action_runners: Optional[ActionRunners]  # the `runners` setting at 2 or more
    lost: Set[str]  # executions that were running on an action runner when it died
    # executions not finished, by id; workflow executions driven by this engine, by id
    active: Dict[str, ExecInfo]
    workflows: Dict[str, WorkflowRun]
    # what the next commit (transaction 2) writes, snapshots, starts and runs afterwards
    _writes: List[Callable[[], None]]
    _dirty: Dict[str, WorkflowRun]
    _to_start: List[str]
    _post: List[Callable[[], None]]
    _in_worker: int
    _configs: Dict[str, Dict[str, Any]]
    _config_secrets: Dict[str, List[str]]
    masker: Any  # fleet_runtime.masking.SecretMasker: secrets masked in what is stored
    without_rendered_secrets: Any  # Runtime.without_rendered_secrets
    # concurrency policies: executions holding / waiting for a slot, by policy key
    _occupying: Dict[Tuple[str, Any], Set[str]]
    _answered: Set[str]
    _held_events: Dict[str, Tuple[str, List[Dict[str, Any]]]]
    _policy_waiting: Dict[Tuple[str, Any], List[str]]
    _commits: int
    _kill_after: Optional[int]


def _iso(ts: Optional[float]) -> Optional[str]:
    if ts is None:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


def _json(value: Any) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)
