"""The change of one host, step by step, and its restore.

    precheck (health) -> snapshot (BIOS check and snapshot) -> drain -> kernel (snapshot,
    settings) -> stage (BIOS) -> reboot -> wait -> verify (BIOS read-back) -> probe (kernel
    check, topology probe) -> undrain
    (the host-side steps of a wave's hosts, precheck, drain, kernel, probe and undrain, are one
    action and one Ansible run (per playbook) over them: fleet_rollout.wavesteps; the others,
    the Redfish work, one action per host)
    on failure: restore (BIOS and kernel back to the snapshots, reboot, wait, undrain) or, by
    policy, leave the host drained and marked.

Every step is idempotent: its outcome is recorded in the datastore before it returns, so a retry
or a resumed workflow finds finished steps done (a with-items retry re-runs every item). Steps
and restores run one at a time per host, across rollouts and action runners: each is one
`fleet_rollout.host_step` execution, and StackStorm's concurrency policy on its `host` runs one
per host at a time (policies/host_step_one_at_a_time.yaml); a restore also waits for any wave
step naming the host (wavesteps.wait_for_waves). A step refuses unless the host's
batch has a recorded approval, the rollout is not halted and no restore has begun; a host
belongs to one rollout at a time (claims). The first snapshots are never overwritten (BIOS:
taken before the drain; kernel: before the settings are applied); a drain is marked as asked
for before it is sent (a re-run or a restore after a kill knows the flag is ours); a reset,
forward or restoring, is sent once (a marker saved before the POST). Any error ends the step
with a recorded outcome: no host stays "running".
"""
from __future__ import annotations

import contextlib
import copy
import json
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from fleet_rollout import claims
from fleet_rollout.audit import Audit
from fleet_rollout.config import PackConfig
from fleet_rollout.errors import FleetRolloutError, HostError, RedfishError
from fleet_rollout.hostside import osgate
from fleet_rollout.hostside.ansible_run import HostResult
from fleet_rollout.hostside.playbook_steps import HostSide
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import batch_of
from fleet_rollout.profile import step_seconds
from fleet_rollout.redfish import bios as rf_bios
from fleet_rollout.redfish import power as rf_power
from fleet_rollout.redfish.client import RedfishSession
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.operations import (
    Timeouts,
    check_and_snapshot_in,
    check_desired,
    reset_once,
    restore_bios,
    stage_and_commit,
    take_snapshot,
    wait_bios_applied,
)
from fleet_rollout.states import (
    DONE,
    FAILED,
    HOST_STEPS,
    IN_PROGRESS_STATES,
    LEFT_DRAINED,
    PENDING,
    RESTORE_DONE_STATES,
    RESTORE_FAILED,
    RESTORE_STATES,
    RESTORE_STEP,
    RESTORED,
    RESTORING,
    RUNNING,
    WAVE_STEPS,
    StepRegistry,
    batch_label,
    window_id,
)
from fleet_rollout.store import RolloutState, Store

steps = StepRegistry()  # each HostRun step_* says which step it is
_ABSENT = object()  # a key a state does not have (merge_host_state)

# seconds beyond a step a drain waits on the host for its pre window's sampler (_pre_window)
PRE_WINDOW_SLACK = 5.0


class Halted(FleetRolloutError):
    """The rollout's halt flag is set: no step may touch a host (restores still run)."""


class NotApproved(FleetRolloutError):
    """The host's batch has no recorded approval: no step may touch it."""


HOST_FIELDS = frozenset(f.name for f in fields(FleetHost))  # a plan's host info has more


@dataclass
class RolloutContext:
    store: Store
    rollout_id: str
    config: PackConfig
    hostside: HostSide
    execution_id: str = ""
    user: str = ""
    sleep: Callable[[float], None] = time.sleep
    # a plan document, or (the default) store.PlanView: the stored plan read lazily (its head
    # now; a host's bucket, a batch's hosts only when asked for), never the whole plan
    plan: Any = field(default_factory=dict)
    # seconds a reboot is expected to take (read from the rollout meta at the first timeouts();
    # 0: none learned yet)
    expected_reboot: Optional[float] = None

    def __post_init__(self) -> None:
        self.state = RolloutState(self.store, self.rollout_id)
        if not self.plan:
            self.plan = self.state.plan_view()
        self.profile: Dict[str, Any] = self.plan["profile"]
        self.audit = Audit(self.store, self.rollout_id)

    def host(self, name: str) -> FleetHost:
        info = self.plan["hosts"].get(name)  # a PlanView reads only this host's bucket
        if info is None:
            raise HostError(f"not part of rollout {self.rollout_id}", name)
        return FleetHost(**{k: v for k, v in info.items() if k in HOST_FIELDS})

    def timeouts(self) -> Timeouts:
        """The profile's waits, and the reboot time batch_info learned from the hosts of the
        batches before (rollout meta `expected_reboot`; none for the first batch)."""
        r = self.profile["redfish"]
        if self.expected_reboot is None:
            value = self.state.meta().get("expected_reboot")
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            self.expected_reboot = float(value) if ok else 0.0
        return Timeouts(graceful=r["graceful_timeout"], force=r["force_timeout"],
                        boot=r["boot_timeout"], poll=r["poll"],
                        reboot=self.expected_reboot or None)


