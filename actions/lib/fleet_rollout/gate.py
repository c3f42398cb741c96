"""The canary gate of a batch: counter snapshots of canary and control hosts at the same moments,
then the judge.

    pre_start --window-- pre_end   (before the batch is drained)
    ... change the batch ... soak ...
    post_start --window-- post_end (after every host of the batch is back in service)

With the profile's canary.window_steps n > 1, each window is also collected at n - 1 steps
inside it (post_step_1 .. post_step_<n-1>): the judge then has each host's drops per step
(over-dispersion, short site-wide bursts; docs/judge.md). The pre window lasts canary.pre_windows
p windows (the hosts' history before the change: their rate before is measured p times as
long), in p * n steps of the same length (pre_step_1 .. pre_step_<p*n-1>).

Counter windows of canary and control hosts cover the same wall-clock times; the window holding
the reboot is never used (the post window starts after the soak). Snapshots live in the datastore
under the batch; a host whose collection failed is simply missing (the judge's data guards decide).

    batch.<i>.counters.<label>      {"time" (its end), "started", "parts": n}, written after
                                    its parts
    batch.<i>.counters.<label>.<k>  {"snapshots", "errors"} of at most COUNTER_PART hosts (in
                                    name order): no value grows with the batch or the fleet
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Dict, List, Optional

from fleet_rollout.hoststeps import RolloutContext
from fleet_rollout.plan import controls_for_batch
from fleet_rollout.profile import (
    MAX_PRE_WINDOWS,
    MAX_WINDOW_STEPS,
    pre_windows,
    step_seconds,
    window_steps,
)
from fleet_rollout.states import DONE, INCONCLUSIVE, batch_label
from fleet_rollout.store import key

LABELS = ("pre_start", "pre_end", "post_start", "post_end")
STEP_LABEL = re.compile(r"^(pre|post)_step_([1-9][0-9]?)\Z")
COUNTER_PART = 64  # hosts per stored part of one collection (about 1 kB of counters a host)
# seconds a collection's Ansible run starts before its sample time (at most half a step): the
# run's start, its forks and each host's collector start happen while the window still runs,
# and the hosts sample at the due moment, not one after another after it
SAMPLE_LEAD = 2.0
SAMPLE_SLACK = 1.0  # seconds a host waits for the sample time beyond the lead (clock skew)


def batch_hosts(ctx: RolloutContext, index: int) -> List[str]:
    batches = ctx.plan["batches"]
    if not 0 <= index < len(batches):
        raise IndexError(f"rollout {ctx.rollout_id} has batches 0..{len(batches) - 1}")
    return list(batches[index]["hosts"])


def collect(ctx: RolloutContext, index: int, label: str) -> Dict[str, Any]:
    """Snapshot the counters of this batch's hosts and its controls; stored under the batch.

    Collections of a window sample a step apart (canary.window_seconds / window_steps), from
    sample to sample, never less: each is due one step after the one before it. Its run starts
    sample_lead() seconds before that and every host samples at the due moment (the
    collector's --at), so the window ends when it is due, not when the last host was read. The
    workflow waits `next_delay`, the whole seconds until the next run is to start (orquesta's
    task delay is an integer; 0 when it is due already), and the next collection waits the
    fraction of a second left. A window lasts what the profile says: not that plus every
    collection's time, nor every delay rounded up and every engine latency added. A
    collection longer than a step delays the ones after it; one that starts late samples at
    once. `seconds` is the time from the sample to the collection's end."""
    check_label(label)
    step = step_seconds(ctx.profile["canary"])
    lead = sample_lead(step)
    before = previous_label(label, ctx.profile["canary"])
    previous = collection_started(ctx, index, before) if before else None
    sample_at: Optional[float] = None
    if previous is not None:
        due = previous + step
        wait_until(due - lead, limit=step)
        if 0 < due - time.time() <= lead + SAMPLE_SLACK:  # not late, no clock jump
            sample_at = due
    started = time.time() if sample_at is None else sample_at
    hosts = batch_hosts(ctx, index) + controls_for_batch(ctx.plan, index)
    if sample_at is None:
        results = ctx.hostside.counters(hosts)
    else:
        results = ctx.hostside.counters(hosts, at=sample_at, wait=lead + SAMPLE_SLACK)
    snapshots = {h: r.result for h, r in results.items() if r.ok}
    errors = {h: r.error for h, r in results.items() if not r.ok}
    ended = time.time()
    save_collection(ctx, index, label, ended, snapshots, errors, started)
    return {"label": label, "hosts": len(hosts), "collected": len(snapshots),
            "errors": errors, "seconds": round(max(0.0, ended - started), 1),
            "next_delay": next_delay(started + step - lead, ended)}


def sample_lead(step: float) -> float:
    """Seconds a collection's run starts before its sample time: SAMPLE_LEAD, at most half a
    step."""
    return min(SAMPLE_LEAD, step / 2.0)


def previous_label(label: str, canary: Dict[str, Any]) -> Optional[str]:
    """The collection before this one in its window (None for the window's first)."""
    window, _sep, rest = label.partition("_")
    if rest == "start":
        return None
    step = STEP_LABEL.match(label)
    if step:
        number = int(step.group(2))
    else:  # the window's end
        number = dict(zip(("pre", "post"), window_steps(canary)))[window]
    return f"{window}_start" if number <= 1 else f"{window}_step_{number - 1}"


def collection_started(ctx: RolloutContext, index: int, label: str) -> Optional[float]:
    """When a collection of this batch started (None before it was made)."""
    head = ctx.store.get_json(collection_key(ctx, index, label), {}) or {}
    started = head.get("started", head.get("time"))
    return float(started) if isinstance(started, (int, float)) else None


def wait_until(due: float, limit: float) -> None:
    """Sleep until `due` (time.time()), at most `limit` seconds; not at all when it is past."""
    left = due - time.time()
    if left > 0:
        time.sleep(min(left, limit))


def next_delay(due: float, now: float) -> int:
    """Whole seconds the workflow waits before a collection due at `due` (time.time()), the
    collection waiting the rest itself: rounded down, never negative."""
    return max(0, int(math.floor(due - now)))


MAX_STEPS = {"pre": MAX_PRE_WINDOWS * MAX_WINDOW_STEPS, "post": MAX_WINDOW_STEPS}


def check_label(label: str) -> None:
    step = STEP_LABEL.match(label)
    if label not in LABELS and not (step and int(step.group(2)) < MAX_STEPS[step.group(1)]):
        raise ValueError(f"label {label!r}: one of {', '.join(LABELS)}, or pre_step_<k> with k "
                         f"from 1 to {MAX_STEPS['pre'] - 1} / post_step_<k> with k from 1 to "
                         f"{MAX_STEPS['post'] - 1}")


def step_labels(window: str, steps: int) -> List[str]:
    """The labels of the collections inside a window of `steps` steps, in order."""
    return [f"{window}_step_{k}" for k in range(1, steps)]


def collection_key(ctx: RolloutContext, index: int, label: str) -> str:
    """The datastore key of a collection's head (its parts are <key>.<k>)."""
    return key(ctx.rollout_id, "batch", str(index), "counters", label)


def save_collection(ctx: RolloutContext, index: int, label: str, at: float,
                    snapshots: Dict[str, Any], errors: Dict[str, str],
                    started: Optional[float] = None) -> None:
    """One collection, in parts of COUNTER_PART hosts, the head (time, parts) last: a reader
    never sees a head whose parts are not all written."""
    head = collection_key(ctx, index, label)
    names = sorted(set(snapshots) | set(errors))
    parts = [names[i:i + COUNTER_PART] for i in range(0, len(names), COUNTER_PART)]
    for number, chunk in enumerate(parts):
        ctx.store.set_json(f"{head}.{number}", {
            "snapshots": {h: snapshots[h] for h in chunk if h in snapshots},
            "errors": {h: errors[h] for h in chunk if h in errors}})
    ctx.store.set_json(head, {"time": at, "started": at if started is None else started,
                              "parts": len(parts)})


def load_collection(ctx: RolloutContext, index: int, label: str) -> Dict[str, Any]:
    """{"time", "snapshots", "errors"} of one collection ({} before it was made); a rollout
    stored before the split (one document) reads the same."""
    head = collection_key(ctx, index, label)
    doc = ctx.store.get_json(head, {}) or {}
    if "parts" not in doc:
        return doc
    merged: Dict[str, Any] = {"time": doc.get("time"), "snapshots": {}, "errors": {}}
    for number in range(int(doc["parts"])):
        part = ctx.store.get_json(f"{head}.{number}", {}) or {}
        merged["snapshots"].update(part.get("snapshots") or {})
        merged["errors"].update(part.get("errors") or {})
    return merged


def judge_input(ctx: RolloutContext, index: int) -> Dict[str, Any]:
    data = {label: load_collection(ctx, index, label) for label in LABELS}
    steps = dict(zip(("pre", "post"), window_steps(ctx.profile["canary"])))
    inside = {window: [load_collection(ctx, index, label)
                       for label in step_labels(window, steps[window])]
              for window in ("pre", "post")}
    states = {h: ctx.state.host(h) for h in batch_hosts(ctx, index)}
    canary = [h for h, st in states.items() if st.get("status") == DONE]
    control = controls_for_batch(ctx.plan, index)
    hosts: Dict[str, Any] = {}
    for host in canary + control:
        snaps = [data[label].get("snapshots", {}).get(host) for label in LABELS]
        if all(snaps):
            hosts[host] = {"pre": {"start": snaps[0], "end": snaps[1]},
                           "post": {"start": snaps[2], "end": snaps[3]}}
            for window in ("pre", "post"):
                between = [c.get("snapshots", {}).get(host) for c in inside[window]]
                if between and all(between):  # every step of the window, else none
                    hosts[host][window]["between"] = between
            info = ctx.plan["hosts"].get(host) or {}  # the judge compares within site and model
            for field, source in (("site", "site"), ("model", "hardware_model")):
                if info.get(source):
                    hosts[host][field] = str(info[source])
    # batch: the label chat and the audit use ("batch 2 of 3" is index 1), not the index
    return {"schema_version": 1, "rollout": ctx.rollout_id, "batch": batch_label(index),
            "pre_windows": pre_windows(ctx.profile["canary"]),
            "canary": canary, "control": control, "hosts": hosts}


def canary_verdict(ctx: RolloutContext, index: int) -> Dict[str, Any]:
    # the judge needs scipy (numpy's threads keep it out of the warm workers' preload, and its
    # import costs about a CPU-second): only the judging action pays it, not every collection
    from fleet_rollout.counters.metric import metric_from_dict
    from fleet_rollout.judge import judge, judge_input_from_dict, policy_from_dict

    canary_cfg = ctx.profile.get("canary") or {}
    metric = metric_from_dict(canary_cfg.get("metric") or None, where="profile canary.metric")
    policy = policy_from_dict(canary_cfg.get("policy") or None, where="profile canary.policy")
    doc = judge_input(ctx, index)
    if not doc["canary"] or not doc["control"]:
        verdict = {"verdict": INCONCLUSIVE, "reason": "no_hosts",
                   "explanation": f"INCONCLUSIVE (batch {batch_label(index)}): "
                   f"{len(doc['canary'])} changed host(s) and {len(doc['control'])} "
                   "control host(s) left to compare; no verdict is possible."}
    else:
        verdict = judge(judge_input_from_dict(doc, metric), policy).to_dict()
    ctx.state.update_batch(index, lambda b: b.update(verdict=verdict, judged_at=time.time()))
    return {"verdict": verdict["verdict"], "reason": verdict.get("reason"),
            "explanation": verdict["explanation"]}
