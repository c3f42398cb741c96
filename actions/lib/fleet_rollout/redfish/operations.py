"""Whole BIOS operations on one host, each in its own logged-out-afterwards session.

These are what the pack's actions call: snapshot, apply (plan -> stage -> commit -> reset ->
wait_applied) and restore (back to a snapshot). Every result is a plain dict (JSON for the st2
datastore) and carries the request counts of the session that produced it.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

from fleet_rollout.redfish.bios import (
    BiosSnapshot,
    commit,
    plan,
    read_state,
    restore_targets,
    snapshot,
    stage,
)
from fleet_rollout.redfish.client import BmcEndpoint, RedfishSession
from fleet_rollout.redfish.discovery import BmcContext, discover
from fleet_rollout.redfish.personalities import validate_desired
from fleet_rollout.redfish.power import BootMarker, HostBootId, reset, wait_applied


class Timeouts:
    """Waits of a reset, in seconds. poll: the shortest spacing of two looks at the BMC;
    reboot: how long a reboot is expected to take (None: unknown), which paces the looks during
    one (power.Pacer): sparse at first, then following the expected timing."""

    def __init__(self, graceful: float = 300.0, force: float = 120.0, boot: float = 900.0,
                 poll: float = 2.0, reboot: Optional[float] = None) -> None:
        self.graceful = graceful
        self.force = force
        self.boot = boot
        self.poll = poll
        self.reboot = reboot


def _open(endpoint: BmcEndpoint, sleep: Callable[[float], None]) -> RedfishSession:
    return RedfishSession(endpoint, sleep=sleep)


def take_snapshot(endpoint: BmcEndpoint,
                  sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    with _open(endpoint, sleep) as session:
        ctx = discover(session, endpoint.vendor)
        snap = snapshot(session, ctx).to_dict()
    snap["requests"] = dict(session.requests)
    return snap


def check_desired(endpoint: BmcEndpoint, desired: Dict[str, Any],
                  sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Dry run: resolve knobs against this host's registry; KnobError if it cannot take them."""
    wanted = validate_desired(desired)
    with _open(endpoint, sleep) as session:
        ctx = discover(session, endpoint.vendor)
        state = read_state(session, ctx)
        targets = plan(ctx, wanted, state.current)
        compliant = all(state.current.get(k) == v for k, v in targets.items())
        return {"host": endpoint.host, "vendor": ctx.personality.key, "targets": targets,
                "compliant": compliant, "pending": state.pending,
                "active_jobs": [j["id"] for j in state.active_jobs],
                "requests": dict(session.requests)}


def _apply_targets(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                   timeouts: Timeouts, clear_foreign: bool, owned: Any,
                   sleep: Callable[[float], None], do_reset: bool,
                   settings_time: Optional[str], host_boot_id: Optional[HostBootId] = None,
                   boot_id_before: Optional[str] = None) -> Dict[str, Any]:
    staged = stage(session, ctx, targets, clear_foreign=clear_foreign, owned=owned)
    committed = commit(session, ctx, staged)
    report: Dict[str, Any] = {"host": ctx.host, "vendor": ctx.personality.key,
                              "targets": targets, "stage": staged.to_dict(),
                              "commit": committed.to_dict(), "reset": None, "applied": None,
                              "settings_time_before": settings_time}
    if not staged.needs_reset or not do_reset:
        return report
    before_time = settings_time  # settings Time moves only when the BMC applies settings
    done = reset(session, ctx, timeouts.graceful, timeouts.force, timeouts.poll, sleep=sleep,
                 host_boot_id=host_boot_id, boot_id_before=boot_id_before,
                 expected=timeouts.reboot)
    report["reset"] = done.to_dict()
    jobs = [committed.job_id] if committed.job_id else []
    # the look that showed the restart is where the wait for POST starts (not read again)
    seen = BootMarker(**done.after) if done.after else None
    report["applied"] = wait_applied(
        session, ctx, targets, before_time, jobs, timeouts.boot, timeouts.poll, sleep,
        host_boot_id, (report["reset"]["before"] or {}).get("boot_id"), timeouts.reboot,
        done.since_sent, seen).to_dict()
    return report


def apply_bios(endpoint: BmcEndpoint, desired: Dict[str, Any],
               timeouts: Optional[Timeouts] = None, clear_foreign: bool = False,
               do_reset: bool = True,
               sleep: Callable[[float], None] = time.sleep,
               host_boot_id: Optional[HostBootId] = None) -> Dict[str, Any]:
    """Snapshot, then bring the BIOS to `desired` (logical knobs), reset and verify.

    host_boot_id: the host side's OS boot id (None while it does not answer), the restart
    evidence for BMCs that report none of their own (see power.reset)."""
    wanted = validate_desired(desired)
    timeouts = timeouts or Timeouts()
    with _open(endpoint, sleep) as session:
        ctx = discover(session, endpoint.vendor)
        snap = snapshot(session, ctx)
        targets = plan(ctx, wanted, snap.attributes)
        report = _apply_targets(session, ctx, targets, timeouts, clear_foreign,
                                set(snap.attributes), sleep, do_reset, snap.settings_time,
                                host_boot_id)
        report["snapshot"] = snap.to_dict()
    report["requests"] = dict(session.requests)  # after logout: the whole session
    return report


def restore_bios(endpoint: BmcEndpoint, snap: Dict[str, Any],
                 timeouts: Optional[Timeouts] = None, do_reset: bool = True,
                 sleep: Callable[[float], None] = time.sleep,
                 host_boot_id: Optional[HostBootId] = None,
                 boot_id_before: Optional[str] = None) -> Dict[str, Any]:
    """Put the knob attributes back to a snapshot's values (cancelling our own pending ones).

    do_reset=False stages and commits only: the caller resets exactly once (hoststeps keeps a
    reset marker across re-runs) and waits with wait_applied."""
    timeouts = timeouts or Timeouts()
    before = BiosSnapshot.from_dict({k: v for k, v in snap.items() if k != "requests"})
    with _open(endpoint, sleep) as session:
        ctx = discover(session, endpoint.vendor)
        targets = restore_targets(ctx, before)
        report = _apply_targets(session, ctx, targets, timeouts, False, set(targets), sleep,
                                do_reset, read_state(session, ctx).settings_time,
                                host_boot_id, boot_id_before)
    report["requests"] = dict(session.requests)
    return report
