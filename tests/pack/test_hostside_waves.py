"""Wave steps (fleet_rollout.wavesteps) with the real host side: one ansible-playbook run over a
wave's sim hosts drains (or undrains) them all, each host's outcome recorded on its own; a host
that fails there fails alone and its restore puts back only it. Runs on the newest and the
oldest ansible-core the requirements allow (make test)."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import yaml
from hostside_support import LabHostSide

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout import claims
from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import ConfigError
from fleet_rollout.hoststeps import HostRun, RolloutContext
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.states import DONE, FAILED, RESTORED, RUNNING
from fleet_rollout.store import MemoryStore, RolloutState
from fleet_rollout.wavesteps import WaveRun

HOSTS = ["sim-001", "sim-002", "sim-003"]
KERNEL = {"sysctl": {"net.core.rmem_max": 16777216}}
ROLLOUT = "wave-1"
FLAG = "etc/fleet/maintenance"
# one ESTABLISHED connection on the service port :8080 (0x1F90): a drain with threshold 0 and a
# 1 s timeout fails on that host
BUSY = ("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
        "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")


class CountingHostSide(LabHostSide):
    """The real host side, counting its ansible-playbook runs and the hosts of each; `seen`
    (a callable) is called as each run starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runs: List[Tuple[str, List[str]]] = []
        self.seen: Any = None

    def _run(self, playbook: str, hosts: Any, extravars: Any = None,
             forks: Any = None) -> Dict[str, Any]:
        names = list(hosts)
        self.runs.append((playbook, names))
        if self.seen is not None:
            self.seen(playbook, names)
        return super()._run(playbook, names, extravars, forks)


@pytest.fixture()
def wave(tmp_path: Any) -> Iterator[Tuple[SimBackend, CountingHostSide, RolloutContext]]:
    backend = SimBackend(str(tmp_path / "hosts"))
    for name in HOSTS:  # booted with the profile's settings: the probe step sees them
        backend.power_on(boot_config(name, "home", "disabled"))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {"fleet_sysroot": backend.sysroot(name)} for name in HOSTS}}}))
    side = CountingHostSide(str(inventory), forks=5, cache_dir=str(tmp_path / "cache"),
                            rollout_id=ROLLOUT)
    hosts = [FleetHost(name=name, bmc_address="https://127.0.0.1:9", bmc_vendor="generic",
                       hardware_model="m1", rack=f"r{i}") for i, name in enumerate(HOSTS)]
    profile = load_profile("lab-home-snoop")
    profile.data["kernel"] = dict(KERNEL)
    profile.data["drain"]["timeout"] = 1
    plan = build_plan(profile, str(inventory), "all", hosts, hosts,
                      {h.name: {"compliant": False} for h in hosts}, rollout_id=ROLLOUT)
    assert plan["batches"][0]["hosts"] == HOSTS  # one wave of one batch
    store = MemoryStore()
    RolloutState(store, ROLLOUT).save_plan(plan)
    config = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                               "state_dir": str(tmp_path / "state"),
                               "bmc_networks": ["127.0.0.0/8"]})
    ctx = RolloutContext(store, ROLLOUT, config, side, "ex-wave", "alice")
    ctx.state.update_batch(0, lambda b: b.update(approval={"approved": True, "by": "alice"}))
    yield backend, side, ctx


def _prepared(ctx: RolloutContext) -> None:
    """Precheck and snapshot done, the host claimed, as each host's snapshot step leaves it."""
    for name in HOSTS:
        run = HostRun(ctx, name)
        state = run.load()
        state["status"] = RUNNING
        _done(state, "precheck", "snapshot")
        run.save(state)
        claims.claim(ctx.store, name, ROLLOUT)


def _done(state: Dict[str, Any], *steps: str) -> None:
    for step in steps:
        state["steps"][step] = {"ok": True, "at": 1.0, "started": 1.0, "seconds": 0.0,
                                "detail": {}, "execution": "ex-other"}


def _flag(backend: SimBackend, name: str) -> bool:
    return os.path.exists(os.path.join(backend.sysroot(name), FLAG))


