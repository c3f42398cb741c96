"""When a batch or a wave may start: its sites' maintenance windows (maintenance.py).

A batch starts only when every site of it is open now and stays open for the batch's expected
work up to its last host's change (its pre window and host work, estimate.BatchModel, with the
reboot time learned from the batches before); otherwise it waits for the next time that holds.
A wave starts only while the sites of its hosts are open; a wave one of whose hosts has begun
its change is always let through (it finishes what it began). The workflows wait the `delay`
the answer gives (at most MAX_DELAY, then ask again) and post the `message` once.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Mapping

from fleet_rollout import gate, maintenance, site_limits
from fleet_rollout.estimate import Assumptions, BatchModel, duration
from fleet_rollout.hoststeps import RolloutContext
from fleet_rollout.plan import controls_for_batch
from fleet_rollout.states import PENDING, batch_label

MAX_DELAY = 3600  # seconds a workflow waits before it asks again


def _schedules(ctx: RolloutContext, hosts: List[str]) -> Dict[str, maintenance.Schedule]:
    return site_limits.plan_schedules(ctx.profile, ctx.plan["hosts"], hosts)


def _delay(until: float, now: float) -> int:
    return int(min(MAX_DELAY, max(1, math.ceil(until - now))))


def _opens(schedules: Mapping[str, maintenance.Schedule], at: float) -> str:
    return ", ".join(f"{site} {maintenance.local_text(at, s.timezone)}"
                     for site, s in sorted(schedules.items())[:5]) + \
        (f" (+{len(schedules) - 5} more sites)" if len(schedules) > 5 else "")


def batch_window(ctx: RolloutContext, batch: int, now: float = 0.0) -> Dict[str, Any]:
    """{"open": bool, "delay": seconds, "until": when it opens, "message": to post ("" when
    nothing new), "halted": bool}; records the batch's wait (`window`) for the report."""
    now = now or time.time()
    if ctx.state.halted():
        return {"open": False, "halted": True, "delay": 0, "message": ""}
    hosts = gate.batch_hosts(ctx, batch)
    schedules = _schedules(ctx, hosts)
    if not site_limits.restricted(schedules):
        return {"open": True, "halted": False, "delay": 0, "message": ""}
    learned = ctx.state.meta().get("expected_reboot")
    assume = Assumptions(reboot=float(learned)) if isinstance(learned, (int, float)) else \
        Assumptions()
    model = BatchModel(ctx.profile, assume, ctx.config.ansible_forks)
    need = model.before_change(len(hosts), len(hosts) + len(controls_for_batch(ctx.plan, batch)),
                               False)
    fit = maintenance.next_fit(schedules.values(), now, need)
    record = ctx.state.batch(batch).get("window") or {}
    label = batch_label(batch)
    if fit is not None and fit <= now + 1.0:
        if record and not record.get("opened"):
            ctx.state.update_batch(batch, lambda b: b.update(
                window=dict(b.get("window") or {}, opened=now)))
        return {"open": True, "halted": False, "delay": 0, "message": ""}
    until = fit if fit is not None else now + MAX_DELAY
    message = ""
    if not record:
        if fit is None:
            message = (f"Rollout {ctx.rollout_id}: batch {label} waits: no time in the next "
                       f"{duration(maintenance.MAX_HORIZON)} has all of its sites' maintenance "
                       f"windows open for its {duration(need)} of work; it asks again every "
                       f"{duration(MAX_DELAY)} (abort it with `rollout abort {ctx.rollout_id}`)")
        else:
            message = (f"Rollout {ctx.rollout_id}: batch {label} waits for its sites' "
                       f"maintenance window ({duration(need)} of work to start in it): it "
                       f"starts in {duration(fit - now)}, at {_opens(schedules, fit)}")
        ctx.state.update_batch(batch, lambda b: b.update(
            window={"since": now, "until": fit, "need": round(need, 1),
                    "sites": sorted(schedules)}))
    return {"open": False, "halted": False, "delay": _delay(until, now), "until": fit,
            "message": message}


def wave_window(ctx: RolloutContext, hosts: List[str], now: float = 0.0) -> Dict[str, Any]:
    """The wave's answer (as batch_window's): open when every host's site is open now, or when
    a host of the wave has begun its change, or the rollout is halted (its steps then touch
    nothing)."""
    now = now or time.time()
    if ctx.state.halted() or any(ctx.state.host(h).get("status", PENDING) != PENDING
                                 for h in hosts):
        return {"open": True, "halted": False, "delay": 0, "message": ""}
    schedules = _schedules(ctx, hosts)
    closed = {site: s for site, s in schedules.items() if not maintenance.is_open(s, now)}
    if not closed:
        return {"open": True, "halted": False, "delay": 0, "message": ""}
    fit = maintenance.next_fit(schedules.values(), now, 0.0)
    until = fit if fit is not None else now + MAX_DELAY
    return {"open": False, "halted": False, "delay": _delay(until, now), "until": fit,
            "message": f"Rollout {ctx.rollout_id}: a wave of {len(hosts)} host(s) waits for "
                       f"the maintenance window of {', '.join(sorted(closed)[:5])}"
                       + (f": it opens at {_opens(closed, fit)}" if fit is not None else "")}
