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
from typing import Any, Dict, List, Mapping, Optional

from fleet_rollout.maintenance import MAX_HORIZON, Schedule, describe, next_fit
from fleet_rollout.profile import (
    DEFAULT_FORKS,
    SAMPLE_FORKS,
    pre_windows,
    read_lead,
    step_seconds,
    window_forks,
    window_steps,
)
from fleet_rollout.site_limits import plan_schedules
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


def approval_needed(profile: Dict[str, Any], index: int, hosts: int = 0) -> bool:
    """Whether batch `index` (of `hosts` hosts) waits for a human (service.needs_approval):
    approval.required, except the canary with auto_approve_canary and, when
    approval.manual_batches is set, every batch after the first manual_batches that has at
    most approval.manual_above_hosts hosts (when that is set): those are promoted by the
    judge's PASS of the batch before."""
    approval = profile["approval"]
    if not approval["required"] or (index == 0 and approval["auto_approve_canary"]):
        return False
    manual = approval.get("manual_batches")
    if manual is None or index < int(manual):
        return True
    above = approval.get("manual_above_hosts")
    return above is not None and hosts > int(above)


def host_steps(profile: Dict[str, Any], assume: Assumptions, wave: int = 1,
               forks: int = DEFAULT_FORKS) -> Dict[str, float]:
    """Expected seconds of each step of a wave of `wave` hosts (action start included): each
    of the wave's Ansible runs works on `forks` hosts at once, ceil(wave / forks) rounds."""
    kernel = profile.get("kernel") or {}
    bmc = assume.bmc_session
    run = assume.ansible_run * waves(max(1, wave), forks)
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


def early_pre(profile: Dict[str, Any], index: int, batches: int, hosts: int = 0) -> bool:
    """Batch `index`'s pre window starts in the post window of the batch before it (gate.py;
    service.batch_info's early_pre): a batch after another that needs no approval."""
    return 0 < index < batches and not approval_needed(profile, index, hosts)


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


PARTS = ("approval_wait", "window_wait", "overhead", "windows", "window_runs", "host_work",
         "soak")


class BatchModel:
    """A batch's expected parts (the module's docstring) for a profile, the assumptions and
    the pack config's forks."""

    def __init__(self, profile: Dict[str, Any], assume: Assumptions, forks: int) -> None:
        self.profile, self.assume, self.forks = profile, assume, int(forks)
        self.parallel = int(profile["batches"]["parallel"])
        canary = profile["canary"]
        self.window = float(canary["window_seconds"])
        self.pre_window = self.window * pre_windows(canary)
        self.soak = float(canary["soak_seconds"])
        self.ttl = float(profile["approval"]["ttl_minutes"]) * 60.0
        pre_steps, post_steps = window_steps(canary)
        self.overhead = round((BATCH_ACTIONS + pre_steps - 1 + post_steps - 1)
                              * assume.action_start, 1)
        self._wave: Dict[int, float] = {}

    def wave_seconds(self, size: int) -> float:
        """One wave of `size` hosts, its steps one after the other."""
        if size not in self._wave:
            self._wave[size] = round(sum(host_steps(self.profile, self.assume, size,
                                                    self.forks).values()), 1)
        return self._wave[size]

    def host_work(self, count: int) -> float:
        """The batch's waves one after the other, never faster than the controller."""
        full, rest = divmod(count, max(1, self.parallel))
        work = full * self.wave_seconds(self.parallel) + (self.wave_seconds(rest) if rest else 0)
        return max(work, controller_bound(count, self.assume))

    def approval(self, index: int, count: int) -> float:
        return min(self.assume.approval_response, self.ttl) if approval_needed(
            self.profile, index, count) else 0.0

    def before_change(self, count: int, collected: int, early: bool) -> float:
        """From the batch's start (approved) to its last host's change: the pre window (its
        start run unless started early) and the host work; a maintenance window must hold
        all of it."""
        run = 0.0 if early else collection_run(collected, self.forks, self.assume)
        return self.overhead + self.pre_window + run + self.host_work(count)

    def parts(self, index: int, count: int, collected: int, early: bool, next_early: bool,
              window_wait: float = 0.0) -> Dict[str, float]:
        return {"approval_wait": round(self.approval(index, count), 1),
                "window_wait": round(window_wait, 1), "overhead": self.overhead,
                "windows": round(self.window + self.pre_window, 1),
                "window_runs": round(window_runs(collected, self.forks, self.profile,
                                                 self.assume, early, next_early), 1),
                "host_work": round(self.host_work(count), 1), "soak": round(self.soak, 1)}


