"""HostRun, the host steps of one host, fast: in this process, without Ansible or a lab.

Real parts: one simulated BMC over HTTPS on 127.0.0.1 (in a thread), the Redfish client and
the pack library's host steps, a memory datastore. The host side is a fake (`FakeHostSide`,
said here as the rules ask): a stand-in for Ansible over SSH that answers what the playbooks
answer; its boot id is the simulated BMC's (None while the server reboots), so a reboot is
seen as on a real host. The same steps against real Ansible and sim hosts are in
tests/pack/adversarial/test_adv_hoststeps.py and the e2e rollouts.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List, Optional

import pytest
from probe_helpers import load_fixture
from redfish_support import (
    PASSWORD,
    bmc_fleet,
    bmc_uris,
    clear_overrides,
    real_document,
    reset_counters,
    serve_override,
    server_requests,
    set_faults,
    state,
)

from fleet_rollout import hoststeps
from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import HostError, RedfishError
from fleet_rollout.hostside.ansible_run import HostResult
from fleet_rollout.hoststeps import HostRun, RolloutContext
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.states import (
    DONE,
    FAILED,
    HOST_STEPS,
    LEFT_DRAINED,
    PREPARE_STEPS,
    RESTORED,
)
from fleet_rollout.store import MemoryStore, RolloutState

ROLLOUT = "hostrun-1"
SYSCTL = "net.core.rmem_max"


class FakeHostSide:
    """What the playbooks report for one host, kept in memory; `fail` names steps to fail."""

    def __init__(self, fleet: Any, name: str) -> None:
        self.fleet, self.name = fleet, name
        self.drained = False
        self.sysctl = {SYSCTL: "212992"}
        self.snapshot: Optional[Dict[str, str]] = None
        self.calls: List[str] = []
        self.drain_waits: List[Any] = []  # each drain's after_window (the pre window waited for)
        self.fail: Dict[str, str] = {}
        self.probe_doc: Optional[str] = None  # a probe fixture to answer instead of the BIOS's
        self.unanswered = 0  # health asks left that find the host unreachable (its sshd late)

    def _entry(self, what: str, result: Any) -> Dict[str, HostResult]:
        self.calls.append(what)
        if what in self.fail:
            return {self.name: HostResult(self.name, ok=False, failed_task=what,
                                          error=self.fail[what])}
        return {self.name: HostResult(self.name, ok=True, changed=True, result=result)}

    def _boot_id(self) -> Optional[str]:
        return state(self.fleet, 0).get("host_boot_id")

    def _kernel(self, action: str, settings: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        wanted = {k: str(v) for k, v in ((settings or {}).get("sysctl") or {}).items()}
        if action == "snapshot":
            if self.snapshot is None:
                self.snapshot = {k: self.sysctl.get(k, "") for k in wanted}
            return {"ok": True, "snapshot": dict(self.snapshot), "changed": []}
        if action == "apply":
            changed = [f"{k}={v}" for k, v in wanted.items() if self.sysctl.get(k) != v]
            self.sysctl.update(wanted)
            return {"ok": True, "changed": changed, "reboot_required": False,
                    "snapshot": dict(self.snapshot or {})}
        if action == "restore":
            back = dict(self.snapshot or {})
            changed = [f"{k}={v}" for k, v in back.items() if self.sysctl.get(k) != v]
            self.sysctl.update(back)
            return {"ok": True, "changed": changed, "reboot_required": False}
        if action == "check":
            missing = [f"sysctl {k}: {self.sysctl.get(k)}, not {v}" for k, v in wanted.items()
                       if self.sysctl.get(k) != v]
            return {"ok": True, "changed": [], "in_effect": not missing, "missing": missing}
        return {"ok": True, "changed": []}  # reapply

    # --------------------------------------------------------------- HostSide's interface
    def health(self, hosts: List[str]) -> Dict[str, HostResult]:
        """As fleet_host.py's health: reads only."""
        boot_id = self._boot_id()
        if boot_id is None or self.unanswered > 0:
            if boot_id is not None:
                self.unanswered -= 1
            self.calls.append("health")
            return {self.name: HostResult(self.name, ok=False, unreachable=True,
                                          error="UNREACHABLE: ssh: connection refused")}
        result: Dict[str, Any] = {"boot_id": boot_id, "maintenance": self.drained,
                                  "uptime": 100.0, "connections": 0}
        return self._entry("health", result)

    def booted(self, hosts: List[str], boot_ids_before: Dict[str, str], wait: float = 900,
               poll: float = 2) -> Dict[str, HostResult]:
        """As booted.yml: the health read, tried again (`wait` seconds) until the host answers
        with another boot than the one named for it."""
        deadline = time.monotonic() + wait
        before = boot_ids_before.get(self.name)
        while True:
            entry = self.health(hosts)[self.name]
            self.calls[-1] = "booted"
            if entry.ok and entry.result["boot_id"] != before:
                return {self.name: entry}
            if time.monotonic() >= deadline:
                return {self.name: HostResult(self.name, ok=False, failed_task="booted",
                                              error=entry.error or f"boot id still {before}")}
            time.sleep(0.05)

    def drain(self, hosts: List[str], timeout: float = 300, threshold: int = 0,
              after_window: Optional[Any] = None) -> Dict[str, HostResult]:
        self.drain_waits.append(after_window)
        changed = not self.drained
        self.drained = True  # the flag is set first; a drain that times out leaves it
        if "drain" in self.fail:  # as fleet_host.py's drain past its timeout: flag set
            self.calls.append("drain")
            return {self.name: HostResult(self.name, ok=False, failed_task="Drain",
                                          error=self.fail["drain"],
                                          result={"ok": False, "drained": True,
                                                  "changed": changed})}
        return self._entry("drain", {"changed": changed, "drained": True, "method": "flag"})

    def undrain(self, hosts: List[str]) -> Dict[str, HostResult]:
        changed = self.drained
        if "undrain" not in self.fail:
            self.drained = False
        return self._entry("undrain", {"changed": changed, "drained": False, "method": "flag"})

    def kernel(self, hosts: List[str], action: str,
               settings: Optional[Dict[str, Any]] = None,
               snapshot: Optional[Dict[str, Any]] = None) -> Dict[str, HostResult]:
        return self._entry(f"kernel {action}", self._kernel(action, settings))

    def _probe_doc(self) -> Dict[str, Any]:
        logical = state(self.fleet, 0)["logical"]
        name = self.probe_doc or (f"sim-{logical['snoop_mode']}-interleave-"
                                  f"{'on' if logical['node_interleaving'] == 'enabled' else 'off'}")
        doc = load_fixture(name + ".json")
        doc["host"] = self.name
        return doc

    def probe(self, hosts: List[str], budget_ms: int = 5000,
              binary: Optional[str] = None) -> Dict[str, HostResult]:
        return self._entry("probe", self._probe_doc())


