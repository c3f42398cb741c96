"""Whole BIOS operations on one host, each in its own logged-out-afterwards session.

These are what the pack's actions call: snapshot, apply (plan -> stage -> commit -> reset ->
wait_applied) and restore (back to a snapshot). Every result is a plain dict (JSON for the st2
datastore) and carries the request counts of the session that produced it.

One BIOS change path: stage_and_commit, reset_once and wait_bios_applied are what apply_bios and
restore_bios do inside one session, and what the rollout's host steps (hoststeps.HostRun) call
step by step, each in a session of its own, so tests and benchmarks of apply_bios cover what a
rollout runs.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from fleet_rollout.redfish.bios import (
    BiosSnapshot,
    CommitResult,
    StageResult,
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
from fleet_rollout.redfish.power import (
    RESTARTED,
    UNKNOWN,
    AppliedResult,
    BootMarker,
    HostBootId,
    ResetResult,
    RestartNotConfirmed,
    await_restart,
    reset,
    wait_applied,
)


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
    return check_and_snapshot(endpoint, desired, False, sleep)[0]


def check_and_snapshot(endpoint: BmcEndpoint, desired: Dict[str, Any], take: bool = True,
                       sleep: Callable[[float], None] = time.sleep
                       ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """check_desired and (take=True) take_snapshot from the same reads of one session: the
    check first (KnobError before the snapshot is returned), then the BIOS as it is."""
    validate_desired(desired)  # bad knobs are refused before any connection
    with _open(endpoint, sleep) as session:
        return check_and_snapshot_in(session, discover(session, endpoint.vendor), desired, take)


def check_and_snapshot_in(session: RedfishSession, ctx: BmcContext, desired: Dict[str, Any],
                          take: bool = True
                          ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """check_and_snapshot through an open session (`ctx` its discovery)."""
    wanted = validate_desired(desired)
    state = read_state(session, ctx)
    targets = plan(ctx, wanted, state.current)
    compliant = all(state.current.get(k) == v for k, v in targets.items())
    snap = snapshot(session, ctx, state).to_dict() if take else None
    check = {"host": ctx.host, "vendor": ctx.personality.key, "targets": targets,
             "compliant": compliant, "pending": state.pending,
             "active_jobs": [j["id"] for j in state.active_jobs],
             "requests": dict(session.requests)}
    return check, snap


def stage_and_commit(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                     clear_foreign: bool, owned: Any) -> Tuple[StageResult, CommitResult]:
    """Stage `targets` as pending settings and commit them the vendor's way (a config job, an
    apply time); they apply at the next reset."""
    staged = stage(session, ctx, targets, clear_foreign=clear_foreign, owned=owned)
    return staged, commit(session, ctx, staged)


def reset_once(session: RedfishSession, ctx: BmcContext, timeouts: Timeouts,
               sleep: Callable[[float], None], marker: Optional[Dict[str, Any]] = None,
               remember: Optional[Callable[[BootMarker], None]] = None,
               host_boot_id: Optional[HostBootId] = None,
               boot_id_before: Optional[str] = None) -> Optional[ResetResult]:
    """One reset of the system for one purpose, even across retries and resumes.

    marker: what an earlier attempt saved through `remember` (None: no earlier attempt). With a
    marker, a restart since it counts as this reset (None is returned: nothing sent); positive
    evidence that the system runs on from before it sends one ForceRestart; no evidence either
    way raises RestartNotConfirmed (never a second reset). Without one, the reset is sent and
    `remember` gets its marker before the system goes down."""
    if marker is not None:
        before = BootMarker(**marker)
        verdict = await_restart(session, ctx, before, timeouts.graceful, timeouts.poll, sleep,
                                host_boot_id=host_boot_id)
        if verdict == RESTARTED:
            return None
        if verdict == UNKNOWN:
            raise RestartNotConfirmed(
                "restart not confirmed: an earlier attempt may have sent the reset and nothing "
                "shows whether the system restarted; not sending another", ctx.host)
        return reset(session, ctx, graceful_timeout=timeouts.graceful,
                     force_timeout=timeouts.force, poll=timeouts.poll, graceful=False,
                     sleep=sleep, host_boot_id=host_boot_id, boot_id_before=before.boot_id)
    return reset(session, ctx, timeouts.graceful, timeouts.force, timeouts.poll, sleep=sleep,
                 host_boot_id=host_boot_id, boot_id_before=boot_id_before, on_before=remember,
                 expected=timeouts.reboot)


def wait_bios_applied(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                      settings_time_before: Optional[str], job_ids: List[str],
                      timeouts: Timeouts, sleep: Callable[[float], None],
                      host_boot_id: Optional[HostBootId] = None,
                      boot_id_before: Optional[str] = None, since_reset: float = 0.0,
                      seen: Optional[BootMarker] = None,
                      expected: Optional[float] = None) -> AppliedResult:
    """After the reset: until POST is done (up to timeouts.boot), then the BIOS must hold
    `targets` (power.wait_applied names every problem)."""
    return wait_applied(session, ctx, targets, settings_time_before, job_ids, timeouts.boot,
                        timeouts.poll, sleep, host_boot_id, boot_id_before, expected,
                        since_reset, seen)


def _apply_targets(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                   timeouts: Timeouts, clear_foreign: bool, owned: Any,
                   sleep: Callable[[float], None], do_reset: bool,
                   settings_time: Optional[str], host_boot_id: Optional[HostBootId] = None,
                   boot_id_before: Optional[str] = None) -> Dict[str, Any]:
    staged, committed = stage_and_commit(session, ctx, targets, clear_foreign, owned)
    report: Dict[str, Any] = {"host": ctx.host, "vendor": ctx.personality.key,
                              "targets": targets, "stage": staged.to_dict(),
                              "commit": committed.to_dict(), "reset": None, "applied": None,
                              "settings_time_before": settings_time}
    if not staged.needs_reset or not do_reset:
        return report
    before_time = settings_time  # settings Time moves only when the BMC applies settings
    done = reset_once(session, ctx, timeouts, sleep, host_boot_id=host_boot_id,
                      boot_id_before=boot_id_before)
    assert done is not None  # no marker: a reset was sent
    report["reset"] = done.to_dict()
    jobs = [committed.job_id] if committed.job_id else []
    # the look that showed the restart is where the wait for POST starts (not read again)
    seen = BootMarker(**done.after) if done.after else None
    report["applied"] = wait_bios_applied(
        session, ctx, targets, before_time, jobs, timeouts, sleep, host_boot_id,
        (report["reset"]["before"] or {}).get("boot_id"), done.since_sent, seen,
        timeouts.reboot).to_dict()
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