class PlanClock:
    """The plan's clock while batches are made (plan.Scheduler): the next batch takes the
    window group whose sites can start it first (its approval waited for), and the clock moves
    on by that batch's expected duration."""

    def __init__(self, model: BatchModel, schedules: Mapping[str, Schedule],
                 group_of: Mapping[str, int], start: float, controls: int = 0) -> None:
        self.model, self.schedules, self.group_of = model, schedules, group_of
        self.clock, self.index, self.controls = float(start), 0, int(controls)
        self.members: Dict[int, List[Schedule]] = {}
        for site, group in group_of.items():
            self.members.setdefault(group, []).append(schedules[site])

    def _start(self, group: int, size: int) -> float:
        ready = self.clock + self.model.approval(self.index, size)
        need = self.model.before_change(size, size + self.controls, False)
        fit = next_fit(self.members[group][:1], ready, need)
        return fit if fit is not None else float("inf")

    def pick(self, groups: List[int], size: int) -> int:
        return min(groups, key=lambda g: (self._start(g, size), g))

    def placed(self, hosts: List[Any]) -> None:
        size = len(hosts)
        group = self.group_of[hosts[0].site]
        start = self._start(group, size)
        start = start if start != float("inf") else self.clock
        parts = self.model.parts(self.index, size, size + self.controls, False, False)
        self.clock = start + sum(v for k, v in parts.items() if k != "approval_wait")
        self.index += 1


def _simulate(model: BatchModel, batches: List[Dict[str, Any]], site_schedules: Mapping[
        str, Schedule], start: float, controls: List[str],
        notes: List[str]) -> List[Dict[str, Any]]:
    """Each batch's row: its parts, with the wait for its sites' maintenance windows after its
    approval, on a clock from `start`."""
    rows: List[Dict[str, Any]] = []
    unchanged = set(controls)
    total = len(batches)
    clock = float(start)
    restricted_plan = any(not s.always_open for s in site_schedules.values())
    counts = [len(b["hosts"]) if isinstance(b["hosts"], list) else int(b["hosts"])
              for b in batches]
    for position, batch in enumerate(batches):
        index, count = int(batch.get("index", position)), counts[position]
        if isinstance(batch["hosts"], list):
            unchanged.difference_update(batch["hosts"])  # plan.controls_for_batch, in one pass
        collected = count + len(unchanged)
        early = early_pre(model.profile, index, total, count)
        next_early = position + 1 < total and early_pre(model.profile, index + 1, total,
                                                        counts[position + 1])
        wait = 0.0
        if restricted_plan:
            ready = clock + model.approval(index, count)
            need = model.before_change(count, collected, early)
            found = next_fit([site_schedules[s] for s in batch.get("sites") or []
                              if s in site_schedules], ready, need)
            if found is None:
                notes.append(f"batch {index + 1}: its sites' maintenance windows never hold "
                             f"its {duration(need)} of work within "
                             f"{duration(MAX_HORIZON)}: it waits for an operator")
            else:
                wait = found - ready
            early = early and wait <= 0  # a pre window started early is too old by then
        parts = model.parts(index, count, collected, early, next_early, wait)
        seconds = round(sum(parts.values()), 1)
        clock += seconds
        rows.append({"index": index, "canary": bool(batch.get("canary")), "hosts": count,
                     "sites": len(batch.get("sites") or []), "in_flight": min(count,
                                                                                model.parallel),
                     "collected": collected, "waves": waves(count, model.parallel), **parts,
                     "seconds": seconds, "best_case": round(seconds - parts["approval_wait"], 1),
                     "start": round(clock - seconds + parts["approval_wait"]
                                    + parts["window_wait"], 1)})
    return rows


