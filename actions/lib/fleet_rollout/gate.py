"""The canary gate of a batch: counter snapshots of canary and control hosts at the same moments,
sampled by the hosts themselves, then the judge.

    pre_start --window-- pre_end   (before the batch is drained: pre_end waits for the window's
                                    end on the batch's hosts; each host's drain also waits for its
                                    own sampler's last sample)
    ... change the batch ...
    pre_read                       (in the post window's soak: the pre window's samples, kept on
                                    the hosts in /var/tmp across the reboot, read and stored)
    post_start ... soak ... --window-- post_end (after every host of the batch is back in
                                                 service; the start runs during the soak, the
                                                 samplers take its first snapshot at its end)

The next batch's pre window can start early (`pre_early`, from this batch's workflow while its
post window runs): its first snapshot is due when this post window ends, so its start run, this
window's read and the judge are inside it. The next batch's pre_start takes it over only while
there is still time to read it on time (no approval or question held the batch since); else it
starts its own. Windows never overlap: the pre window starts when the post window before it ends.

With the profile's canary.window_steps n > 1, each window is also collected at n - 1 steps
inside it (post_step_1 .. post_step_<n-1>): the judge then has each host's drops per step
(over-dispersion, short site-wide bursts; docs/judge.md). The pre window lasts canary.pre_windows
p windows (the hosts' history before the change: their rate before is measured p times as
long), in p * n steps of the same length (pre_step_1 .. pre_step_<p*n-1>).

Counter windows of canary and control hosts cover the same wall-clock times: a window's start
reaches every host within its run (up to 100 at once), and each host then samples a step apart
on its own clock; the window holding the reboot is never used (the post window's first
snapshot is due when the soak ends). A host that cannot keep a sampler (or whose sampler
stopped) misses those samples.
Snapshots live in the datastore under the batch; a host whose collection failed is simply
missing (the judge's data guards decide).

    batch.<i>.counters.<label>      {"time" (its end), "started", "parts": n}, written after
                                    its parts
    batch.<i>.counters.<label>.<k>  {"snapshots", "errors"} of at most COUNTER_PART hosts (in
                                    name order): no value grows with the batch or the fleet
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout import prometheus_windows, states
from fleet_rollout.hoststeps import RolloutContext
from fleet_rollout.plan import controls_for_batch
from fleet_rollout.profile import (
    MAX_PRE_WINDOWS,
    MAX_WINDOW_STEPS,
    pre_windows,
    read_lead,
    step_seconds,
    window_steps,
)
from fleet_rollout.states import DONE, INCONCLUSIVE, batch_label
from fleet_rollout.store import key

LABELS = ("pre_start", "pre_end", "post_start", "post_end")
EARLY = "pre_early"  # the action's label for a batch's pre window started early (its pre_start)
PRE_READ = "pre_read"  # the action's label for the pre window's read (stores its collections)
ACTION_LABELS = LABELS + (EARLY, PRE_READ)
STEP_LABEL = re.compile(r"^(pre|post)_step_([1-9][0-9]?)\Z")
COUNTER_PART = 64  # hosts per stored part of one collection (about 1 kB of counters a host)
# seconds a host waits for its window's last sample beyond the read's lead and the window's
# start run's own time (a host reached last by the start ends its window that much later; the
# read reaches the hosts in about the order the start did); clock skew
SAMPLE_SLACK = 1.0


def batch_hosts(ctx: RolloutContext, index: int) -> List[str]:
    batches = ctx.plan["batches"]
    if not 0 <= index < len(batches):
        raise IndexError(f"rollout {ctx.rollout_id} has batches 0..{len(batches) - 1}")
    return list(batches[index]["hosts"])


def collect(ctx: RolloutContext, index: int, label: str) -> Dict[str, Any]:
    """One collection of a counter window of this batch's hosts and its controls.

    The hosts sample the window themselves: its start (`<window>_start`) snapshots every host
    and leaves a sampler on each that takes the window's other samples, a step apart
    (canary.window_seconds / window_steps) on the host's clock from the window's start (from
    its own first snapshot on a host reached more than half a step after it); the post
    window's end (`post_end`) reads them all (its run starts read_lead() seconds before the
    window ends, each host waiting for its last sample) and stores each step's collection;
    the pre window's end (`pre_end`) only waits for it on the batch's hosts, and `pre_read`
    reads it after the change (while the soak runs).
    So a window costs two Ansible runs whatever its steps, every host's window lasts what the
    profile says, and a batch too big to read in a step still gets its steps. The steps
    inside (`<window>_step_<k>`) only keep the workflow's pace: each waits for its step's
    due time and says the whole seconds to the next (`next_delay`, orquesta's task delay is
    an integer; the next collection waits the fraction left). `seconds`: the collection's
    own time after it was due."""
    check_label(label)
    if label == EARLY:
        return start_early_pre(ctx, index)
    canary = ctx.profile["canary"]
    step = step_seconds(canary)
    window, _sep, part = label.partition("_")
    steps = dict(zip(("pre", "post"), window_steps(canary)))[window]
    hosts = batch_hosts(ctx, index) + controls_for_batch(ctx.plan, index)
    if part == "start":
        return _start_window(ctx, index, window, hosts, step, steps)
    started = collection_started(ctx, index, f"{window}_start")
    if started is None:
        raise RuntimeError(f"rollout {ctx.rollout_id} batch {index}: {label} before "
                           f"{window}_start (a window is collected from its start)")
    if label == PRE_READ:
        return _read_pre(ctx, index, hosts, started, step, steps)
    number = steps if part == "end" else int(STEP_LABEL.match(label).group(2))
    due = started + number * step
    if part != "end":
        wait_until(due, limit=step)
        now = time.time()
        return {"label": label, "hosts": len(hosts), "on_hosts": True,
                "seconds": round(max(0.0, now - due), 1),
                "next_delay": next_delay(_next_due(started, number + 1, step, steps, window),
                                         now)}
    if window == "pre":
        return _pre_ended(ctx, index, started, step, steps)
    lead = read_lead(step)
    wait_until(due - lead, limit=steps * step)
    return _read_window(ctx, index, window, hosts, started, step, steps, lead)


def _next_due(started: float, number: int, step: float, steps: int,
              window: str = "post") -> float:
    """When the window's collection `number` (1..steps) is to start: its step's end; the post
    window's end (its read) read_lead() before it."""
    lead = read_lead(step) if number == steps and window == "post" else 0.0
    return started + number * step - lead