@pytest.fixture()
def fleet() -> Iterator[Any]:
    """A simulated server of its own per test (BIOS early snoop, interleaving disabled)."""
    with bmc_fleet(["generic"], count=1, reboot_seconds=0.3) as bmcs:
        # the simulator boots its server when it starts (off the event loop): a loaded machine
        # answered the first health read of a test with "booting" (the fake host side's
        # unreachable)
        deadline = time.monotonic() + 30
        while state(bmcs, 0).get("host_boot_id") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        yield bmcs


@pytest.fixture()
def run(fleet: Any, tmp_path: Any) -> Iterator[Any]:
    """A fresh rollout of lab-home-snoop on the one simulated server, batch 0 approved."""
    name = fleet.bmcs[0].name
    host = FleetHost(name=name, bmc_address=fleet.url(0), bmc_vendor="generic",
                     hardware_model="m1")
    plan = build_plan(load_profile("lab-home-snoop"), "inventory.yml", "all", [host], [host],
                      {name: {"compliant": False}}, rollout_id=ROLLOUT)
    plan["profile"]["redfish"]["poll"] = 0.1  # the simulator reboots in 0.3 s
    store = MemoryStore()
    RolloutState(store, ROLLOUT).save_plan(plan)
    config = load_pack_config({"credentials": {"default": {"username": "admin",
                                                           "password": PASSWORD}},
                               "ca_bundle": fleet.ca_path, "state_dir": str(tmp_path / "state"),
                               "bmc_networks": ["127.0.0.0/8"]})
    side = FakeHostSide(fleet, name)
    # waits poll every 0.05 s at most (the simulator reboots in 0.3 s; deadlines are unchanged)
    ctx = RolloutContext(store, ROLLOUT, config, side, "ex-1", "alice",  # type: ignore[arg-type]
                         sleep=lambda seconds: time.sleep(min(seconds, 0.05)))
    ctx.state.update_batch(0, lambda b: b.update(approval={"approved": True, "by": "alice"}))
    yield HostRun(ctx, name), side