def estimate_plan(plan: Dict[str, Any], assume: Optional[Assumptions] = None,
                  forks: int = DEFAULT_FORKS, start: Optional[float] = None) -> Dict[str, Any]:
    """Seconds per batch (its parts, `seconds` expected, `best_case`, `cumulative`) and totals
    (sums of the batches' parts), from a stored plan (plan.build_plan) and its profile; `forks`:
    the pack config's ansible_forks (hosts one Ansible run works on at once); `start`: when
    the rollout starts (the plan's time), for the maintenance windows. With it, the capacity
    bound: the same model over the batches the limits allow at most (plan `bound_batches`),
    none waiting for an approval, and the estimate's ratio to it."""
    assume = assume or Assumptions()
    if assume.controller_cores <= 0:
        assume = replace(assume, controller_cores=float(os.cpu_count() or 1))
    profile = plan["profile"]
    model = BatchModel(profile, assume, forks)
    start = float(plan.get("created") or 0.0) if start is None else float(start)
    site_schedules = plan_schedules(plan["profile"], plan.get("hosts") or {})
    notes: List[str] = []
    rows = _simulate(model, list(plan["batches"]), site_schedules, start,
                     list(plan.get("control") or []), notes)
    cumulative = best_cumulative = 0.0
    for row, batch in zip(rows, plan["batches"]):
        cumulative = round(cumulative + row["seconds"], 1)
        best_cumulative = round(best_cumulative + row["best_case"], 1)
        row.update(racks=_racks(plan, batch["hosts"]), cumulative=cumulative,
                   best_case_cumulative=best_cumulative)
    totals: Dict[str, Any] = {k: round(sum(r[k] for r in rows), 1) for k in PARTS}
    totals.update(batches=len(rows), hosts=sum(r["hosts"] for r in rows),
                  waves=sum(r["waves"] for r in rows),
                  expected=round(sum(r["seconds"] for r in rows), 1),
                  best_case=round(sum(r["best_case"] for r in rows), 1))
    totals.update(expected_hours=round(totals["expected"] / 3600.0, 2),
                  expected_days=round(totals["expected"] / 86400.0, 2),
                  best_case_hours=round(totals["best_case"] / 3600.0, 2))
    bound = _bound(plan, model, site_schedules, start)
    if bound:
        totals.update(bound=bound, bound_hours=round(bound / 3600.0, 2),
                      bound_ratio=round(totals["expected"] / bound, 3))
    if any(approval_needed(profile, r["index"], r["hosts"]) for r in rows) and \
            assume.approval_response > model.ttl:
        notes.append(f"the assumed approval response ({duration(assume.approval_response)}) "
                     f"exceeds approval.ttl_minutes ({duration(model.ttl)}): such a batch is "
                     "rejected, the rollout ends there")
    return {"unit": "seconds", "per_host": model.wave_seconds(1),
            "host_steps": host_steps(profile, assume, 1, forks),
            "wave_seconds": model.wave_seconds(min(model.parallel, max(
                [r["hosts"] for r in rows] or [1]))),
            "parallel": model.parallel, "forks": int(forks), "start": start,
            "batches": rows, "totals": totals,
            "assumptions": assume.to_dict(),
            "profile": {"window_seconds": model.window,
                        "pre_windows": pre_windows(profile["canary"]),
                        "soak_seconds": model.soak, "ttl_seconds": model.ttl,
                        "boot_timeout": float(profile["redfish"]["boot_timeout"]),
                        "drain_timeout": float(profile["drain"]["timeout"]),
                        "probe_budget_ms": profile["probe"]["budget_ms"],
                        "approval_required": bool(profile["approval"]["required"]),
                        "auto_approve_canary": bool(profile["approval"]["auto_approve_canary"]),
                        "manual_batches": profile["approval"].get("manual_batches"),
                        "manual_above_hosts": profile["approval"].get("manual_above_hosts"),
                        "maintenance": {site: describe(s) for site, s in
                                        sorted(site_schedules.items()) if not s.always_open}},
            "notes": notes}


