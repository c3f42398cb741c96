"""Execution statuses of the embedded runtime: st2's names (st2common/constants/action.py) and
the groups the engine, the runners, the API and the CLI test against. One place, so that a
status is spelled once and every group is the same list wherever it is read.
"""
from __future__ import annotations

from typing import Iterable

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

# Finished for good (st2's LIVEACTION_COMPLETED_STATES).
COMPLETED = (SUCCEEDED, FAILED, TIMEOUT, ABANDONED, CANCELED)
# Not started yet: the engine may still start (or cancel without a runner) these.
NOT_STARTED = (REQUESTED, SCHEDULED, DELAYED)
PAUSE_STATES = (PAUSING, PAUSED)
# What st2's cancel accepts (LIVEACTION_CANCELABLE_STATES).
CANCELABLE = (REQUESTED, SCHEDULED, DELAYED, RUNNING, PENDING, PAUSED, PAUSING, RESUMING)
# Statuses of a task's action execution that the conductor is told about (st2's list).
TO_CONDUCTOR = frozenset(COMPLETED) | {PAUSED, PENDING}
# The control request (pause / resume / cancel) a transitional or final status stands for.
CONTROL_OF = {PAUSING: "pause", PAUSED: "pause", RESUMING: "resume", CANCELING: "cancel",
              CANCELED: "cancel"}


def sql_list(statuses: Iterable[str]) -> str:
    """`'a','b'` for an SQL `IN (...)`: the statuses are the constants above, never input."""
    return ",".join(f"'{s}'" for s in statuses)