def host_window_end(first: Any, started: float, step: float, steps: int) -> float:
    """When a host's window ends (its sampler's last sample), from what its start stored: a
    claim samples from the window's anchor; a snapshot within half a step of the anchor too,
    one taken later from itself (collector.start_window)."""
    if is_claim(first):
        return float(first.get("anchor") or started) + steps * step
    taken = first.get("time") if isinstance(first, dict) else None
    if not isinstance(taken, (int, float)) or abs(taken - started) <= step / 2.0:
        return started + steps * step
    return float(taken) + steps * step


def _pre_ended(ctx: RolloutContext, index: int, started: float, step: float,
               steps: int) -> Dict[str, Any]:
    """pre_end: the pre window is over on every host of the batch (the hosts about to change;
    each ends `steps` steps after its own anchor), waited for here without a look at any host.
    The window is read later (pre_read, in the post window's soak): its samples stay on the
    hosts, and a host's drain first waits for its own sampler (the host-side guard)."""
    firsts = load_collection(ctx, index, "pre_start").get("snapshots") or {}
    ours = [h for h in batch_hosts(ctx, index) if h in firsts]
    ends = [host_window_end(firsts[h], started, step, steps) for h in ours]
    due = max(ends) if ends else started + steps * step
    wait_until(due, limit=steps * step)
    now = time.time()
    return {"label": "pre_end", "hosts": len(ours), "ended": due,
            "seconds": round(max(0.0, now - due), 1), "next_delay": 0}


def _read_pre(ctx: RolloutContext, index: int, hosts: List[str], started: float,
              step: float, steps: int) -> Dict[str, Any]:
    """pre_read: the pre window's samples, read from every host after the batch changed (in
    the post window's soak: the read is not on the way of the change), stored as the window's
    step and end collections; not read again for the same window (an extended post window).
    `next_delay`: the whole seconds to the post window's next collection."""
    if collection_started(ctx, index, "pre_end") == started + steps * step:
        out: Dict[str, Any] = {"label": PRE_READ, "hosts": len(hosts), "read": False}
    else:
        out = dict(_read_window(ctx, index, "pre", hosts, started, step, steps, 0.0),
                   label=PRE_READ, read=True)
    post = collection_started(ctx, index, "post_start")
    post_steps = window_steps(ctx.profile["canary"])[1]
    out["next_delay"] = 0 if post is None else next_delay(
        _next_due(post, 1, step, post_steps), time.time())
    return out


