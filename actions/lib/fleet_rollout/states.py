"""The names of what a host, a rollout and a verdict go through, in one place.

* Host steps, in the order a host is changed (the host_step and wave_step actions' enums and
  the workflows' task chains name the same steps in the same order: tests check it), and a
  registry with a decorator: each step's function says which step it is
  (``@steps.step("drain")``).
* Host states: pending -> running -> done, or failed; a failed (or rolled back) host goes
  restoring -> restored, left_drained (the profile says so) or restore_failed.
* Rollout states: planned -> running -> completed, or rolled_back / rejected / aborted / failed
  (end states, by precedence: when two paths end a rollout the worse one stays), with
  rolling_back and aborting on the way.
* Verdicts of a batch: PASS, FAIL, INCONCLUSIVE (the judge), REJECTED (not approved).
* The batch label people see: batch 1 is index 0.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple, TypeVar

# ----------------------------------------------------------------------------- host steps
HOST_STEPS: Tuple[str, ...] = ("precheck", "snapshot", "drain", "kernel", "stage", "reboot",
                               "wait", "verify", "probe", "undrain")
# a wave is the hosts of a batch changed together (at most the profile's batches.parallel):
# the host-side steps every host of a wave needs at the same point are one action and one
# ansible-playbook run per playbook over the wave's hosts (the wave_step action), each host's
# outcome recorded on its own; the others are one action per host (host_step), Redfish work per
# host. A wave runs HOST_STEPS in order.
WAVE_STEPS: Tuple[str, ...] = ("precheck", "drain", "kernel", "probe", "undrain")
# the host_change workflow's two parts: "prepare" (the BIOS check and snapshot) between the
# wave's precheck and its drain, "change" between the wave's kernel settings and its probe
PREPARE_STEPS: Tuple[str, ...] = ("snapshot",)
CHANGE_STEPS: Tuple[str, ...] = ("stage", "reboot", "wait", "verify")
# the host_change workflow's chain of host_step tasks
WORKFLOW_STEPS: Tuple[str, ...] = PREPARE_STEPS + CHANGE_STEPS
RESTORE_STEP = "restore"
ACTION_STEPS: Tuple[str, ...] = HOST_STEPS + (RESTORE_STEP,)
TIMELINE_STEPS: Tuple[str, ...] = HOST_STEPS + (RESTORE_STEP,)

# ----------------------------------------------------------------------------- host states
PENDING = "pending"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
RESTORING = "restoring"
RESTORED = "restored"
LEFT_DRAINED = "left_drained"
RESTORE_FAILED = "restore_failed"
HOST_STATES: Tuple[str, ...] = (PENDING, RUNNING, DONE, FAILED, RESTORING, RESTORED,
                                LEFT_DRAINED, RESTORE_FAILED)
# a host in one of these is on its way back (or back): no step may touch it again
RESTORE_STATES: Tuple[str, ...] = (RESTORING, RESTORED, LEFT_DRAINED, RESTORE_FAILED)
# a restore has nothing left to do for a host in one of these
RESTORE_DONE_STATES: Tuple[str, ...] = (RESTORED, LEFT_DRAINED)
IN_PROGRESS_STATES: Tuple[str, ...] = (RUNNING, RESTORING)

# ----------------------------------------------------------------------------- rollout states
PLANNED = "planned"
COMPLETED = "completed"
ROLLING_BACK = "rolling_back"
ROLLED_BACK = "rolled_back"
REJECTED = "rejected"
ABORTING = "aborting"
ABORTED = "aborted"
# RUNNING and FAILED as for hosts
ROLLOUT_STATES: Tuple[str, ...] = (PLANNED, RUNNING, ROLLING_BACK, ABORTING, COMPLETED,
                                   REJECTED, ABORTED, ROLLED_BACK, FAILED)
# end states by precedence (the finish action's enum): a worse one replaces a better one
END_RANK: Dict[str, int] = {COMPLETED: 0, REJECTED: 1, ABORTED: 1, ROLLED_BACK: 2, FAILED: 3}

# ----------------------------------------------------------------------------- verdicts
PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"
REJECTED_VERDICT = "REJECTED"  # a batch its approver rejected
VERDICTS: Tuple[str, ...] = (PASS, FAIL, INCONCLUSIVE, REJECTED_VERDICT)


def window_id(rollout_id: str, index: int, window: str) -> str:
    """The name of a batch's counter window (pre, post) on its hosts (the collector's
    --window; the drain's --after-window)."""
    return f"{rollout_id}.b{index}.{window}"


def batch_label(index: int) -> int:
    """The batch number people see (chat, verdicts, reports): batch 1 is index 0."""
    return int(index) + 1


# ----------------------------------------------------------------------------- step registry
F = TypeVar("F", bound=Callable[..., Any])


class StepRegistry:
    """The function of each host step, registered by a decorator; only HOST_STEPS are taken,
    each once, and run() refuses a step nobody registered."""

    def __init__(self, names: Tuple[str, ...] = HOST_STEPS) -> None:
        self.names = names
        self.functions: Dict[str, Callable[..., Any]] = {}

    def step(self, name: str) -> Callable[[F], F]:
        if name not in self.names:
            raise ValueError(f"unknown step {name!r}; steps: {', '.join(self.names)}")

        def register(function: F) -> F:
            if name in self.functions:
                raise ValueError(f"step {name!r} registered twice")
            self.functions[name] = function
            return function

        return register

    def check(self, name: str) -> None:
        if name not in self.names:
            raise ValueError(f"unknown step {name!r}; steps: {', '.join(self.names)}")

    def function(self, name: str) -> Callable[..., Any]:
        self.check(name)
        if name not in self.functions:
            raise ValueError(f"step {name!r} has no function")
        return self.functions[name]

    def missing(self) -> Tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.functions)
