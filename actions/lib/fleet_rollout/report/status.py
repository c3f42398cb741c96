"""What the report derives from the rollout state: the rollout's and a host's status,
host counts, a host's timed steps (their span, the failed and the next step), the order
of hosts in tables and timelines, and the words and classes of an approval."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from fleet_rollout import states
from fleet_rollout.report.format import num
from fleet_rollout.report.style import STATUS_RANK

STEPS = list(states.HOST_STEPS)
TIMELINE_STEPS = list(states.TIMELINE_STEPS)


def rollout_status(meta: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                   halt: Optional[Dict[str, Any]] = None) -> str:
    """meta.status (states.ROLLOUT_STATES) as words: running, completed, rolled back, ...;
    without one: halted, running or planned."""
    status = str(meta.get("status") or "").strip().lower()
    if status:
        return status.replace("_", " ")
    if halt:
        return "halted"
    return states.RUNNING if hosts else states.PLANNED


def host_status(state: Dict[str, Any]) -> str:
    return str(state.get("status") or states.PENDING)


def count_hosts(names: Iterable[str], hosts: Dict[str, Dict[str, Any]]) -> Dict[str, int]:
    """Counts for the header: changed, restored, failed, left drained, in progress, pending."""
    out = {"changed": 0, "restored": 0, "failed": 0, "restore_failed": 0, "left_drained": 0,
           "in_progress": 0, "pending": 0}
    for name in names:
        status = host_status(hosts.get(name) or {})
        if status == states.DONE:
            out["changed"] += 1
        elif status == states.RESTORED:
            out["restored"] += 1
        elif status == states.FAILED:
            out["failed"] += 1
        elif status == states.RESTORE_FAILED:
            out["failed"] += 1
            out["restore_failed"] += 1
        elif status == states.LEFT_DRAINED:
            out["left_drained"] += 1
        elif status in states.IN_PROGRESS_STATES:
            out["in_progress"] += 1
        else:
            out["pending"] += 1
    return out


def timed_steps(state: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any], float, float]]:
    """(step, record, start, end) for each timed step record of a host, in time order."""
    out = []
    records = state.get("steps") or {}
    if not isinstance(records, dict):
        return out
    for step, rec in records.items():
        if not isinstance(rec, dict):
            continue
        end = num(rec.get("at"))
        start = num(rec.get("started"))
        secs = num(rec.get("seconds"))
        if end is None and start is not None and secs is not None:
            end = start + secs
        if start is None and end is not None:
            start = end - (secs or 0.0)
        if start is None or end is None:
            continue
        out.append((str(step), rec, start, max(start, end)))
    order = {s: i for i, s in enumerate(TIMELINE_STEPS)}
    out.sort(key=lambda item: (item[2], order.get(item[0], 99)))
    return out


def failed_step(state: Dict[str, Any]) -> Optional[str]:
    err = state.get("error")
    if isinstance(err, dict) and err.get("step"):
        return str(err["step"])
    for step, rec, _start, _end in timed_steps(state):
        if rec.get("ok") is False and step != states.RESTORE_STEP:
            return step
    return None


def step_span(state: Dict[str, Any]) -> Tuple[Optional[float], Optional[float]]:
    steps = timed_steps(state)
    if not steps:
        return None, None
    return min(s[2] for s in steps), max(s[3] for s in steps)


def row_order(names: Sequence[str], hosts: Dict[str, Dict[str, Any]]) -> List[str]:
    plan_pos = {n: i for i, n in enumerate(names)}

    def sort_key(name: str) -> Tuple[int, float, int]:
        state = hosts.get(name) or {}
        start, _end = step_span(state)
        rank = STATUS_RANK.get(host_status(state), len(STATUS_RANK))
        return rank, start if start is not None else float("inf"), plan_pos[name]

    return sorted(names, key=sort_key)


def next_step(state: Dict[str, Any]) -> Optional[str]:
    if host_status(state) == states.RESTORING:
        return states.RESTORE_STEP
    step = state.get("step")
    if step in STEPS and STEPS.index(step) + 1 < len(STEPS):
        return STEPS[STEPS.index(step) + 1]
    return None if step else STEPS[0]


def approval_word(response: Any) -> str:
    if response is True:
        return "approved"
    if response is False:
        return "rejected"
    return str(response) if response not in (None, "") else "pending"


def approval_class(response: Any) -> str:
    if response is True:
        return "ok"
    if response is False:
        return "bad"
    text = str(response or "").lower()
    if any(w in text for w in ("reject", "deny", "denied", "abort", "stop", "roll")) or \
            text in ("no", "false"):
        return "bad"
    if any(w in text for w in ("approv", "accept", "continue", "proceed")) or \
            text in ("yes", "true", "ok"):
        return "ok"
    return "none"