def _bound(plan: Mapping[str, Any], model: BatchModel, site_schedules: Mapping[str, Schedule],
           start: float) -> float:
    """The capacity bound: the batches at the limits (no canary ramp), none approved by a
    human, on the same clock; 0 when the plan has none recorded."""
    ideal = list(plan.get("bound_batches") or [])
    if not ideal:
        return 0.0
    profile = dict(model.profile, approval=dict(model.profile["approval"], required=False))
    free = BatchModel(profile, model.assume, model.forks)
    controls = list(plan.get("control") or [])
    rows = _simulate(free, [{"index": i, "hosts": int(b["hosts"]), "sites": b.get("sites")}
                            for i, b in enumerate(ideal)], site_schedules, start, controls, [])
    return round(sum(r["seconds"] for r in rows), 1)


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
             f"{'MAINT':>9}{'HOSTWORK':>9}{'WINDOWS':>9}{'DURATION':>10}{'CUMULATIVE':>12}"]
    for r in estimate["batches"]:
        label = f"{r['index'] + 1}{'*' if r['canary'] else ''}"
        where = f"{r['sites']}/{r['racks']}"
        lines.append(f"{label:<7}{r['hosts']:>6}  {where:>11}{r['waves']:>6}  "
                     f"{duration(r['approval_wait']):>9}{duration(r['window_wait']):>9}"
                     f"{duration(r['host_work']):>9}"
                     f"{duration(r['windows'] + r['window_runs'] + r['soak']):>9}"
                     f"{duration(r['seconds']):>10}"
                     f"{duration(r['cumulative']):>12}")
    lines.append("* canary batch; APPROVAL: waiting for a human; MAINT: waiting for the sites' "
                 "maintenance windows; WINDOWS: counter windows before and after (with their "
                 "Ansible runs) and the soak")
    lines.append(f"total: {t['hosts']} host(s) in {t['batches']} batch(es), {t['waves']} wave(s)"
                 f" of at most {estimate['parallel']} host(s): expected "
                 f"{duration(t['expected'])} ({t['expected_hours']:.1f} h, "
                 f"{t['expected_days']:.2f} days); best case (every approval instant) "
                 f"{duration(t['best_case'])} ({t['best_case_hours']:.1f} h)")
    if t.get("bound"):
        lines.append(f"capacity bound (every batch as large as the limits allow, no approval "
                     f"waits): {duration(t['bound'])} ({t['bound_hours']:.1f} h); ratio "
                     f"{t['bound_ratio']:.2f}")
    lines.append(f"of which: approval waits {duration(t['approval_wait'])}, maintenance window "
                 f"waits {duration(t['window_wait'])}, host work "
                 f"{duration(t['host_work'])}, counter windows {duration(t['windows'])} "
                 f"(+ {duration(t['window_runs'])} for their Ansible runs, up to "
                 f"{window_forks(estimate['forks'], SAMPLE_FORKS)} host(s) at once), "
                 f"soak {duration(t['soak'])}, action overhead {duration(t['overhead'])}")
    lines.append(f"assumed: an approver answers in {duration(a['approval_response'])}, a reboot "
                 f"takes {duration(a['reboot'])}, a drain {duration(a['drain'])}; one host "
                 f"{duration(estimate['per_host'])} (steps "
                 + ", ".join(f"{k} {duration(v)}" for k, v in estimate["host_steps"].items())
                 + f"; a wave of {min(estimate['parallel'], t['hosts'] or 1)}: "
                 f"{duration(estimate['wave_seconds'])}, its Ansible runs on "
                 f"{estimate['forks']} host(s) at once"
                 + f"); the controller {a['controller_cpu_per_host']:g} CPU-s per host on "
                 f"{a['controller_cores']:g} core(s); no failures, retries or INCONCLUSIVE "
                 "extensions")
    for site, text in list(estimate["profile"].get("maintenance", {}).items())[:5]:
        lines.append(f"maintenance window: {site} {text}")
    hidden = len(estimate["profile"].get("maintenance", {})) - 5
    if hidden > 0:
        lines.append(f"maintenance window: and {hidden} more site(s)")
    lines.extend(f"note: {n}" for n in estimate["notes"])
    return "\n".join(lines)