def window_id(ctx: RolloutContext, index: int, window: str) -> str:
    """The name of a batch's window on its hosts (the collector's --window)."""
    return states.window_id(ctx.rollout_id, index, window)


def start_early_pre(ctx: RolloutContext, index: int) -> Dict[str, Any]:
    """Batch `index`'s pre window, started while the batch before it is in its post window:
    each host's first snapshot is due when that window ends (its sampler takes it). Stored as
    the batch's pre_start, marked early; the batch's own pre_start takes it over (early_start)
    or starts its window again. Hosts the run did not reach are that collection's errors (the
    pre_start tries them again)."""
    if index < 1:
        raise ValueError(f"batch {index}: only a batch after another one starts its pre window "
                         "early (in the post window of the batch before it)")
    canary = ctx.profile["canary"]
    step = step_seconds(canary)
    pre_steps, post_steps = window_steps(canary)
    before = collection_started(ctx, index - 1, "post_start")
    if before is None:
        raise RuntimeError(f"rollout {ctx.rollout_id} batch {index}: {EARLY} before batch "
                           f"{index - 1}'s post_start (it starts when that window ends)")
    anchor = before + post_steps * step  # the end of the post window before it
    hosts = batch_hosts(ctx, index) + controls_for_batch(ctx.plan, index)
    out: Dict[str, Any] = {"label": EARLY, "hosts": len(hosts), "anchor": anchor}
    if anchor <= time.time():  # too late to start before that window ended: pre_start will
        return dict(out, started=False, reason="the post window before it has ended")
    snapshots, errors = _begin(ctx, hosts, window_id(ctx, index, "pre"), step, pre_steps,
                               anchor, first_at=anchor)
    save_collection(ctx, index, "pre_start", time.time(), snapshots, errors, anchor, early=True)
    return dict(out, started=True, collected=len(snapshots), errors=errors)


def early_start(ctx: RolloutContext, index: int, hosts: List[str], step: float,
                steps: int) -> Optional[Dict[str, Any]]:
    """The batch's pre window as start_early_pre started it, taken over when its read can
    still start on time (read_lead() before it ends); the hosts that run did not reach are
    started now (each then samples from its own first snapshot, and the read waits for them).
    None: no such window, or it is too old (an approval or a question held the batch)."""
    head = ctx.store.get_json(collection_key(ctx, index, "pre_start"), {}) or {}
    started = head.get("started")
    now = time.time()
    if head.get("early") is not True or not isinstance(started, (int, float)) or \
            now > started + steps * step - read_lead(step) or started > now + steps * step:
        return None
    taken = load_collection(ctx, index, "pre_start")
    snapshots, errors = dict(taken.get("snapshots") or {}), dict(taken.get("errors") or {})
    at = float(head.get("time") or started)
    missing = [h for h in hosts if h not in snapshots]
    if missing:
        taken_now, errors = _begin(ctx, missing, window_id(ctx, index, "pre"), step, steps,
                                   started)
        snapshots.update(taken_now)
        at = time.time()
        save_collection(ctx, index, "pre_start", at, snapshots, errors, started, early=True)
    return {"label": "pre_start", "hosts": len(hosts), "collected": len(snapshots),
            "errors": errors, "early": True, "seconds": round(max(0.0, at - started), 1),
            "next_delay": next_delay(_next_due(started, 1, step, steps, "pre"), time.time())}


def _begin(ctx: RolloutContext, hosts: List[str], name: str, step: float, steps: int,
           anchor: float, first_at: Optional[float] = None) -> Tuple[Dict[str, Any],
                                                                     Dict[str, str]]:
    """A window's start on `hosts`: (entries, errors). The collector's run leaves a sampler
    on each host (its first snapshot, or its claim); with Prometheus nothing runs on them
    (prometheus_windows.begin)."""
    if prometheus_windows.settings(ctx) is not None:
        return prometheus_windows.begin(hosts, anchor), {}
    results = ctx.hostside.start_window(hosts, name, step, steps, anchor, first_at=first_at)
    return ({h: r.result for h, r in results.items() if r.ok},
            {h: r.error for h, r in results.items() if not r.ok})


