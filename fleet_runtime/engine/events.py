"""What reaches the engine and what it applies, as types.

Messages (`Message`) are put on the engine's queue by worker threads, timers, inquiries and API
requests. The engine writes each one to the store first (transaction 1), which turns it into
zero or more events (`Event`) that it then applies to its records and the conductors. A
message that no longer concerns a live execution (it finished meanwhile) persists to nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

if TYPE_CHECKING:
    from fleet_runtime.engine.model import ExecInfo, WorkflowRun


# ---------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class StartRequested:
    """Start an execution that was created (and committed) before."""

    ex_id: str


@dataclass(frozen=True)
class ControlRequested:
    """Pause, resume or cancel an execution, asked by `requester`."""

    ex_id: str
    op: str
    requester: Optional[str] = None


@dataclass(frozen=True)
class InquiryAnswered:
    """A response to a pending inquiry, by the authenticated `requester`."""

    ex_id: str
    response: Dict[str, Any]
    requester: Optional[str]


@dataclass(frozen=True)
class InquiryCompleted:
    """The second half of an answer under st2's race (st2_races): the inquiry succeeds."""

    ex_id: str
    response: Dict[str, Any]
    requester: Optional[str]


@dataclass(frozen=True)
class ResumeArrived:
    """The first half of an answer under st2's race: the asking workflow's resume, requested
    when the answer was given, reaches the workflow (st2: an action runner applies it)."""

    wf_ex_id: str
    inquiry_id: str


@dataclass(frozen=True)
class PendingArrived:
    """Under st2's race: an inquiry's pending status (and whatever status it reached since)
    reaches the workflow that asked, a moment after the inquiry became visible and
    answerable (st2: the workflow engine handles the pending status from the message bus)."""

    ex_id: str


@dataclass(frozen=True)
class InquiryExpired:
    """A pending inquiry's ttl ran out."""

    ex_id: str


@dataclass(frozen=True)
class StatusReported:
    """An execution reached a status (a worker's result, a workflow's end, an inquiry ...)."""

    ex_id: str
    status: str
    result: Any = None


@dataclass(frozen=True)
class WorkerStarted:
    """A worker thread marked the execution running at `ts`."""

    ex_id: str
    ts: float


@dataclass(frozen=True)
class WorkerDone:
    """A worker thread finished (whatever the outcome): one fewer action in flight. `dead`:
    the execution whose runner died (dead_runner): st2 completed its LiveAction, so it no
    longer holds a concurrency policy's slot (st2 counts scheduled and running LiveActions)."""

    dead: str = ""


Message = Union[StartRequested, ControlRequested, InquiryAnswered, InquiryCompleted,
                ResumeArrived, PendingArrived, InquiryExpired, StatusReported, WorkerStarted,
                WorkerDone]


# ---------------------------------------------------------------------------- events
@dataclass
class StatusChanged:
    """An execution's status row was written; `wf`, `seq` and `payload` are set when the parent
    workflow's conductor is told (the action event appended to the workflow's event log)."""

    info: ExecInfo
    status: str
    result: Any
    wf: Optional[WorkflowRun] = None
    seq: int = 0
    payload: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ActionEventArrived:
    """A child's status event appended to its workflow's event log after being held back
    (PendingArrived): the conductor is told now."""

    wf: WorkflowRun
    seq: int
    payload: Dict[str, Any]


@dataclass
class WorkflowControlled:
    """A pause / resume / cancel request appended to a workflow's event log; `internal` ones
    (the runtime delivering an answer or a timeout) record no requester."""

    wf: WorkflowRun
    op: str
    seq: int
    internal: bool = False


@dataclass
class ActionControlled:
    """A pause / resume / cancel request for an execution that is not a workflow."""

    info: ExecInfo
    op: str


Event = Union[StatusChanged, ActionEventArrived, WorkflowControlled, ActionControlled]