def _steps(host_run: HostRun, names: Any = HOST_STEPS) -> List[Dict[str, Any]]:
    return [host_run.run(step) for step in names]


def _upto(step: str) -> Any:
    """The steps from the first up to `step`, included."""
    return HOST_STEPS[:HOST_STEPS.index(step) + 1]


def _at(results: List[Dict[str, Any]], step: str) -> Dict[str, Any]:
    return results[HOST_STEPS.index(step)]


def test_every_step_in_order_changes_the_bios_once_and_puts_the_host_back_in_service(
        run: Any, fleet: Any) -> None:
    host_run, side = run
    boots = state(fleet, 0)["boot_count"]
    results = _steps(host_run)
    assert [r["step"] for r in results] == list(HOST_STEPS)
    assert not any(r["skipped"] for r in results)
    bmc = state(fleet, 0)
    assert bmc["logical"] == {"snoop_mode": "home", "node_interleaving": "disabled"}
    assert bmc["boot_count"] == boots + 1 and len(bmc["resets"]) >= 1
    assert side.sysctl[SYSCTL] == "16777216" and not side.drained
    # each playbook does one thing: the wait only asks for the OS, the verify checks the
    # kernel and probes (one run each)
    assert side.calls.index("drain") < side.calls.index("kernel apply") < side.calls.index(
        "kernel check") < side.calls.index("probe") < side.calls.index("undrain")
    assert side.calls.count("kernel check") == side.calls.count("probe") == 1
    assert _at(results, "probe")["detail"]["probe"]["ok"] is True
    assert _at(results, "verify")["detail"]["bios"] == {"SnoopMode": "HomeSnoop",
                                                        "NodeInterleaving": "Disabled"}
    saved = host_run.load()
    assert saved["status"] == DONE and saved["step"] == HOST_STEPS[-1]
    assert all(saved["steps"][s]["ok"] for s in HOST_STEPS)
    assert saved["bios_snapshot"]["logical"]["snoop_mode"] == "early"
    assert _at(results, "stage")["detail"]["bios_changed"] == {"SnoopMode": "HomeSnoop"}


def test_a_step_run_again_is_skipped_and_sends_no_second_reset(run: Any, fleet: Any) -> None:
    host_run, _side = run
    _steps(host_run, _upto("reboot"))
    resets = len(state(fleet, 0)["resets"])
    again = host_run.run("reboot")
    assert again["skipped"] is True
    assert len(state(fleet, 0)["resets"]) == resets
    # the reset is in the audit trail once, as the change's
    power = [(e["old"], e["new"], e["action"]) for e in host_run.ctx.audit.entries()
             if e["setting"] == "power"]
    assert power == [("running", "reset", "change")]