def _start_window(ctx: RolloutContext, index: int, window: str, hosts: List[str],
                  step: float, steps: int) -> Dict[str, Any]:
    """The window's start on every host. The post window is started as the soak begins and
    its first snapshot is due when the soak ends (each host's sampler takes it): the start's
    run is hidden in the soak, and every host reached before its end samples at the same
    moments. The start collection holds each host's snapshot or, for a first snapshot still
    due, its claim ({"deferred": true, ...}), replaced by the snapshot when the window is read.
    A pre window started early (in the post window of the batch before) is taken over while it
    can still be read on time.
    """
    if window == "pre":
        early = early_start(ctx, index, hosts, step, steps)
        if early is not None:
            return early
    now = time.time()
    soak = float(ctx.profile["canary"].get("soak_seconds") or 0) if window == "post" else 0.0
    started = now + soak  # the window's anchor: when its first snapshot is due
    snapshots, errors = _begin(ctx, hosts, window_id(ctx, index, window), step, steps,
                               started, first_at=started if soak > 0 else None)
    ended = time.time()
    save_collection(ctx, index, f"{window}_start", ended, snapshots, errors, started)
    return {"label": f"{window}_start", "hosts": len(hosts), "collected": len(snapshots),
            "errors": errors, "seconds": round(max(0.0, ended - started), 1),
            "next_delay": next_delay(_next_due(started, 1, step, steps, window), ended)}


def _read_window(ctx: RolloutContext, index: int, window: str, hosts: List[str],
                 started: float, step: float, steps: int, lead: float) -> Dict[str, Any]:
    """Read every started host's samples; one collection per step stored, the end's last."""
    prom = prometheus_windows.settings(ctx)
    if prom is not None:
        return _read_prometheus(ctx, index, window, hosts, started, step, steps, prom)
    head = load_collection(ctx, index, f"{window}_start")
    firsts = head.get("snapshots") or {}
    # how long after the anchor the start reached its last host (0 when it was done before)
    took = max(0.0, float(head.get("time") or started) - started)
    results = ctx.hostside.read_window([h for h in hosts if h in firsts],
                                       window_id(ctx, index, window),
                                       lead + took + SAMPLE_SLACK)
    taken: List[Dict[str, Any]] = [{} for _ in range(steps)]
    missed: List[Dict[str, str]] = [{} for _ in range(steps)]
    given: Dict[str, Any] = {}  # first snapshots the samplers took (claims at the start)
    gone: Dict[str, str] = {}  # claims whose first snapshot is missing, and why
    for host in hosts:
        entry = results.get(host)
        if host not in firsts:
            reason = (head.get("errors") or {}).get(host, "not collected")
            lost = f"the window did not start here: {reason}"
        elif entry is None:
            lost = "the window's samples were not read (the run gave no result for the host)"
        elif not entry.ok:
            lost = entry.error or "the window's samples could not be read"
        else:
            lost = window_problem(entry.result, firsts[host], step, steps)
        if is_claim(firsts.get(host)):  # the first snapshot was the sampler's to take
            first = None if lost else entry.result.get("first")
            if isinstance(first, dict):
                given[host] = first
            else:
                lost = lost or "the window's first snapshot was not taken: " + str(
                    (entry.result.get("errors") or {}).get("0") or "its sampler stopped "
                    "before it")[:300]
                gone[host] = lost
        for number in range(steps):
            sample = None if lost else entry.result["snapshots"][number:number + 1]
            if sample and isinstance(sample[0], dict):
                taken[number][host] = sample[0]
            else:
                missed[number][host] = lost or str(
                    (entry.result.get("errors") or {}).get(str(number + 1))
                    or "not sampled: the window's sampler stopped before it (did the host "
                       "reboot?)")[:300]
    ended = time.time()
    if given or gone:  # the start's claims become the hosts' first snapshots, before the steps
        save_collection(ctx, index, f"{window}_start", float(head.get("time") or started),
                        {h: given.get(h, doc) for h, doc in firsts.items() if h not in gone},
                        dict(head.get("errors") or {}, **gone), started,
                        early=head.get("early") is True)
    for number in range(steps):  # the steps inside first, the end last (what readers wait for)
        label = f"{window}_step_{number + 1}" if number + 1 < steps else f"{window}_end"
        due = started + (number + 1) * step
        save_collection(ctx, index, label, ended if number + 1 == steps else due,
                        taken[number], missed[number], due)
    due = started + steps * step
    return {"label": f"{window}_end", "hosts": len(hosts), "collected": len(taken[-1]),
            "errors": missed[-1], "seconds": round(max(0.0, ended - due), 1), "next_delay": 0}


