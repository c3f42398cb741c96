"""How long a planned rollout will take: per batch and in total, before anything starts.

Follows what the workflows do (actions/workflows/rollout_batch.yaml, host_change.yaml), batch
after batch, nothing overlapping:

  batch = approval wait + overhead + pre window (counters before) + host work + soak + window
          (counters after)
  host work = waves x per-host time; waves = ceil(hosts / batches.parallel) (change_hosts runs
          the batch's hosts with `concurrency: parallel`; make_batches already kept a batch
          within max_unavailable_per_site/_rack, so `parallel` is the only limit left), but
          never less than what the controller can do: hosts x controller CPU per host /
          controller cores (Ansible, the actions and the engine for every host; with many hosts
          in flight the action runners, not the reboots, set the pace)
  per-host time = the steps of a wave in order, each = action start + its expected work:
    precheck  the wave's Ansible run (health)
    snapshot  BMC session (the BIOS check and snapshot)
    drain     the wave's Ansible run + drain time (min(assumed drain, drain.timeout))
    kernel    the wave's two Ansible runs (snapshot, settings) when the profile changes kernel
              settings
    stage     BMC session
    reboot    BMC session (the reset; the shutdown it waits for is counted in `wait`)
    wait      BMC session + reboot time: reset sent -> settings applied -> OS back
              (min(assumed reboot, redfish.boot_timeout); the OS's start is waited for in the
              probe step, its time is in the assumed reboot)
    verify    BMC session (the BIOS read back)
    probe     the wave's two Ansible runs (the OS back, the probe) + probe.budget_ms (+ one
              for the kernel check when the profile changes kernel settings, and one for
              irq_affinity numa-local)
    undrain   the wave's Ansible run
  approval wait = min(assumed human response, approval.ttl_minutes) for a batch that needs an
          approval (approval.required, unless batch 0 with auto_approve_canary), else 0
  windows = (canary.pre_windows + 1) x canary.window_seconds (the pre window lasts
          pre_windows windows, the post window one)
  window runs = what the windows' Ansible runs add to them. A run over the batch's hosts and its
          controls takes ceil(hosts / window forks) x an Ansible run (window forks: up to 100
          hosts at once, the pack config's ansible_forks if more; profile.window_forks). The pre
          window's start reaches its hosts over a run, and a host reached late ends its window
          that much later (the change waits for it: gate.collect), unless the batch before
          started it early (a batch after another that needs no approval: its first snapshot
          due when that batch's post window ends). Its read is in the post window's soak. The
          post window's start is in the soak; its read starts read_lead() before its end, its
          hosts waiting for their last sample: it ends a run less the lead after the window,
          hidden in the next batch's pre window when that one started early.
  overhead = (BATCH_ACTIONS + pre steps - 1 + window_steps - 1) x action start (batch_info,
          announce, the answer, the counter collections: each window's start and end and its
          steps, judge, verdict post)
  best case = batch - approval wait (every approval instant)

Every number that the profile does not give is an Assumptions field, stated in the result; the
expected (not the worst-case) duration: timeouts.py has the limits. Not counted: INCONCLUSIVE
verdicts (an `extend` repeats soak + window), retries, failed hosts and their restores, the first
build of the probe on the controller, the plan itself.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Optional

from fleet_rollout.profile import (
    DEFAULT_FORKS,
    SAMPLE_FORKS,
    pre_windows,
    read_lead,
    step_seconds,
    window_forks,
    window_steps,
)
from fleet_rollout.states import HOST_STEPS

BATCH_ACTIONS = 9  # batch_info, announce, ask/auto + record_answer, 4 x collect, judge, post


@dataclass(frozen=True)
class Assumptions:
    """Durations in seconds that no profile field gives: assumed, change them to your fleet's.

    approval_response: an approver answers the batch's question (ASSUMED human response).
    reboot: reset sent -> BIOS settings applied -> OS answers again (the profile has only the
        limit redfish.boot_timeout, which caps this).
    drain: a host's traffic drained (capped by the profile's drain.timeout).
    bmc_session: one Redfish session (discovery, reads, a write).
    ansible_run: one playbook run on one host (SSH connect, a few tasks).
    action_start: StackStorm schedules an action and its runner starts.
    controller_cpu_per_host: CPU-seconds the controller spends on one host change (Ansible, the
        actions, the engine, the batch's counter collections; `make bench-rollout` measures it
        on sim hosts, whose host side runs on the controller too: bench/RESULTS.md).
    controller_cores: cores of the action runners (0: this machine's)."""

    approval_response: float = 600.0
    reboot: float = 300.0
    drain: float = 60.0
    bmc_session: float = 10.0
    ansible_run: float = 10.0
    action_start: float = 3.0
    controller_cpu_per_host: float = 2.0
    controller_cores: float = 0.0

    def to_dict(self) -> Dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def approval_needed(profile: Dict[str, Any], index: int) -> bool:
    """The rule of service.needs_approval: required, unless the canary is auto-approved."""
    approval = profile["approval"]
    return bool(approval["required"]) and not (index == 0 and approval["auto_approve_canary"])


def host_steps(profile: Dict[str, Any], assume: Assumptions) -> Dict[str, float]:
    """Expected seconds of each host_change step for one host (action start included)."""
    kernel = profile.get("kernel") or {}
    bmc, run = assume.bmc_session, assume.ansible_run
    kernel_run = 2 * run if kernel else 0.0  # the snapshot, the settings
    check = run if kernel.get("cmdline") or kernel.get("sysctl") else 0.0
    reapply = run if kernel.get("irq_affinity") == "numa-local" else 0.0
    drain = min(assume.drain, float(profile["drain"]["timeout"]))
    reboot = min(assume.reboot, float(profile["redfish"]["boot_timeout"]))
    work = {
        "precheck": run,  # the wave's run
        "snapshot": bmc,  # the BIOS check and snapshot
        "drain": run + drain,  # the wave's run
        "kernel": kernel_run,  # the wave's run
        "stage": bmc,
        "reboot": bmc,
        "wait": bmc + reboot,
        "verify": bmc,
        "probe": 2 * run + check + reapply + float(profile["probe"]["budget_ms"]) / 1000.0,
        "undrain": run,  # the wave's run
    }
    return {step: round(assume.action_start + work[step], 1) for step in HOST_STEPS}


def waves(hosts: int, parallel: int) -> int:
    """Rounds of at most `parallel` hosts at once (0 for an empty batch)."""
    return int(math.ceil(hosts / float(max(1, int(parallel))))) if hosts > 0 else 0


def controller_bound(hosts: int, assume: Assumptions) -> float:
    """Seconds the controller needs for `hosts` host changes at full use of its cores."""
    return hosts * assume.controller_cpu_per_host / max(1.0, assume.controller_cores)


def collection_run(hosts: int, forks: int, assume: Assumptions) -> float:
    """Seconds one counter window's start or read run takes over `hosts` hosts (a batch and its
    controls), profile.window_forks() at a time."""
    return waves(hosts, window_forks(forks, hosts)) * assume.ansible_run


def early_pre(profile: Dict[str, Any], index: int, batches: int) -> bool:
    """Batch `index`'s pre window starts in the post window of the batch before it (gate.py;
    service.batch_info's early_pre): a batch after another that needs no approval."""
    return 0 < index < batches and not approval_needed(profile, index)


def window_runs(hosts: int, forks: int, profile: Dict[str, Any], assume: Assumptions,
                early: bool = False, next_early: bool = False) -> float:
    """Seconds a batch's two counter windows take beyond their length (see the module's
    docstring): the pre window's start run over `hosts` hosts (`early`: started by the batch
    before, 0) and the post window's read, less its lead (`next_early`: hidden in the next
    batch's pre window, 0)."""
    run = collection_run(hosts, forks, assume)
    lead = read_lead(step_seconds(profile["canary"]))
    return (0.0 if early else run) + (0.0 if next_early else max(0.0, run - lead))


def _racks(plan: Dict[str, Any], names: List[str]) -> int:
    info = plan.get("hosts") or {}
    return len({(info.get(h, {}).get("site"), info.get(h, {}).get("rack")) for h in names})


def estimate_plan(plan: Dict[str, Any], assume: Optional[Assumptions] = None,
                  forks: int = DEFAULT_FORKS) -> Dict[str, Any]:
    """Seconds per batch (its parts, `seconds` expected, `best_case`, `cumulative`) and totals
    (sums of the batches' parts), from a stored plan (plan.build_plan) and its profile; `forks`:
    the pack config's ansible_forks (hosts one Ansible run works on at once)."""
    assume = assume or Assumptions()
    if assume.controller_cores <= 0:
        assume = replace(assume, controller_cores=float(os.cpu_count() or 1))
    profile = plan["profile"]
    parallel = int(profile["batches"]["parallel"])
    window = float(profile["canary"]["window_seconds"])
    soak = float(profile["canary"]["soak_seconds"])
    ttl = float(profile["approval"]["ttl_minutes"]) * 60.0
    steps = host_steps(profile, assume)
    per_host = round(sum(steps.values()), 1)
    pre_steps, post_steps = window_steps(profile["canary"])
    windows = window * (1 + pre_windows(profile["canary"]))
    overhead = round((BATCH_ACTIONS + pre_steps - 1 + post_steps - 1) * assume.action_start, 1)
    rows: List[Dict[str, Any]] = []
    unchanged = set(plan.get("control") or [])
    cumulative = best_cumulative = 0.0
    total = len(plan["batches"])
    for batch in plan["batches"]:
        count = len(batch["hosts"])
        rounds = waves(count, parallel)
        approval = min(assume.approval_response, ttl) if approval_needed(
            profile, batch["index"]) else 0.0
        work = max(rounds * per_host, controller_bound(count, assume))
        unchanged.difference_update(batch["hosts"])  # plan.controls_for_batch, in one pass
        collected = count + len(unchanged)
        parts = {"approval_wait": round(approval, 1), "overhead": overhead,
                 "windows": round(windows, 1),
                 "window_runs": round(window_runs(
                     collected, forks, profile, assume, early_pre(profile, batch["index"], total),
                     early_pre(profile, batch["index"] + 1, total)), 1),
                 "host_work": round(work, 1), "soak": round(soak, 1)}
        seconds = round(sum(parts.values()), 1)
        best = round(seconds - parts["approval_wait"], 1)
        cumulative = round(cumulative + seconds, 1)
        best_cumulative = round(best_cumulative + best, 1)
        rows.append({"index": batch["index"], "canary": bool(batch.get("canary")),
                     "hosts": count, "sites": len(batch.get("sites") or []),
                     "racks": _racks(plan, batch["hosts"]), "in_flight": min(count, parallel),
                     "collected": collected, "waves": rounds, **parts, "seconds": seconds,
                     "best_case": best,
                     "cumulative": cumulative, "best_case_cumulative": best_cumulative})
    keys = ("approval_wait", "overhead", "windows", "window_runs", "host_work", "soak")
    totals: Dict[str, Any] = {k: round(sum(r[k] for r in rows), 1) for k in keys}
    totals.update(batches=len(rows), hosts=sum(r["hosts"] for r in rows),
                  waves=sum(r["waves"] for r in rows),
                  expected=round(sum(r["seconds"] for r in rows), 1),
                  best_case=round(sum(r["best_case"] for r in rows), 1))
    totals.update(expected_hours=round(totals["expected"] / 3600.0, 2),
                  expected_days=round(totals["expected"] / 86400.0, 2),
                  best_case_hours=round(totals["best_case"] / 3600.0, 2))
    notes = []
    if any(approval_needed(profile, r["index"]) for r in rows) and \
            assume.approval_response > ttl:
        notes.append(f"the assumed approval response ({duration(assume.approval_response)}) "
                     f"exceeds approval.ttl_minutes ({duration(ttl)}): such a batch is "
                     "rejected, the rollout ends there")
    return {"unit": "seconds", "per_host": per_host, "host_steps": steps, "parallel": parallel,
            "forks": int(forks),
            "batches": rows, "totals": totals,
            "assumptions": assume.to_dict(),
            "profile": {"window_seconds": window, "pre_windows": pre_windows(profile["canary"]),
                        "soak_seconds": soak, "ttl_seconds": ttl,
                        "boot_timeout": float(profile["redfish"]["boot_timeout"]),
                        "drain_timeout": float(profile["drain"]["timeout"]),
                        "probe_budget_ms": profile["probe"]["budget_ms"],
                        "approval_required": bool(profile["approval"]["required"]),
                        "auto_approve_canary": bool(profile["approval"]["auto_approve_canary"])},
            "notes": notes}


def duration(seconds: float) -> str:
    """3d04h, 2h05m, 7m30s, 45s."""
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def render_estimate(estimate: Dict[str, Any]) -> str:
    """The batch table: one row per batch, then the totals and the assumptions."""
    t, a = estimate["totals"], estimate["assumptions"]
    lines = [f"{'BATCH':<7}{'HOSTS':>6}  {'SITES/RACKS':>11}{'WAVES':>6}  {'APPROVAL':>9}"
             f"{'HOSTWORK':>9}{'WINDOWS':>9}{'DURATION':>10}{'CUMULATIVE':>12}"]
    for r in estimate["batches"]:
        label = f"{r['index'] + 1}{'*' if r['canary'] else ''}"
        where = f"{r['sites']}/{r['racks']}"
        lines.append(f"{label:<7}{r['hosts']:>6}  {where:>11}{r['waves']:>6}  "
                     f"{duration(r['approval_wait']):>9}{duration(r['host_work']):>9}"
                     f"{duration(r['windows'] + r['window_runs'] + r['soak']):>9}"
                     f"{duration(r['seconds']):>10}"
                     f"{duration(r['cumulative']):>12}")
    lines.append("* canary batch; WINDOWS: counter windows before and after (with their Ansible "
                 "runs) and the soak")
    lines.append(f"total: {t['hosts']} host(s) in {t['batches']} batch(es), {t['waves']} wave(s)"
                 f" of at most {estimate['parallel']} host(s): expected "
                 f"{duration(t['expected'])} ({t['expected_hours']:.1f} h, "
                 f"{t['expected_days']:.2f} days); best case (every approval instant) "
                 f"{duration(t['best_case'])} ({t['best_case_hours']:.1f} h)")
    lines.append(f"of which: approval waits {duration(t['approval_wait'])}, host work "
                 f"{duration(t['host_work'])}, counter windows {duration(t['windows'])} "
                 f"(+ {duration(t['window_runs'])} for their Ansible runs, up to "
                 f"{window_forks(estimate['forks'], SAMPLE_FORKS)} host(s) at once), "
                 f"soak {duration(t['soak'])}, action overhead {duration(t['overhead'])}")
    lines.append(f"assumed: an approver answers in {duration(a['approval_response'])}, a reboot "
                 f"takes {duration(a['reboot'])}, a drain {duration(a['drain'])}; one host "
                 f"{duration(estimate['per_host'])} (steps "
                 + ", ".join(f"{k} {duration(v)}" for k, v in estimate["host_steps"].items())
                 + f"); the controller {a['controller_cpu_per_host']:g} CPU-s per host on "
                 f"{a['controller_cores']:g} core(s); no failures, retries or INCONCLUSIVE "
                 "extensions")
    lines.extend(f"note: {n}" for n in estimate["notes"])
    return "\n".join(lines)