def test_a_waves_precheck_is_one_health_run_that_claims_nothing(wave: Any) -> None:
    """The precheck (outside the host policy) reads and writes no claim: a host in someone
    else's maintenance fails alone, a host another rollout holds is refused before the run."""
    backend, side, ctx = wave
    flag = os.path.join(backend.sysroot("sim-002"), FLAG)
    os.makedirs(os.path.dirname(flag), exist_ok=True)
    with open(flag, "w") as handle:
        handle.write("drained by the network team\n")
    claims.claim(ctx.store, "sim-003", "other-1")
    out = WaveRun(ctx, HOSTS).run("precheck")
    assert side.runs == [("health", ["sim-001", "sim-002"])]
    assert out["done"] == ["sim-001"] and sorted(out["failed"]) == ["sim-002", "sim-003"]
    assert "already in maintenance" in out["hosts"]["sim-002"]["error"]
    assert "held by rollout other-1" in out["hosts"]["sim-003"]["error"]
    assert ctx.state.host("sim-001")["boot_id_before"]
    assert ctx.state.host("sim-002")["status"] == FAILED
    assert claims.owner(ctx.store, "sim-001") is None
    assert claims.owner(ctx.store, "sim-003") == "other-1"
    # a wave step after the snapshot step needs the claim it takes: none here, nothing run
    state = ctx.state.host("sim-001")
    _done(state, "snapshot")
    ctx.state.save_host("sim-001", state)
    drain = WaveRun(ctx, ["sim-001"]).run("drain")
    assert drain["failed"] == ["sim-001"] and "not claimed" in drain["hosts"]["sim-001"]["error"]
    assert len(side.runs) == 1 and not _flag(backend, "sim-001")


def test_a_waves_drain_is_one_run_and_a_host_that_fails_fails_alone(wave: Any) -> None:
    backend, side, ctx = wave
    _prepared(ctx)
    with open(os.path.join(backend.sysroot("sim-002"), "proc/net/tcp"), "a") as handle:
        handle.write(BUSY)
    asked: Dict[str, Any] = {}
    side.seen = lambda _playbook, names: asked.update(
        {name: ctx.state.host(name).get("drain_asked") for name in names})
    out = WaveRun(ctx, HOSTS).run("drain")
    assert side.runs == [("drain", HOSTS)]  # one ansible-playbook run over the wave
    # every host's drain was saved as asked for before the run was sent (a kill mid-run
    # leaves the flag known as this rollout's)
    assert set(asked) == set(HOSTS) and all(asked.values()), asked
    assert out["done"] == ["sim-001", "sim-003"] and out["failed"] == ["sim-002"]
    assert "still 1 established connections" in out["hosts"]["sim-002"]["error"]
    for name in HOSTS:
        state = ctx.state.host(name)
        ok = name != "sim-002"
        assert state["steps"]["drain"]["ok"] is ok and state["drain_asked"]
        assert state["steps"]["drain"]["execution"] == "ex-wave"
        assert state["status"] == (RUNNING if ok else FAILED)
        assert _flag(backend, name)  # a failed drain leaves the flag: the host stays marked
    # every flag the run set is in the audit trail, the failed host's too (it stays marked)
    drains = [e["host"] for e in ctx.audit.entries() if e["setting"] == "service"]
    assert sorted(drains) == ["sim-001", "sim-002", "sim-003"]

    # the workflow restores the failed host only: its flag comes off, the others stay drained
    report = HostRun(ctx, "sim-002").restore(leave_drained=False)
    assert report["status"] == RESTORED and not _flag(backend, "sim-002")
    assert _flag(backend, "sim-001") and _flag(backend, "sim-003")

    # run again (the workflow's retry): done hosts skipped, the restored one not ready, no run
    again = WaveRun(ctx, HOSTS).run("drain")
    assert again["skipped"] == ["sim-001", "sim-003"] and again["not_ready"] == ["sim-002"]
    # the restore's health read and undrain (no kernel settings asked for: no kernel run); no
    # wave run
    assert [playbook for playbook, _ in side.runs[1:]] == ["health", "undrain"]

    # the kernel step: the snapshot, then the settings, one run each over the hosts ready
    before = {name: _read(backend, name, "proc/sys/net/core/rmem_max") for name in HOSTS}
    kernel = WaveRun(ctx, HOSTS).run("kernel")
    assert side.runs[-2:] == [("kernel", ["sim-001", "sim-003"])] * 2
    assert kernel["done"] == ["sim-001", "sim-003"] and kernel["not_ready"] == ["sim-002"]
    for name in ("sim-001", "sim-003"):
        assert _read(backend, name, "proc/sys/net/core/rmem_max") == "16777216"
        state = ctx.state.host(name)
        assert state["kernel"]["changed"] and state["kernel_asked"]
        assert state["kernel_snapshot"]["sysctl"] == {"net.core.rmem_max": before[name]}

    # the change (stage, reboot, wait, verify) is each host's own: recorded as done here; a
    # value the reboot did not keep on sim-003
    for name in ("sim-001", "sim-003"):
        run = HostRun(ctx, name)
        state = run.load()
        _done(state, "stage", "reboot", "wait", "verify")
        # what the probe step checks the topology against: the BIOS as it was, the profile's
        # targets over it (a BIOS snapshot of the simulator's)
        state["bios_snapshot"] = {"logical": {"snoop_mode": "early",
                                              "node_interleaving": "disabled"}}
        # reset: the probe step first waits for another boot than this one
        state["needs_reboot"], state["boot_id_before"] = True, "the-boot-before-the-reset"
        run.save(state)
    with open(os.path.join(backend.sysroot("sim-003"), "proc/sys/net/core/rmem_max"),
              "w") as handle:
        handle.write("212992\n")
    before = len(side.runs)
    probe = WaveRun(ctx, HOSTS).run("probe")
    # the wait for the OS and the kernel check over both, the probe over the one whose kernel
    # has the settings
    assert side.runs[before:] == [("booted", ["sim-001", "sim-003"]),
                                  ("kernel", ["sim-001", "sim-003"]), ("probe", ["sim-001"])]
    assert probe["done"] == ["sim-001"] and probe["failed"] == ["sim-003"]
    assert ctx.state.host("sim-001")["steps"]["probe"]["detail"]["boot_id"] == \
        _read(backend, "sim-001", "proc/sys/kernel/random/boot_id")
    assert "kernel settings not in effect" in probe["hosts"]["sim-003"]["error"]
    assert probe["hosts"]["sim-001"]["detail"]["probe"]["ok"] is True
    assert ctx.state.host("sim-003")["status"] == FAILED

    # the undrain: one run over the hosts ready for it, the failed and restored hosts left out
    undrained = WaveRun(ctx, HOSTS).run("undrain")
    assert side.runs[-1] == ("undrain", ["sim-001"])
    assert undrained["done"] == ["sim-001"]
    assert undrained["not_ready"] == ["sim-002", "sim-003"]
    assert ctx.state.host("sim-001")["status"] == DONE and not _flag(backend, "sim-001")
    assert _flag(backend, "sim-003")  # failed: drained until its restore
    assert ctx.state.host("sim-002")["status"] == RESTORED