def _read_prometheus(ctx: RolloutContext, index: int, window: str, hosts: List[str],
                     started: float, step: float, steps: int, prom: Any) -> Dict[str, Any]:
    """The window read from Prometheus once its last scrape has landed: each host's window
    (drops, packets, per-step drops) stored as the end collection; the steps inside are
    stored empty (they only keep the workflow's pace)."""
    head = load_collection(ctx, index, f"{window}_start")
    firsts = head.get("snapshots") or {}
    started_here = [h for h in hosts if prometheus_windows.is_started(firsts.get(h))]
    windows, errors = prometheus_windows.read(ctx, prom, started_here, started, step, steps)
    for host in hosts:
        if host not in started_here:
            reason = (head.get("errors") or {}).get(host, "not collected")
            errors[host] = f"the window did not start here: {reason}"
    ended = time.time()
    for number in range(steps - 1):
        due = started + (number + 1) * step
        save_collection(ctx, index, f"{window}_step_{number + 1}", due, {}, {}, due)
    due = started + steps * step
    save_collection(ctx, index, f"{window}_end", ended, windows, errors, due)
    return {"label": f"{window}_end", "hosts": len(hosts), "collected": len(windows),
            "errors": errors, "source": "prometheus",
            "seconds": round(max(0.0, ended - due), 1), "next_delay": 0}


def is_claim(doc: Any) -> bool:
    """A window start's answer for a host whose first snapshot was still due (its sampler
    takes it), not a snapshot."""
    return isinstance(doc, dict) and doc.get("deferred") is True


def window_problem(doc: Any, first: Dict[str, Any], step: float, steps: int) -> Optional[str]:
    """Why a host's window state is not this window's (None when it is): it must be the one
    whose first snapshot (or claim) the start stored, with the steps asked for."""
    if not isinstance(doc, dict) or not isinstance(doc.get("snapshots"), list):
        return "the window's samples are not a window's state"
    again = "the host's window was started again after this collection's start (samples of " \
            "another start)"
    if is_claim(first):
        if doc.get("token") != first.get("token"):
            return again
        taken = doc.get("first")
        if taken is not None and (not isinstance(taken, dict) or taken.get("time") != doc.get("t0")
                                  or not isinstance(doc.get("t0"), (int, float))):
            return "the window's first snapshot is not a snapshot"
    elif not isinstance(doc.get("t0"), (int, float)) or \
            abs(doc["t0"] - first.get("time", 0)) > 0.01:
        return again
    every = doc.get("every")
    if doc.get("samples") != steps or not isinstance(every, (int, float)) or \
            abs(every - step) > 0.001:
        return f"the host's window has {doc.get('samples')} samples {doc.get('every')} s apart, " \
               f"not {steps} {step:g} s apart"
    return None


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
    inside = step is not None and int(step.group(2)) < MAX_STEPS[step.group(1)]
    if label not in ACTION_LABELS and not inside:
        raise ValueError(f"label {label!r}: one of {', '.join(ACTION_LABELS)}, or "
                         f"pre_step_<k> with k from 1 to {MAX_STEPS['pre'] - 1} / post_step_<k> "
                         f"with k from 1 to {MAX_STEPS['post'] - 1}")


def step_labels(window: str, steps: int) -> List[str]:
    """The labels of the collections inside a window of `steps` steps, in order."""
    return [f"{window}_step_{k}" for k in range(1, steps)]


def collection_key(ctx: RolloutContext, index: int, label: str) -> str:
    """The datastore key of a collection's head (its parts are <key>.<k>)."""
    return key(ctx.rollout_id, "batch", str(index), "counters", label)