class HostRun:
    """The steps of one host in one rollout."""

    STALE_ASK = 60.0  # seconds: a host its BMC shows down is still asked this often

    def __init__(self, ctx: RolloutContext, name: str) -> None:
        self.ctx = ctx
        self.name = name
        self.host = ctx.host(name)
        # when this action began its work on the host: a drain asked for before it
        # (drain_asked, a time) was asked by an earlier attempt
        self._began = time.time()
        # in a wave step (WaveRun): this host's result of the wave's host-side run(s), as
        # wave_call gives it; None: the step runs its own
        self.wave: Optional[Dict[str, Any]] = None
        # the host's state as this action last loaded or saved it (save writes only what
        # changed since)
        self._loaded: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------------ state
    def load(self) -> Dict[str, Any]:
        state = self.ctx.state.host(self.name)
        state.setdefault("host", self.name)
        state.setdefault("steps", {})
        state.setdefault("status", PENDING)
        self._loaded = copy.deepcopy(state)
        return state

    def save(self, state: Dict[str, Any]) -> None:
        """Write what this action changed in the host's state since it loaded it (or last
        saved it) over what is stored now: a wave step (one action over many hosts, outside the
        host policy) and a restore of one of its hosts may both hold the state, and neither
        loses the other's records. `state` becomes what was written."""
        state["updated"] = time.time()
        merged = merge_host_state(self._loaded, state, self.ctx.state.host(self.name))
        self.ctx.state.save_host(self.name, merged)
        self._loaded = copy.deepcopy(merged)
        state.clear()
        state.update(merged)

    def _record(self, state: Dict[str, Any], step: str, ok: bool, detail: Any,
                started: float, reached: bool = True) -> None:
        """The outcome of `step` (or "restore"); `reached`: an ok step becomes the host's step."""
        state["steps"][step] = {"ok": ok, "at": time.time(), "started": started,
                                "seconds": round(time.time() - started, 3), "detail": detail,
                                "execution": self.ctx.execution_id}
        if ok and reached:
            state["step"] = step
        self.save(state)

    def endpoint(self) -> Any:
        return self.ctx.config.endpoint(self.host)

    def targets(self) -> Dict[str, str]:
        return dict(self.ctx.profile["bios"])

    # ------------------------------------------------------------------ run
    def run(self, step: str) -> Dict[str, Any]:
        """One step. Never two at once for a host: its callers are fleet_rollout.host_step,
        which StackStorm runs one at a time per host on every action runner (its concurrency
        policy), and a wave step, which a host's own steps and restores wait for."""
        steps.check(step)
        self._began = time.time()
        return self._run_step(step)

    @contextlib.contextmanager
    def _bmc(self) -> Iterator[Tuple[RedfishSession, Any]]:
        """A logged-in session of the host's BMC and its discovery (logged out at the end)."""
        ep = self.endpoint()
        with RedfishSession(ep) as session:
            yield session, discover(session, ep.vendor)

    def _refuse_unless_allowed(self, step: str, state: Dict[str, Any],
                               claim: bool = True) -> None:
        """Refused (raises) unless the step may run: not halted, no restore begun, the host's
        batch approved, and the host this rollout's. `claim`: the host is claimed here (a
        host_step, under the host policy); else (a wave step) the claims are only read."""
        halt = self.ctx.state.halted()
        if halt:
            raise Halted(f"rollout {self.ctx.rollout_id} halted ({halt.get('reason')}); "
                         f"step {step} not started", self.name)
        if state["status"] in RESTORE_STATES:
            raise HostError(f"host is {state['status']} in this rollout; step {step} not "
                            "started", self.name)
        batch = batch_of(self.ctx.plan, self.name)
        if batch is None:
            raise NotApproved(f"in no batch of rollout {self.ctx.rollout_id} (a control host "
                              "is never changed); step not started", self.name)
        approval = self.ctx.state.batch(batch).get("approval") or {}
        if approval.get("approved") is not True:
            raise NotApproved(f"batch {batch_label(batch)} of rollout {self.ctx.rollout_id} has no "
                              f"recorded approval; step {step} not started", self.name)
        if claim:
            claims.claim(self.ctx.store, self.name, self.ctx.rollout_id)
        else:
            claims.check(self.ctx.store, self.name, self.ctx.rollout_id,
                         held=HOST_STEPS.index(step) > HOST_STEPS.index("snapshot"))

    def _run_step(self, step: str) -> Dict[str, Any]:
        began = self.begin(step)
        if "skipped" in began:
            return began
        return self.finish(step, began["state"])

    def begin(self, step: str, claim: bool = True) -> Dict[str, Any]:
        """The step's start: {"skipped": True, ...} when it is done already, else the host's
        state, marked running ({"state": ...}); refused (raises) unless the step may run.
        `claim`: False in a wave step (outside the host policy: claims only read)."""
        state = self.load()
        done = state["steps"].get(step)
        if done and done.get("ok"):
            return {"host": self.name, "step": step, "skipped": True, "detail": done["detail"]}
        self._refuse_unless_allowed(step, state, claim)
        state["status"] = RUNNING
        return {"state": state}

    def finish(self, step: str, state: Dict[str, Any]) -> Dict[str, Any]:
        """The step's work on a begun state, its outcome recorded either way."""
        started = time.time()
        try:
            detail = steps.function(step)(self, state)
        except Exception as err:  # every outcome is recorded, then re-raised
            message = _outcome_message(err)
            state["error"] = {"step": step, "message": message}
            state["status"] = FAILED
            self._record(state, step, False, {"error": message}, started)
            if isinstance(err, FleetRolloutError):
                raise
            raise HostError(f"step {step}: {message}", self.name) from err
        if step == HOST_STEPS[-1]:
            state["status"] = DONE
        self._record(state, step, True, detail, started)
        if step == HOST_STEPS[-1]:
            claims.release(self.ctx.store, self.name, self.ctx.rollout_id)
        return {"host": self.name, "step": step, "skipped": False, "detail": detail}

    def side(self, call: Callable[[List[str]], Dict[str, Any]]) -> Dict[str, Any]:
        """This host's result of a host-side step's run: the wave's (WaveRun ran it over every
        host of the wave), else `call` for this host alone."""
        if self.wave is not None:
            return self.wave
        return call([self.name])

    def before_run(self, step: str, state: Dict[str, Any]) -> None:
        """What a host-side step saves before its run is sent (in a wave: for every host of
        the wave, before the wave's run): a drain, or kernel settings, marked as asked for (a
        restore after a kill mid-run knows they may be this rollout's)."""
        if step == "drain":
            self._ask_drain(state)
        if step == "kernel" and self.ctx.profile.get("kernel") and not state.get("kernel_asked"):
            state["kernel_asked"] = time.time()
            self.save(state)

    def wave_runs(self, step: str) -> bool:
        """Whether the step has host-side work for this rollout (kernel: only when the profile
        changes kernel settings)."""
        return step != "kernel" or bool(self.ctx.profile.get("kernel"))

    def wave_call(self, step: str, states: Optional[Dict[str, Dict[str, Any]]] = None
                  ) -> Callable[[List[str]], Dict[str, Any]]:
        """The host-side run(s) of a wave step, for any hosts of this host's batch: each host's
        HostResult (kernel: {"snapshot", "apply"}, probe: {"booted", "check", "reapply",
        "probe"}: a HostResult for each run the host was in; a host that fails one is not in
        the next). `states`: the hosts' states as the step began (the probe's wait for each
        OS compares boot ids with them)."""
        side = self.ctx.hostside
        if step == "precheck":
            return side.health
        if step == "drain":
            drain = self.ctx.profile["drain"]
            window = self._pre_window()
            return lambda hosts: side.drain(hosts, drain["timeout"], drain["threshold"], window)
        if step == "kernel":
            kernel = dict(self.ctx.profile.get("kernel") or {})
            return lambda hosts: self._runs_in_turn(hosts, [
                ("snapshot", lambda names: side.kernel(names, "snapshot", kernel)),
                ("apply", lambda names: side.kernel(names, "apply", kernel))])
        if step == "probe":
            return lambda hosts: self._probe_runs(hosts, states or {})
        if step == "undrain":
            return side.undrain
        raise ValueError(f"{step} is not a wave step ({', '.join(WAVE_STEPS)})")

    def _probe_runs(self, hosts: List[str], states: Dict[str, Dict[str, Any]]
                    ) -> Dict[str, Any]:
        """The probe step's runs: the wait for each host's OS (up again, another boot than
        before its reset when it was reset: boot_timeout), the kernel check (when the profile
        changes kernel command-line words or sysctls; a host whose kernel does not have them is
        left out), IRQ affinity re-applied (numa-local), the probe."""
        settings = self._kernel_settings()
        before = {name: str(state.get("boot_id_before") or "") for name, state in
                  states.items() if state.get("needs_reboot")}
        timeouts = self.ctx.timeouts()
        runs: List[Tuple[str, Callable[[List[str]], Dict[str, HostResult]]]] = [
            ("booted", lambda names: self.ctx.hostside.booted(
                names, before, timeouts.boot, self.ctx.profile["redfish"]["poll"]))]
        if settings:
            runs.append(("check", lambda names: self.ctx.hostside.kernel(names, "check",
                                                                         settings)))
        if self._reapplies_irq():
            runs.append(("reapply", lambda names: self.ctx.hostside.kernel(names, "reapply")))
        budget = int(self.ctx.profile["probe"]["budget_ms"])
        runs.append(("probe", lambda names: self.ctx.hostside.probe(names, budget)))
        return self._runs_in_turn(hosts, runs)

    @staticmethod
    def _runs_in_turn(hosts: List[str],
                      runs: List[Tuple[str, Callable[[List[str]], Dict[str, HostResult]]]]
                      ) -> Dict[str, Dict[str, HostResult]]:
        """Each run over the hosts the one before left (a host that fails one, or whose kernel
        check finds the settings not in effect, is not in the next): {host: {part: result}}."""
        parts: Dict[str, Dict[str, HostResult]] = {name: {} for name in hosts}
        left = list(hosts)
        for part, run in runs:
            if not left:
                break
            results = run(left)
            for name in left:
                parts[name][part] = results.get(name) or HostResult(
                    name, error=f"the {part} run gave no result for this host")
            left = [name for name in left if parts[name][part].ok and (
                part != "check" or parts[name][part].result.get("in_effect", False))]
        return parts

    # ------------------------------------------------------------------ steps
    def _ansible(self, results: Dict[str, Any], what: str) -> Dict[str, Any]:
        entry = results.get(self.name) or HostResult(self.name, error="not run")
        if not entry.ok:
            where = f" (task {entry.failed_task})" if entry.failed_task else ""
            raise HostError(f"{what} failed{where}: {entry.error}", self.name)
        return entry.result

    @steps.step("precheck")
    def step_precheck(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The host answers and is not in someone else's maintenance (a wave's health run)."""
        health = self._ansible(self.side(self.wave_call("precheck")), "health check")
        # the flag is ours when this rollout drained the host or asked for it (a kill since)
        drained_by_us = bool(state["steps"].get("drain") or state.get("drain_asked"))
        if health["maintenance"] and not drained_by_us:
            raise HostError("host is already in maintenance (drained by someone else)",
                            self.name)
        state.setdefault("boot_id_before", health["boot_id"])
        return {"boot_id": health["boot_id"], "maintenance": bool(health["maintenance"])}

    @steps.step("snapshot")
    def step_snapshot(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The BIOS as it is, before anything changes (first snapshot kept), read in one BMC
        session with the check that no one else's BIOS change is pending."""
        take = not state.get("bios_snapshot")
        with self._bmc() as (session, bmc):
            check, snap = check_and_snapshot_in(session, bmc, self.targets(), take)
        ours = set((state.get("stage") or {}).get("targets", {}))
        foreign = {k: v for k, v in check["pending"].items() if k not in ours}
        if (foreign or check["active_jobs"]) and not state["steps"].get("stage") and not \
                self.ctx.profile["redfish"]["clear_foreign"]:
            raise RedfishError(f"foreign pending BIOS changes {foreign or ''} jobs "
                               f"{check['active_jobs'] or ''}; refusing (profile "
                               "redfish.clear_foreign cancels them)", self.name)
        out: Dict[str, Any] = {"vendor": check["vendor"], "compliant": check["compliant"],
                               "targets": check["targets"]}
        if snap is None:
            out["bios"] = "first snapshot kept"
        else:
            snap.pop("requests", None)
            state["bios_snapshot"] = snap
            self.save(state)
            out.update(logical=snap["logical"], attributes=snap["attributes"])
        return out

    def _pre_window(self) -> Optional[Tuple[str, float]]:
        """The drain's wait on the host for its sampler of the batch's pre window (read after
        the change: the window measures the host in service up to its last sample): its id,
        and at most a step and the slack (the window's end was waited for before the change;
        a host reached late by its start samples up to a step later). None outside a batch."""
        batch = batch_of(self.ctx.plan, self.name)
        if batch is None:
            return None
        return (window_id(self.ctx.rollout_id, batch, "pre"),
                step_seconds(self.ctx.profile["canary"]) + PRE_WINDOW_SLACK)

    def _ask_drain(self, state: Dict[str, Any]) -> None:
        """Saved before a drain is sent: a re-run or a restore after a kill mid-drain knows the
        maintenance flag may be this rollout's."""
        if not state.get("drain_asked"):
            state["drain_asked"] = time.time()
            self.save(state)

    @steps.step("drain")
    def step_drain(self, state: Dict[str, Any]) -> Dict[str, Any]:
        self.before_run("drain", state)
        results = self.side(self.wave_call("drain"))
        entry = results.get(self.name)
        said = entry.result if entry is not None and isinstance(entry.result, dict) else {}
        # an attempt killed after the host set its flag left it drained unrecorded: this run
        # finds the flag set (not changed) and records the change once; a drain that failed
        # after setting the flag (connections still open) leaves the host drained: recorded
        # too, before the failure is raised
        asked = state.get("drain_asked")
        earlier = bool(asked) and float(asked) < self._began and \
            not state.get("drain_audited")
        if said.get("changed") or earlier:
            self.ctx.audit.record(self.name, "service", "in service", "drained",
                                  self.ctx.execution_id, self.ctx.user)
            state["drain_audited"] = True
            self.save(state)
        return self._ansible(results, "drain")

    @steps.step("kernel")
    def step_kernel(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The kernel as it is (the rollout's first snapshot, kept on the host and here), then
        the profile's kernel settings applied (the host refuses them without that snapshot); a
        reboot is needed when the command line changed."""
        kernel = self.ctx.profile.get("kernel") or {}
        result: Dict[str, Any] = {"changed": [], "reboot_required": False}
        if kernel:
            self.before_run("kernel", state)
            parts = self.side(self.wave_call("kernel"))[self.name]
            taken = self._ansible({self.name: parts.get("snapshot")}, "kernel snapshot")
            if not state.get("kernel_snapshot"):
                state["kernel_snapshot"] = taken.get("snapshot") or {}
                self.save(state)
            result = self._ansible({self.name: parts.get("apply")}, "kernel settings")
            if result.get("snapshot"):
                # the host's snapshot with the record of what the apply wrote (old values: the
                # first snapshot's): what a restore undoes once the host has dropped its own
                state["kernel_snapshot"] = result["snapshot"]
            for change in result.get("changed") or []:
                self.ctx.audit.record(self.name, "kernel", "(snapshot)", change,
                                      self.ctx.execution_id, self.ctx.user)
        state["kernel"] = {k: result.get(k) for k in ("changed", "reboot_required")}
        self.save(state)
        return dict(state["kernel"])

    @steps.step("stage")
    def step_stage(self, state: Dict[str, Any]) -> Dict[str, Any]:
        snap = state["bios_snapshot"]
        extra = dict(self.ctx.profile.get("bios_extra") or {})
        with self._bmc() as (session, ctx):
            current = rf_bios.read_state(session, ctx).current
            targets = rf_bios.plan(ctx, self.targets(), current)
            if extra:
                rf_bios.check_writable(ctx, extra, current)
                targets.update(extra)
                for attr in extra:  # so a restore puts these back too
                    snap["attributes"].setdefault(attr, current.get(attr))
            staged, committed = stage_and_commit(
                session, ctx, targets, self.ctx.profile["redfish"]["clear_foreign"],
                set(snap["attributes"]))
        state["bios_snapshot"] = snap
        state["stage"] = {"targets": targets, "bios": staged.to_dict(),
                          "commit": committed.to_dict(),
                          "settings_time_before": snap.get("settings_time")}
        self.save(state)
        for attr, value in staged.changed.items():
            self.ctx.audit.record(self.name, f"bios.{attr}", snap["attributes"].get(attr),
                                  value, self.ctx.execution_id, self.ctx.user)
        kernel_reboot = bool((state.get("kernel") or {}).get("reboot_required"))
        state["needs_reboot"] = bool(staged.needs_reset or kernel_reboot)
        self.save(state)
        return {"bios_changed": staged.changed, "bios_already": staged.already,
                "commit": committed.method, "needs_reboot": state["needs_reboot"]}

    def _host_boot_id(self, look: Optional[osgate.Look] = None) -> Optional[str]:
        """The OS boot id through the host side (Ansible), None while the host does not answer:
        the restart evidence for BMCs that report none of their own. `look`: the BMC is asked
        first and the host not at all (None) while the BMC shows the OS cannot answer."""
        return osgate.gate_boot_id(look, self._ask_boot_id)

    def _boot_id_via(self, session: Any, bmc: Any) -> Callable[[], Optional[str]]:
        """_host_boot_id gated by looks through this open Redfish session."""
        look = osgate.look_with(session, bmc)
        return lambda: self._host_boot_id(look)

    def _ask_boot_id(self) -> Optional[str]:
        try:
            entry = self.ctx.hostside.health([self.name])[self.name]
        except FleetRolloutError:
            return None
        if not entry.ok or not entry.result.get("boot_id"):
            return None
        return str(entry.result["boot_id"])

    def _reset_once(self, state: Dict[str, Any], key: str,
                    boot_id_before: Optional[str] = None) -> Dict[str, Any]:
        """One reset for this host and purpose, even across retries and resumes."""
        timeouts = self.ctx.timeouts()
        ep = self.endpoint()
        with RedfishSession(ep) as session:
            ctx = discover(session, ep.vendor)

            def remember(before: rf_power.BootMarker) -> None:
                # the very marker the reset is judged against, taken once the system settled
                # (never mid-boot), saved before the POST: a rerun never sends a second one;
                # the reset is in the audit trail once, as asked for, before it is sent
                state[key] = before.to_dict()
                self.save(state)
                self.ctx.audit.record(self.name, "power", "running", "reset",
                                      self.ctx.execution_id, self.ctx.user,
                                      action="restore" if key.startswith("restore") else
                                      "change")

            result = reset_once(session, ctx, timeouts, self.ctx.sleep, state.get(key),
                                remember, self._boot_id_via(session, ctx), boot_id_before)
        if result is None:
            return {"reset": "already done by an earlier attempt"}
        return result.to_dict()

    @steps.step("reboot")
    def step_reboot(self, state: Dict[str, Any]) -> Dict[str, Any]:
        if not state.get("needs_reboot"):
            return {"reset": "not needed (nothing pending)"}
        return self._reset_once(state, "reset_marker", state.get("boot_id_before"))

    def _bmc_look(self) -> Any:
        """A look at the BMC (osgate) that opens its own session at the first use."""
        ep = self.endpoint()
        return osgate.lazy_look(lambda: RedfishSession(ep),
                                lambda session: discover(session, ep.vendor))

    def _wait_os(self, boot_id_before: Optional[str], timeout: float,
                 look: Optional[osgate.Look] = None) -> Dict[str, Any]:
        """Until the host answers the health check (with another boot id than
        `boot_id_before`, when given). Each try is an Ansible run: the BMC is looked at first
        (`look`, else a session of its own) and the host is asked only when the BMC does not
        show it down (in POST, powered off), at least every STALE_ASK seconds in any case;
        tries that find no OS are spaced out (Pacer). Without a reboot (no boot_id_before) the
        host is asked at once."""
        if look is None:
            with self._bmc_look() as own:
                return self._wait_os(boot_id_before, timeout, own)
        poll = max(1.0, self.ctx.profile["redfish"]["poll"])
        start = time.monotonic()
        deadline = start + timeout
        pacer = rf_power.Pacer(poll, deadline=deadline, clock=time.monotonic)
        next_ask = start  # no earlier try to space from
        last_ask = start  # a host down from the start is asked after STALE_ASK
        first = boot_id_before is None  # no reboot: ask the host before looking at the BMC
        was = None
        last = "no answer"
        while True:
            now = time.monotonic()
            bmc = osgate.UNKNOWN if first else look()
            first = False
            if bmc == osgate.UP and was != osgate.UP:
                next_ask = now  # the BMC just saw the OS start: ask at once
            was = bmc
            late = now >= deadline  # one last try at the deadline, whatever the BMC shows
            stale = now - last_ask >= self.STALE_ASK  # in case the BMC's data is stale
            if (bmc != osgate.DOWN and now >= next_ask) or late or stale:
                last_ask = now
                entry = self.ctx.hostside.health([self.name])[self.name]
                if entry.ok and (boot_id_before is None
                                 or entry.result["boot_id"] != boot_id_before):
                    return entry.result
                last = entry.error or f"boot_id still {boot_id_before} (not rebooted yet)"
                if late:
                    raise HostError(f"OS not back within {timeout:.0f}s: {last}", self.name)
                next_ask = time.monotonic() + pacer.next_sleep()
            elif bmc == osgate.DOWN:
                last = "no answer (the BMC shows the system powered off or in POST)"
            left = deadline - time.monotonic()
            if left > 0:
                self.ctx.sleep(max(0.0, min(poll, next_ask - time.monotonic(), left)) or
                               min(poll, left))

    @staticmethod
    def _since_reset(state: Dict[str, Any]) -> float:
        """Seconds since this host's reboot step started (about when the reset was sent)."""
        started = ((state.get("steps") or {}).get("reboot") or {}).get("started")
        return max(0.0, time.time() - float(started)) if started else 0.0

    @steps.step("wait")
    def step_wait(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The BMC shows the reset done: POST finished and the staged BIOS settings applied
        (Redfish). The OS's own start is the probe step's first run, one over the wave."""
        timeouts = self.ctx.timeouts()
        stage = state.get("stage") or {}
        out: Dict[str, Any] = {}
        if state.get("needs_reboot"):
            ep = self.endpoint()
            with RedfishSession(ep) as session:
                ctx = discover(session, ep.vendor)
                job = stage.get("commit", {}).get("job_id")
                since_reset = self._since_reset(state)
                applied = wait_bios_applied(
                    session, ctx, stage.get("targets", {}), stage.get("settings_time_before"),
                    [job] if job else [], timeouts, self.ctx.sleep,
                    host_boot_id=self._boot_id_via(session, ctx),
                    boot_id_before=state.get("boot_id_before"),
                    since_reset=since_reset, expected=timeouts.reboot)
                out["bios"] = applied.to_dict()
                # the reboot as the BMC shows it: the reset to POST seen finished (what the
                # next batches' looks are paced by, timeouts.observed_reboot)
                out["post_after_reset"] = round(since_reset + (applied.post_seconds or 0.0), 1)
        else:
            out["reset"] = "none: nothing to wait for"
        return out

    def _reapplies_irq(self) -> bool:
        """The probe step re-applies the kernel's IRQ affinity before its probe."""
        return (self.ctx.profile.get("kernel") or {}).get("irq_affinity") == "numa-local"

    @steps.step("verify")
    def step_verify(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The BIOS read back through Redfish has every value the profile wants."""
        check = check_desired(self.endpoint(), self.targets())
        if not check["compliant"]:
            raise RedfishError(f"BIOS read-back does not match the profile: wants "
                               f"{check['targets']}", self.name)
        return {"bios": check["targets"]}

    @steps.step("probe")
    def step_probe(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The host's OS is up again (after a reset: another boot than before it), the kernel
        it booted has the profile's settings, IRQ affinity is re-applied when the profile says
        so, and the topology probe shows the profile's BIOS settings."""
        from fleet_rollout.probe import VerifyPolicy, fingerprint_record, parse_output, verify

        parts = self.side(self.wave_call("probe", {self.name: state}))[self.name]
        health = self._ansible({self.name: parts.get("booted")}, "the wait for the OS")
        kernel = self._check_kernel_booted(parts.get("check"))
        if "reapply" in parts or self._reapplies_irq():
            self._ansible({self.name: parts.get("reapply")}, "kernel reapply")
        doc = self._ansible({self.name: parts.get("probe")}, "probe")
        parsed = parse_output(json.dumps(doc), self.name)
        logical = dict(state["bios_snapshot"]["logical"])
        logical.update(self.targets())
        sockets = int(parsed["topology"]["sockets"])
        # on a virtual machine timing quality depends on the hypervisor's load, not on the
        # BIOS: like the latency ratio it is a note there; the topology checks still decide
        virtual = bool(parsed["topology"].get("virtualized"))
        # the fingerprint's references: hosts of earlier batches of this rollout, changed to the
        # same settings and verified (verify() leaves out other CPU models and node counts)
        batch = batch_of(self.ctx.plan, self.name)
        batch = len(self.ctx.plan["batches"]) if batch is None else batch
        controls = [r for r in self.ctx.state.fingerprints() if r.get("batch", batch) < batch]
        result = verify(parsed, logical.get("snoop_mode") or "home",
                        logical.get("node_interleaving") or "disabled", sockets,
                        controls=controls, policy=VerifyPolicy(require_quality=not virtual),
                        host=self.name)
        state["probe"] = {"nodes": parsed["topology"].get("nodes"), "ok": result.ok}
        if not result.ok:
            raise HostError("probe verification failed: " + "; ".join(result.reasons),
                            self.name)
        self.ctx.state.add_fingerprint(fingerprint_record(parsed, self.name, batch=batch))
        out: Dict[str, Any] = {"boot_id": health.get("boot_id"), "probe": result.to_dict()}
        if kernel is not None:
            out["kernel"] = kernel
        return out

    def _kernel_settings(self) -> Optional[Dict[str, Any]]:
        """The profile's kernel settings the booted kernel must have (None: none)."""
        kernel = self.ctx.profile.get("kernel") or {}
        settings = {k: kernel[k] for k in ("cmdline", "sysctl") if kernel.get(k)}
        return settings or None

    def _check_kernel_booted(self, entry: Optional[HostResult]) -> Optional[Dict[str, Any]]:
        """The kernel the host booted has the profile's command-line words and sysctl values
        (a boot configuration written but not booted, or changed behind the pack's back,
        fails the host: it is then restored): `entry`, the kernel check's result. Returns what
        was checked (None: the profile has no kernel settings)."""
        settings = self._kernel_settings()
        if not settings:
            return None
        checked = self._ansible({self.name: entry},
                                "kernel check")
        if not checked.get("in_effect", False):
            raise HostError("kernel settings not in effect after the reboot: " +
                            "; ".join(checked.get("missing") or ["the check said nothing"]),
                            self.name)
        cmdline = settings.get("cmdline") or {}
        return {"in_effect": True,
                "cmdline": sorted(cmdline.get("add") or []) +
                sorted("-" + w for w in cmdline.get("remove") or []),
                "sysctl": sorted(settings.get("sysctl") or {})}

    @steps.step("undrain")
    def step_undrain(self, state: Dict[str, Any]) -> Dict[str, Any]:
        result = self._ansible(self.side(self.wave_call("undrain")), "undrain")
        if result.get("changed"):
            self.ctx.audit.record(self.name, "service", "drained", "in service",
                                  self.ctx.execution_id, self.ctx.user)
        return result

    # ------------------------------------------------------------------ restore
    def restore(self, leave_drained: Optional[bool] = None,
                wait: Optional[Callable[[], Dict[str, Any]]] = None,
                unfinished_only: bool = False) -> Dict[str, Any]:
        """Put BIOS and kernel back to the snapshots, reboot if needed, and (by policy) undrain.

        Runs even when the rollout is halted: it is the way back, not a change. Never at once
        with a step of the host (fleet_rollout.host_step step=restore: one at a time per host);
        a re-run after a kill resumes, and sends no second reset (restore_reset_marker).
        `wait`: called once the host is marked restoring, before anything is put back (the wave
        steps naming the host: wavesteps.wait_for_waves). `unfinished_only`: a host whose change
        is done, or never began, is left as it is."""
        self._began = time.time()
        state = self.load()
        if state["status"] in RESTORE_DONE_STATES:
            return {"host": self.name, "status": state["status"], "skipped": True}
        if unfinished_only and (state["status"] == DONE or (
                state["status"] == PENDING and not state["steps"])):
            return {"host": self.name, "status": state["status"], "skipped": True,
                    "note": "not in its change: left as it is"}
        owner = claims.owner(self.ctx.store, self.name)
        if owner and owner != self.ctx.rollout_id:
            # another rollout holds the host: this one changed nothing there (claims are taken
            # at the snapshot step, before any change), so there is nothing of ours to put back
            # its status stays what it was (e.g. failed at the precheck): not "restored"
            state["restore"] = {"host": self.name, "note": f"held by rollout {owner}; this "
                                "rollout changed nothing on it"}
            self.save(state)
            return {"host": self.name, "status": state["status"], "skipped": True,
                    "held_by": owner}
        later = claims.last_claimant(self.ctx.store, self.name)
        if later and later != self.ctx.rollout_id and state["status"] not in IN_PROGRESS_STATES:
            # a later rollout has changed the host since this one let it go: putting this
            # rollout's snapshot back would undo that rollout's work
            state["restore"] = {"host": self.name, "changed_later_by": later,
                                "note": f"changed later by rollout {later}; left as it is"}
            self.save(state)
            return {"host": self.name, "status": state["status"], "skipped": True,
                    "changed_later_by": later}
        policy = self.ctx.profile["failure_budget"]["on_host_failure"]
        leave = policy == "leave_drained" if leave_drained is None else leave_drained
        started = time.time()
        state["status"] = RESTORING
        self.save(state)
        try:
            waited = wait() if wait is not None else None
            # what the steps waited for recorded (a drain, kernel settings asked for), the host
            # marked restoring still: what the restore puts back
            state = self.load()
            state["status"] = RESTORING
            report = self._put_back(state, leave)
            if waited and waited.get("executions"):
                report["waited_for"] = waited
        except Exception as err:  # every outcome is recorded
            message = _outcome_message(err)
            state["status"] = RESTORE_FAILED
            state["restore_error"] = message
            self._record(state, RESTORE_STEP, False, {"error": message}, started)
            raise HostError(f"restore failed, host left drained and marked: {message}",
                            self.name) from None
        state["restore"] = report
        self._record(state, RESTORE_STEP, True, report, started, reached=False)
        claims.release(self.ctx.store, self.name, self.ctx.rollout_id)
        report["status"] = state["status"]
        return report

    def _put_back(self, state: Dict[str, Any], leave: bool) -> Dict[str, Any]:
        timeouts_ = self.ctx.timeouts()
        report: Dict[str, Any] = {"host": self.name}
        put_kernel = bool((state.get("kernel") or {}).get("changed") or state.get(
            "kernel_snapshot") or state.get("kernel_asked"))
        before = self.ctx.hostside.health([self.name])[self.name]
        if state.get("needs_reboot") and (state["steps"].get("reboot") or {}).get("ok") and \
                not (state["steps"].get("probe") or {}).get("ok") and \
                (not before.ok or before.result.get("boot_id") == state.get("boot_id_before")):
            # the change's reset: the host's OS may still be starting (the wait step saw POST
            # end; the probe step's wait for the OS had not seen it up), or still be the boot
            # before that reset: never the restore's baseline. Waited for as the probe step
            # would; an OS that does not come back leaves the restore to go on with what it
            # read
            try:
                before = HostResult(self.name, ok=True, result=self._wait_os(
                    state.get("boot_id_before"), timeouts_.boot))
            except HostError:
                pass
        boot_before = state.get("restore_boot_id_before")
        if boot_before is None and before.ok:
            boot_before = before.result["boot_id"]
            state["restore_boot_id_before"] = boot_before  # a re-run compares with the first
            self.save(state)
        kernel: Dict[str, Any] = {"changed": [], "reboot_required": False}
        if put_kernel:
            kernel = self._ansible(
                self.ctx.hostside.kernel([self.name], "restore",
                                         snapshot=state.get("kernel_snapshot") or {}),
                "kernel restore")
            for note in kernel.get("left_alone") or []:
                self.ctx.audit.record(self.name, "kernel", "(changed since)", note,
                                      self.ctx.execution_id, self.ctx.user, action="restore")
            for change in kernel.get("changed") or []:
                self.ctx.audit.record(self.name, "kernel", "(rollout)", change,
                                      self.ctx.execution_id, self.ctx.user, action="restore")
        report["kernel"] = kernel
        snap = state.get("bios_snapshot")
        bios_pending = False
        if snap:
            bios = restore_bios(self.endpoint(), snap, timeouts_, do_reset=False,
                                sleep=self.ctx.sleep)
            staged = bios["stage"]
            bios_pending = bool(staged.get("needs_reset"))
            if bios_pending and "restore_bios" not in state:
                state["restore_bios"] = {"targets": bios["targets"],
                                         "settings_time_before": bios["settings_time_before"],
                                         "job_id": (bios.get("commit") or {}).get("job_id")}
                self.save(state)
            report["bios"] = {"changed": staged["changed"]}
            for attr, value in staged["changed"].items():
                self.ctx.audit.record(self.name, f"bios.{attr}", "(rollout)", value,
                                      self.ctx.execution_id, self.ctx.user, action="restore")
        if bios_pending and state.get("restore_reset_marker") and before.ok and boot_before \
                and before.result["boot_id"] != boot_before:
            # the restore's reset ran and the host came back, yet the BIOS values are still
            # pending (the BMC did not apply them): that reset is spent, and one new reset with
            # a marker of its own applies them (a marker never leads to a second reset)
            spent = state.setdefault("restore_resets_spent", [])
            if len(spent) >= MAX_RESTORE_RESETS - 1:
                raise RedfishError(f"BIOS values still pending after {len(spent) + 1} resets "
                                   "of the restore: the BMC does not apply them; fix the BMC "
                                   "(or apply the values by hand), then restore again",
                                   self.name)
            spent.append(state.pop("restore_reset_marker"))
            boot_before = before.result["boot_id"]
            state["restore_boot_id_before"] = boot_before
            self.save(state)
        rebooted = bool(state.get("restore_reset_marker"))
        if bios_pending or kernel.get("reboot_required") or rebooted:
            report["reset"] = self._reset_once(state, "restore_reset_marker", boot_before)
            rebooted = True
            pending = state.get("restore_bios")
            if pending:
                ep = self.endpoint()
                with RedfishSession(ep) as session:
                    ctx = discover(session, ep.vendor)
                    job = pending.get("job_id")
                    report["applied"] = wait_bios_applied(
                        session, ctx, pending["targets"], pending["settings_time_before"],
                        [job] if job else [], timeouts_, self.ctx.sleep,
                        host_boot_id=self._boot_id_via(session, ctx),
                        boot_id_before=boot_before).to_dict()
        if rebooted or not before.ok:
            health = self._wait_os(boot_before if rebooted else None, timeouts_.boot)
            report["boot_id"] = health["boot_id"]
        if snap:
            now = take_snapshot(self.endpoint())
            wrong = {k: v for k, v in snap["attributes"].items()
                     if now["attributes"].get(k, v) != v}
            if wrong:
                raise RedfishError(f"BIOS not back to its snapshot: {wrong}", self.name)
        if not state["steps"].get("drain") and not state.get("drain_asked"):
            state["status"] = RESTORED  # never drained by us: nothing to undrain
        elif leave:
            state["status"] = LEFT_DRAINED
        else:
            self._ansible(self.ctx.hostside.undrain([self.name]), "undrain")
            self.ctx.audit.record(self.name, "service", "drained", "in service",
                                  self.ctx.execution_id, self.ctx.user, action="restore")
            state["status"] = RESTORED
        return report


# resets one host's restore may send in all, each for BIOS values a reset before it did not
# apply; past them the BMC is broken and a person decides
MAX_RESTORE_RESETS = 3


def merge_host_state(base: Optional[Dict[str, Any]], mine: Dict[str, Any],
                     stored: Dict[str, Any]) -> Dict[str, Any]:
    """`stored` with what `mine` changed since `base` (the state as its writer loaded it; None:
    all of `mine`): keys and step records set or removed. A host another action marked as on
    its way back (a restore begun) keeps that status: no step's write takes it back."""
    if base is None:
        merged = dict(mine)
    else:
        merged = copy.deepcopy(stored) if stored else {}
        for name, value in mine.items():  # a key the store lacks: a default load() set
            if name != "steps" and (base.get(name, _ABSENT) != value or name not in merged):
                merged[name] = value
        for name in set(base) - set(mine):
            merged.pop(name, None)
        steps = dict(merged.get("steps") or {})
        mine_steps, base_steps = mine.get("steps") or {}, base.get("steps") or {}
        for name, record in mine_steps.items():
            if base_steps.get(name, _ABSENT) != record:
                steps[name] = record
        for name in set(base_steps) - set(mine_steps):
            steps.pop(name, None)
        merged["steps"] = steps
    if (stored or {}).get("status") in RESTORE_STATES and \
            merged.get("status") not in RESTORE_STATES:
        merged["status"] = stored["status"]
    return merged


def _outcome_message(err: Exception) -> str:
    """What a failed step or restore records: our own errors as they are, anything else as an
    internal error with its type (never a traceback in the datastore)."""
    if isinstance(err, FleetRolloutError):
        return str(err)
    return f"internal error: {type(err).__name__}: {err}"


def batch_summary(ctx: RolloutContext, hosts: List[str]) -> Dict[str, Any]:
    states = {h: ctx.state.host(h) for h in hosts}
    counts: Dict[str, int] = {}
    for st in states.values():
        status = st.get("status", PENDING)
        counts[status] = counts.get(status, 0) + 1
    failed = sorted(h for h, st in states.items() if st.get("status") != DONE)
    return {"hosts": len(hosts), "by_status": counts, "not_done": failed}