def test_a_restore_that_begins_during_a_waves_run_loses_none_of_its_records(wave: Any) -> None:
    """A restore of a host begins while the wave's drain runs over it (the restore waits for
    the wave step, outside the host policy both): the host stays marked restoring when the wave
    records its drain, the drain's record stays when the restore records its own, and the
    restore takes off the flag the wave's drain set."""
    backend, side, ctx = wave
    _prepared(ctx)
    ended = threading.Event()
    restores: List[Dict[str, Any]] = []

    def wait_for_wave() -> Dict[str, Any]:  # as wait_for_waves, until the wave step ended
        ended.wait(120)
        return {"executions": ["ex-wave"], "seconds": 1.0}

    def restore_now(playbook: str, _names: List[str]) -> None:
        if playbook == "drain" and not restores:
            restores.append({})
            thread = threading.Thread(target=lambda: restores.append(
                HostRun(ctx, "sim-002").restore(leave_drained=False, wait=wait_for_wave)))
            thread.start()
            restores[0]["thread"] = thread
            deadline = time.time() + 30
            while ctx.state.host("sim-002")["status"] != "restoring" and time.time() < deadline:
                time.sleep(0.05)

    side.seen = restore_now
    out = WaveRun(ctx, HOSTS).run("drain")
    assert out["done"] == HOSTS, out
    # the wave recorded the drain; the mark the restore set is kept
    state = ctx.state.host("sim-002")
    assert state["status"] == "restoring" and state["steps"]["drain"]["ok"], state
    assert _flag(backend, "sim-002")
    ended.set()
    restores[0]["thread"].join(120)
    report = restores[-1]
    assert report["status"] == RESTORED, report
    state = ctx.state.host("sim-002")
    assert state["status"] == RESTORED and state["steps"]["drain"]["ok"]
    assert state["steps"]["restore"]["ok"] and state["drain_asked"]
    assert report["waited_for"]["executions"] == ["ex-wave"]
    assert not _flag(backend, "sim-002")  # the drain was this rollout's: taken off
    assert ctx.state.host("sim-001")["status"] == RUNNING and _flag(backend, "sim-001")


def _read(backend: SimBackend, name: str, rel: str) -> str:
    with open(os.path.join(backend.sysroot(name), rel)) as handle:
        return handle.read().strip()


def test_a_wave_step_takes_only_wave_steps_and_known_hosts(wave: Any) -> None:
    backend, side, ctx = wave
    with pytest.raises(ConfigError, match="stage is not a wave step"):
        WaveRun(ctx, HOSTS).run("stage")
    with pytest.raises(Exception, match="not part of rollout wave-1"):
        WaveRun(ctx, HOSTS + ["sim-999"])
    assert side.runs == [] and not any(_flag(backend, name) for name in HOSTS)


def test_a_halted_rollouts_wave_touches_no_host(wave: Any) -> None:
    backend, side, ctx = wave
    _prepared(ctx)
    ctx.state.halt("canary regression in batch 1")
    out = WaveRun(ctx, HOSTS).run("drain")
    assert out["failed"] == HOSTS and all("halted" in out["hosts"][h]["error"] for h in HOSTS)
    assert side.runs == [] and not any(_flag(backend, name) for name in HOSTS)