def test_every_reset_of_a_restore_is_in_the_audit_trail_once(run: Any, fleet: Any) -> None:
    """The change's reset and each reset of its restores: one audit entry each, as many as the
    BMC received, the restore's marked as the restore's."""
    host_run, _side = run
    _steps(host_run, _upto("wait"))
    set_faults(fleet, 0, pending_never_applied=True)
    with pytest.raises(HostError, match="restore failed"):
        host_run.restore()
    set_faults(fleet, 0, pending_never_applied=False)
    deadline = time.monotonic() + 30
    while state(fleet, 0)["host_boot_id"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_run.restore()["status"] == RESTORED
    power = [e["action"] for e in host_run.ctx.audit.entries() if e["setting"] == "power"]
    assert power == ["change", "restore", "restore"]
    assert len(state(fleet, 0)["resets"]) == 3


def test_a_failed_drain_is_recorded_and_changes_no_bios(run: Any, fleet: Any) -> None:
    host_run, side = run
    side.fail["drain"] = "connections did not fall below 0 in 300s"
    _steps(host_run, ("precheck", "snapshot"))
    with pytest.raises(HostError, match="drain failed .*connections did not fall"):
        host_run.run("drain")
    saved = host_run.load()
    assert saved["status"] == FAILED
    assert saved["error"]["step"] == "drain" and saved["steps"]["drain"]["ok"] is False
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early"
    assert state(fleet, 0)["pending"] == {}


def test_the_probe_step_refuses_a_probe_that_shows_other_settings(run: Any,
                                                                  fleet: Any) -> None:
    host_run, side = run
    side.probe_doc = "sim-home-interleave-on"  # one NUMA node: interleaving still on
    _steps(host_run, _upto("verify"))
    with pytest.raises(HostError, match="probe verification failed"):
        host_run.run("probe")
    saved = host_run.load()
    assert saved["status"] == FAILED and saved["probe"]["ok"] is False
    assert side.drained  # a failed host stays drained until it is restored


def test_the_probe_step_fails_a_host_whose_kernel_did_not_boot_with_the_settings(
        run: Any, fleet: Any) -> None:
    """A value the reboot did not keep (a boot configuration changed behind the pack's back):
    the probe step fails the host, and its restore puts back the rest."""
    host_run, side = run
    _steps(host_run, _upto("reboot"))
    side.sysctl[SYSCTL] = "212992"  # what the host comes up with
    _steps(host_run, ("wait", "verify"))
    with pytest.raises(HostError, match="kernel settings not in effect after the reboot: "
                                        "sysctl net.core.rmem_max: 212992, not 16777216"):
        host_run.run("probe")
    assert host_run.load()["status"] == FAILED and "kernel check" in side.calls
    assert "probe" not in side.calls  # the kernel is checked first: no probe of a wrong boot
    assert host_run.restore()["status"] == RESTORED
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early" and not side.drained


def test_a_probe_step_run_again_checks_the_kernel_again(run: Any, fleet: Any) -> None:
    """A probe step run again (after a failure elsewhere) checks what the host has now."""
    host_run, side = run
    _steps(host_run, _upto("probe"))
    saved = host_run.load()
    saved["steps"].pop("probe")
    saved["status"] = "running"
    host_run.save(saved)
    side.sysctl[SYSCTL] = "212992"  # changed since the first check
    with pytest.raises(HostError, match="sysctl net.core.rmem_max: 212992, not 16777216"):
        host_run.run("probe")
    assert side.calls.count("kernel check") == 2


def test_the_probe_step_says_what_kernel_settings_it_found_in_effect(run: Any,
                                                                     fleet: Any) -> None:
    host_run, side = run
    _steps(host_run, _upto("probe"))
    detail = host_run.load()["steps"]["probe"]["detail"]
    assert detail["kernel"] == {"in_effect": True, "cmdline": [], "sysctl": [SYSCTL]}


def test_the_wait_only_waits_and_the_verify_and_probe_steps_check(run: Any,
                                                                  fleet: Any) -> None:
    """The wait waits for the BMC to show the reset done and the settings applied, and asks
    the host nothing (the BMC reports its restart); the verify reads the BIOS back through
    Redfish; the probe step waits for the new boot to answer (an ask it did not answer is
    asked again), checks the kernel, re-applies IRQ affinity when the profile says so, then
    probes, each its own run."""
    host_run, side = run
    host_run.ctx.profile["kernel"]["irq_affinity"] = "numa-local"
    _steps(host_run, _upto("reboot"))  # up to the reset
    side.unanswered = 2  # the BMC shows the OS up before its sshd answers
    boot_before = host_run.load()["boot_id_before"]
    before = len(side.calls)
    wait = host_run.run("wait")
    assert side.calls[before:] == []  # Redfish only
    assert set(wait["detail"]) == {"bios", "post_after_reset"}
    assert wait["detail"]["bios"]["ok"] is True
    reset_counters(fleet, 0)
    before = len(side.calls)
    verify = host_run.run("verify")
    assert side.calls[before:] == []  # Redfish only
    assert server_requests(state(fleet, 0)).get("GET", 0) > 0  # the BIOS read back
    assert verify["detail"]["bios"]["SnoopMode"] == "HomeSnoop"
    reset_counters(fleet, 0)
    probe = host_run.run("probe")
    asks = side.calls[before:]
    assert asks[-3:] == ["kernel check", "kernel reapply", "probe"]
    assert set(asks[:-3]) == {"booted"} and len(asks[:-3]) >= 3 and side.unanswered == 0
    assert server_requests(state(fleet, 0)) == {}  # the host side only
    assert probe["detail"]["probe"]["ok"] is True
    assert probe["detail"]["boot_id"] not in (None, boot_before)
    assert host_run.load()["steps"]["probe"]["ok"] is True


def test_verify_refuses_a_bios_it_reads_back_without_the_targets(run: Any, fleet: Any) -> None:
    host_run, side = run
    _steps(host_run, _upto("wait"))
    bios = bmc_uris(fleet, 0)["bios"]
    doc = real_document(fleet, 0, bios)
    doc["Attributes"]["SnoopMode"] = "EarlySnoop"  # as if the change had not held
    serve_override(fleet, 0, bios, doc)
    try:
        with pytest.raises(RedfishError, match="BIOS read-back does not match the profile"):
            host_run.run("verify")
    finally:
        clear_overrides(fleet, 0)
    saved = host_run.load()
    assert saved["status"] == FAILED and saved["error"]["step"] == "verify"
    assert side.drained  # a failed host stays drained until it is restored


@pytest.mark.parametrize("leave, status", [(False, RESTORED), (True, LEFT_DRAINED)])
def test_restore_puts_bios_and_kernel_back(run: Any, fleet: Any, leave: bool,
                                           status: str) -> None:
    host_run, side = run
    _steps(host_run, _upto("wait"))
    assert state(fleet, 0)["logical"]["snoop_mode"] == "home"
    report = host_run.restore(leave_drained=leave)
    assert report["status"] == status
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early"
    assert side.sysctl[SYSCTL] == "212992"
    assert side.drained is leave
    assert host_run.load()["status"] == status
    assert host_run.restore(leave_drained=leave)["skipped"] is True  # done: not again


def test_a_restore_whose_reset_did_not_apply_the_bios_resets_once_more(run: Any,
                                                                       fleet: Any) -> None:
    """The restore's reset came back with the BIOS values still pending (the BMC did not
    apply them): the restore fails and marks the host. The next restore sends one new reset
    (that marker is spent; the new one has its own) and ends restored; none after that."""
    host_run, side = run
    _steps(host_run, _upto("wait"))
    resets = len(state(fleet, 0)["resets"])
    set_faults(fleet, 0, pending_never_applied=True)
    with pytest.raises(HostError, match="restore failed"):
        host_run.restore()
    assert len(state(fleet, 0)["resets"]) == resets + 1
    assert state(fleet, 0)["logical"]["snoop_mode"] == "home"  # still pending
    set_faults(fleet, 0, pending_never_applied=False)  # the BMC is fixed
    deadline = time.monotonic() + 30  # the next restore comes once the host is back up
    while state(fleet, 0)["host_boot_id"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    report = host_run.restore()
    assert report["status"] == RESTORED, report
    assert len(state(fleet, 0)["resets"]) == resets + 2
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early" and not side.drained
    assert host_run.restore()["skipped"] is True
    assert len(state(fleet, 0)["resets"]) == resets + 2


def test_a_bmc_that_never_applies_the_restore_gets_three_resets_then_a_person(
        run: Any, fleet: Any) -> None:
    host_run, _side = run
    _steps(host_run, _upto("wait"))
    resets = len(state(fleet, 0)["resets"])
    set_faults(fleet, 0, pending_never_applied=True)
    errors = []
    for _ in range(4):
        deadline = time.monotonic() + 30
        while state(fleet, 0)["host_boot_id"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(HostError) as err:
            host_run.restore()
        errors.append(str(err.value))
    assert len(state(fleet, 0)["resets"]) == resets + hoststeps.MAX_RESTORE_RESETS
    assert "BIOS values still pending after 3 resets of the restore" in errors[-1]
    assert host_run.load()["status"] == "restore_failed"


def test_a_restore_leaves_a_host_a_later_rollout_changed(run: Any, fleet: Any) -> None:
    """A finished rollout rolled back later (force) never undoes a later rollout's change: a
    host another rollout claimed since is left as it is, and the result says by whom."""
    from fleet_rollout import claims

    host_run, side = run
    _steps(host_run)
    store = host_run.ctx.store
    claims.claim(store, host_run.name, "later-rollout-2")
    claims.release(store, host_run.name, "later-rollout-2")
    resets = len(state(fleet, 0)["resets"])
    report = host_run.restore()
    assert report["skipped"] is True and report["changed_later_by"] == "later-rollout-2"
    assert state(fleet, 0)["logical"]["snoop_mode"] == "home"  # not put back
    assert len(state(fleet, 0)["resets"]) == resets
    assert side.sysctl[SYSCTL] == "16777216" and not side.drained
    assert host_run.load()["status"] == DONE


# ------------------------------------------------------------------------ before the drain
def _prepare(host_run: Any) -> List[Dict[str, Any]]:
    """The precheck (a wave step) and the host's prepare (the snapshot step)."""
    return [host_run.run(step) for step in ("precheck",) + PREPARE_STEPS]


def test_the_precheck_reads_and_the_snapshot_checks_and_takes_the_bios_in_one_session(
        run: Any, fleet: Any) -> None:
    host_run, side = run
    reset_counters(fleet)
    precheck, snapshot = _prepare(host_run)
    assert not precheck["skipped"] and not snapshot["skipped"]
    # the precheck is the health read alone; the snapshot step is Redfish alone
    assert side.calls == ["health"]
    assert precheck["detail"]["maintenance"] is False
    assert not side.drained and side.snapshot is None
    bmc = state(fleet, 0)
    assert bmc["counters"].get("session_POST") == 1  # one login: check and snapshot
    assert bmc["pending"] == {} and bmc["logical"]["snoop_mode"] == "early"
    saved = host_run.load()
    assert all(saved["steps"][s]["ok"] for s in ("precheck", "snapshot"))
    assert saved["step"] == "snapshot" and saved["boot_id_before"]
    assert saved["bios_snapshot"]["logical"]["snoop_mode"] == "early"
    assert snapshot["detail"]["logical"]["snoop_mode"] == "early"
    assert snapshot["detail"]["targets"] == {"SnoopMode": "HomeSnoop",
                                             "NodeInterleaving": "Disabled"}
    assert "kernel_snapshot" not in saved and "drain_asked" not in saved
    # the drain first waits on the host for its sampler of the batch's pre window (read after
    # the change): at most a step (the profile's window / window_steps) and the slack
    drain = host_run.run("drain")
    assert drain["detail"]["changed"] is True and host_run.load()["drain_asked"]
    canary = host_run.ctx.profile["canary"]
    batch = next(b["index"] for b in host_run.ctx.plan["batches"] if host_run.name in b["hosts"])
    assert side.drain_waits == [(f"{host_run.ctx.rollout_id}.b{batch}.pre",
                                 canary["window_seconds"] / canary["window_steps"]
                                 + hoststeps.PRE_WINDOW_SLACK)]
    # the kernel step: the snapshot (its own run), then the settings
    host_run.run("kernel")
    assert side.calls[-2:] == ["kernel snapshot", "kernel apply"]
    saved = host_run.load()
    assert saved["kernel_snapshot"] == {SYSCTL: "212992"} and saved["kernel_asked"]
    for step in HOST_STEPS[HOST_STEPS.index("stage"):]:
        host_run.run(step)
    assert host_run.load()["status"] == DONE and not side.drained
    assert state(fleet, 0)["logical"]["snoop_mode"] == "home"
    # run again (a with-items retry): every step skipped, nothing sent
    calls = len(side.calls)
    assert all(r["skipped"] for r in _prepare(host_run)) and len(side.calls) == calls


def test_a_kernel_step_killed_after_its_runs_is_restored_from_the_hosts_snapshot(
        run: Any, fleet: Any) -> None:
    """Killed after the settings were applied, before anything was recorded: the restore
    knows they may be this rollout's (asked for before the runs) and puts them back."""
    host_run, side = run
    _steps(host_run, _upto("drain"))
    saved = host_run.load()
    host_run.before_run("kernel", saved)
    side.kernel([host_run.name], "snapshot", host_run.ctx.profile["kernel"])
    side.kernel([host_run.name], "apply", host_run.ctx.profile["kernel"])
    assert side.sysctl[SYSCTL] == "16777216"
    assert "kernel_snapshot" not in host_run.load()
    assert host_run.restore(leave_drained=False)["status"] == RESTORED
    assert side.sysctl[SYSCTL] == "212992" and not side.drained


def test_kernel_settings_that_fail_are_recorded_and_the_host_restored(
        run: Any, fleet: Any) -> None:
    host_run, side = run
    side.fail["kernel apply"] = "sysctl: permission denied"
    _steps(host_run, _upto("drain"))
    with pytest.raises(HostError, match="kernel settings failed"):
        host_run.run("kernel")
    saved = host_run.load()
    assert saved["status"] == FAILED and saved["error"]["step"] == "kernel"
    assert all(saved["steps"][s]["ok"] for s in _upto("drain"))
    assert host_run.restore(leave_drained=False)["status"] == RESTORED
    assert not side.drained and state(fleet, 0)["pending"] == {}
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early"


def test_a_drain_is_audited_once_across_a_rerun(run: Any, fleet: Any) -> None:
    host_run, side = run
    _steps(host_run, _upto("drain"))
    saved = host_run.load()
    del saved["steps"]["drain"]  # as if killed after the audit record, before the step's
    host_run.save(saved)
    host_run.run("drain")
    drains = [e for e in host_run.ctx.audit.entries() if e["setting"] == "service"]
    assert len(drains) == 1 and drains[0]["new"] == "drained"


def test_a_drain_that_fails_is_the_drain_steps_failure(run: Any, fleet: Any) -> None:
    host_run, side = run
    side.fail["drain"] = "still 3 established connections on port 8080 after 300s"
    _prepare(host_run)
    with pytest.raises(HostError, match="drain failed .*still 3 established"):
        host_run.run("drain")
    saved = host_run.load()
    assert saved["status"] == FAILED and saved["error"]["step"] == "drain"
    assert saved["steps"]["precheck"]["ok"] and saved["steps"]["snapshot"]["ok"]
    assert saved["steps"]["drain"]["ok"] is False
    assert side.calls == ["health", "drain"]  # one drain, not retried
    assert state(fleet, 0)["pending"] == {}  # no BIOS change staged
    report = host_run.restore(leave_drained=False)
    assert report["status"] == RESTORED and not side.drained  # the flag it set is taken off
    # the trail has the drain the failed step left and the restore's undrain, in order
    service = [(e["old"], e["new"]) for e in host_run.ctx.audit.entries()
               if e["setting"] == "service"]
    assert service == [("in service", "drained"), ("drained", "in service")]


def test_the_precheck_refuses_a_host_someone_else_drained_and_leaves_it_drained(
        run: Any, fleet: Any) -> None:
    host_run, side = run
    side.drained = True  # in maintenance before the rollout
    with pytest.raises(HostError, match="already in maintenance"):
        host_run.run("precheck")
    saved = host_run.load()
    assert "drain_asked" not in saved and saved["error"]["step"] == "precheck"
    assert "bios_snapshot" not in saved  # the precheck failed: no snapshot step
    assert host_run.restore(leave_drained=False)["status"] == RESTORED
    assert side.drained and "undrain" not in side.calls  # not ours to undrain


def test_a_drain_killed_after_its_run_is_resumed_and_restored_as_ours(run: Any,
                                                                       fleet: Any) -> None:
    host_run, side = run
    _prepare(host_run)
    saved = host_run.load()
    saved["drain_asked"] = time.time()  # asked, then killed before anything was recorded
    host_run.save(saved)
    side.drained = True
    out = host_run.run("drain")  # the flag is ours: the drain step runs again
    assert [c for c in side.calls if c in ("health", "drain")] == ["health", "drain"]
    assert out["detail"]["changed"] is False
    # the drain the killed attempt made is in the audit trail, once
    drains = [e for e in host_run.ctx.audit.entries() if e["setting"] == "service"]
    assert [(e["old"], e["new"]) for e in drains] == [("in service", "drained")]
    assert host_run.restore(leave_drained=False)["status"] == RESTORED and not side.drained