def save_collection(ctx: RolloutContext, index: int, label: str, at: float,
                    snapshots: Dict[str, Any], errors: Dict[str, str],
                    started: Optional[float] = None, early: bool = False) -> None:
    """One collection, in parts of COUNTER_PART hosts, the head (time, parts) last: a reader
    never sees a head whose parts are not all written. `early`: a pre window started in the
    post window of the batch before (start_early_pre)."""
    head = collection_key(ctx, index, label)
    names = sorted(set(snapshots) | set(errors))
    parts = [names[i:i + COUNTER_PART] for i in range(0, len(names), COUNTER_PART)]
    for number, chunk in enumerate(parts):
        ctx.store.set_json(f"{head}.{number}", {
            "snapshots": {h: snapshots[h] for h in chunk if h in snapshots},
            "errors": {h: errors[h] for h in chunk if h in errors}})
    doc = {"time": at, "started": at if started is None else started, "parts": len(parts)}
    ctx.store.set_json(head, dict(doc, early=True) if early else doc)


def load_collection(ctx: RolloutContext, index: int, label: str) -> Dict[str, Any]:
    """{"time", "snapshots", "errors"} of one collection ({} before it was made); a rollout
    stored before the split (one document) reads the same."""
    head = collection_key(ctx, index, label)
    doc = ctx.store.get_json(head, {}) or {}
    if "parts" not in doc:
        return doc
    merged: Dict[str, Any] = {"time": doc.get("time"), "snapshots": {}, "errors": {}}
    if doc.get("early") is True:
        merged["early"] = True
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
        if all(snaps) and prometheus_windows.is_started(snaps[2]):  # windows from Prometheus
            hosts[host] = {"pre": snaps[1], "post": snaps[3]}
            _labels(ctx, host, hosts[host])
            continue
        if all(snaps) and not any(is_claim(doc) for doc in snaps):  # claims: a window not read
            hosts[host] = {"pre": {"start": snaps[0], "end": snaps[1]},
                           "post": {"start": snaps[2], "end": snaps[3]}}
            for window in ("pre", "post"):
                between = [c.get("snapshots", {}).get(host) for c in inside[window]]
                if between and all(between):  # every step of the window, else none
                    hosts[host][window]["between"] = between
            _labels(ctx, host, hosts[host])
    # batch: the label chat and the audit use ("batch 2 of 3" is index 1), not the index
    return {"schema_version": 1, "rollout": ctx.rollout_id, "batch": batch_label(index),
            "pre_windows": pre_windows(ctx.profile["canary"]),
            "canary": canary, "control": control, "hosts": hosts}


def _labels(ctx: RolloutContext, host: str, entry: Dict[str, Any]) -> None:
    """The host's site and model (the judge compares within site and model)."""
    info = ctx.plan["hosts"].get(host) or {}
    for field, source in (("site", "site"), ("model", "hardware_model")):
        if info.get(source):
            entry[field] = str(info[source])


def unread(ctx: RolloutContext, index: int, doc: Dict[str, Any]) -> Optional[str]:
    """With Prometheus: why no canary or no control host has both windows (the first error
    of the post window's read, else the pre window's); None when both groups have some."""
    if prometheus_windows.settings(ctx) is None:
        return None
    have = set(doc["hosts"])
    if have & set(doc["canary"]) and have & set(doc["control"]):
        return None
    for label in ("post_end", "pre_end"):
        errors = load_collection(ctx, index, label).get("errors") or {}
        for host in doc["canary"] + doc["control"]:
            if host in errors:
                return f"{host}: {errors[host]}"
    return "no window was read"


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
    elif unread(ctx, index, doc) is not None:
        verdict = {"verdict": INCONCLUSIVE, "reason": "counters_unread",
                   "explanation": f"INCONCLUSIVE (batch {batch_label(index)}): the counter "
                   f"windows could not be read ({unread(ctx, index, doc)}); no verdict is "
                   "possible. The hosts keep their state: extend to read again, or decide."}
    else:
        verdict = judge(judge_input_from_dict(doc, metric), policy).to_dict()
    ctx.state.update_batch(index, lambda b: b.update(verdict=verdict, judged_at=time.time()))
    return {"verdict": verdict["verdict"], "reason": verdict.get("reason"),
            "explanation": verdict["explanation"]}
