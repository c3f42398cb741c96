"""Attacks and faults on the host steps: approval, halt, restore states, claims, the host lock,
errors that used to leave a host "running", and a restore killed in the middle of its reboot.

Real parts: a sim lab (BMC simulators over HTTPS, sim hosts reached by real Ansible), the pack
library in this process, a file datastore; no StackStorm engine (the steps are what is tested).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict

import pytest
from rollout_support import SimLab

from fleet_rollout import claims, service
from fleet_rollout.hoststeps import Halted, HostRun, NotApproved
from fleet_rollout.redfish import power as rf_power
from fleet_rollout.store import FileStore, RolloutState

PROFILE = "lab-home-snoop"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    lab = SimLab(str(tmp_path_factory.mktemp("advsteps")), hosts=4)
    yield lab
    lab.down()


@pytest.fixture()
def cfg(sim, tmp_path):
    """The lab's pack config with this test's own state_dir (audit, locks, claims)."""
    return dict(sim.config, state_dir=str(tmp_path / "state"))


def _plan(cfg: Dict[str, Any], store: FileStore, rollout_id: str,
          targets: str = "all") -> Dict[str, Any]:
    return service.plan_rollout(cfg, store, PROFILE, targets, rollout_id, "alice")


def _approve(store: FileStore, cfg: Dict[str, Any], rollout_id: str, batch: int = 0) -> None:
    ctx = service.context(cfg, store, rollout_id)
    ctx.state.update_batch(batch, lambda s: s.update(approval={"approved": True, "by": "alice"}))


def _run(cfg: Dict[str, Any], store: FileStore, rollout_id: str, host: str,
         step: str) -> Dict[str, Any]:
    return service.host_step(cfg, store, rollout_id, host, step, "ex-test", "alice")


def _canary(store: FileStore, rollout_id: str) -> str:
    return RolloutState(store, rollout_id).plan()["batches"][0]["hosts"][0]


def test_no_step_without_a_recorded_approval(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-noapproval")
    host = _canary(store, "adv-noapproval")
    resets = len(sim.bmc(host)["resets"])
    with pytest.raises(NotApproved, match="no recorded approval"):
        _run(cfg, store, "adv-noapproval", host, "precheck")
    ctx = service.context(cfg, store, "adv-noapproval")
    ctx.state.update_batch(0, lambda s: s.update(approval={"approved": False, "by": "bob"}))
    for step in ("precheck", "snapshot", "drain", "stage", "reboot", "undrain"):
        with pytest.raises(NotApproved):
            _run(cfg, store, "adv-noapproval", host, step)
    assert ctx.state.host(host).get("status") in (None, "pending")
    assert len(sim.bmc(host)["resets"]) == resets
    assert not os.path.exists(sim.sysroot(host) + "/etc/fleet/maintenance")  # not drained


def test_control_hosts_are_never_stepped(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    plan = _plan(cfg, store, "adv-control", targets="lab-001:lab-002")
    _approve(store, cfg, "adv-control")
    batched = {h for b in RolloutState(store, "adv-control").plan()["batches"] for h in b["hosts"]}
    assert plan["control"] and not set(plan["control"]) & batched
    for control in plan["control"]:
        with pytest.raises(NotApproved, match="in no batch"):
            _run(cfg, store, "adv-control", control, "precheck")


def test_halt_stops_every_step_including_wait_verify_undrain(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-halt")
    _approve(store, cfg, "adv-halt")
    host = _canary(store, "adv-halt")
    service.abort(cfg, store, "adv-halt", "operator", -1, "alice")
    for step in ("precheck", "snapshot", "wait", "verify", "undrain"):
        with pytest.raises(Halted):
            _run(cfg, store, "adv-halt", host, step)
    assert RolloutState(store, "adv-halt").halted()["reason"] == "halted by alice"


def test_no_step_on_a_host_being_restored(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-restoring")
    _approve(store, cfg, "adv-restoring")
    host = _canary(store, "adv-restoring")
    state = RolloutState(store, "adv-restoring")
    state.save_host(host, {"host": host, "status": "restoring", "steps": {}})
    for step in ("wait", "verify", "undrain"):
        with pytest.raises(Exception, match="restoring"):
            _run(cfg, store, "adv-restoring", host, step)
    assert state.host(host)["status"] == "restoring"


def test_one_rollout_per_host(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-first")
    _plan(cfg, store, "adv-second")
    _approve(store, cfg, "adv-first")
    _approve(store, cfg, "adv-second")
    host = _canary(store, "adv-first")
    assert host == _canary(store, "adv-second")
    _run(cfg, store, "adv-first", host, "precheck")
    with pytest.raises(claims.HostClaimed, match="adv-first"):
        _run(cfg, store, "adv-second", host, "precheck")
    # the second rollout's rollback leaves the host alone: it changed nothing there
    out = service.host_restore(cfg, store, "adv-second", host, "ex", "alice")
    assert out["skipped"]
    assert RolloutState(store, "adv-first").host(host)["steps"]["precheck"]["ok"]
    assert claims.owner(store, host) == "adv-first"
    service.host_restore(cfg, store, "adv-first", host, "ex", "alice")
    assert claims.owner(store, host) is None


def test_an_unexpected_error_is_recorded_never_left_running(sim, cfg, tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-crash")
    _approve(store, cfg, "adv-crash")
    host = _canary(store, "adv-crash")
    ctx = service.context(cfg, store, "adv-crash")

    def broken(_hosts):
        raise TypeError("'list' object has no attribute 'get'")

    ctx.hostside.health = broken  # a fault inside a step: a programming error, not input
    with pytest.raises(Exception, match="internal error: TypeError"):
        HostRun(ctx, host).run("precheck")
    state = ctx.state.host(host)
    assert state["status"] == "failed"
    assert "TypeError" in state["error"]["message"]


RESTORE_SCRIPT = """
import json, sys
from fleet_rollout import service
from fleet_rollout.store import FileStore
config = json.load(open(sys.argv[1]))
service.host_restore(config, FileStore(sys.argv[2]), sys.argv[3], sys.argv[4], "ex-killed",
                     "alice")
"""


def test_restore_killed_mid_reboot_resumes_without_a_second_reset(tmp_path):
    """The BMC takes 15 s to reboot: the re-run comes while the killed attempt's reset is still
    rebooting the server, with the restored settings still pending (the old code staged them
    again and sent a second reset)."""
    sim = SimLab(str(tmp_path / "slow"), hosts=3, reboot_seconds=15)
    try:
        _restore_killed_mid_reboot(sim, dict(sim.config, state_dir=str(tmp_path / "state")),
                                   tmp_path)
    finally:
        sim.down()


def _restore_killed_mid_reboot(sim: SimLab, cfg: Dict[str, Any], tmp_path: Any) -> None:
    store_dir = str(tmp_path / "kv")
    store = FileStore(store_dir)
    rollout_id = "adv-restorekill"
    _plan(cfg, store, rollout_id)
    _approve(store, cfg, rollout_id)
    host = _canary(store, rollout_id)
    for step in ("precheck", "snapshot", "drain", "stage", "reboot", "wait"):
        _run(cfg, store, rollout_id, host, step)
    resets_before = len(sim.bmc(host)["resets"])
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, "-c", RESTORE_SCRIPT, str(config_path), store_dir,
                             rollout_id, host], start_new_session=True)
    state = RolloutState(store, rollout_id)
    deadline = time.time() + 120
    while len(sim.bmc(host)["resets"]) == resets_before and time.time() < deadline:
        assert proc.poll() is None, "restore ended before its reset"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # killed mid-reboot: its reset was accepted
    marker = state.host(host)["restore_reset_marker"]  # saved before the reset was sent
    assert rf_power.settled(rf_power.BootMarker(**marker)), marker  # never a mid-boot baseline
    proc.wait(10)
    assert state.host(host)["status"] == "restoring"
    out = service.host_restore(cfg, store, rollout_id, host, "ex-rerun", "alice")
    assert out["status"] == "restored"
    resets = sim.bmc(host)["resets"][resets_before:]
    assert len(resets) == 1, resets  # the killed attempt's reset, none from the re-run
    snap = state.host(host)["bios_snapshot"]["attributes"]
    now = sim.bmc(host)
    assert all(now["current"].get(k, v) == v for k, v in snap.items()), now["current"]
    assert not now["pending"]
    assert not os.path.exists(os.path.join(sim.sysroot(host), "run", "fleet-maintenance"))


def test_record_answer_run_directly_cannot_forge_an_approval(sim):
    """`st2 run fleet_rollout.record_answer ... outcome=answered` outside the batch's workflow:
    refused, nothing recorded, the rollout not halted (through the runtime and its API)."""
    plan = sim.run("fleet_rollout.plan", profile=PROFILE, targets="all")
    assert plan["status"] == "succeeded", plan
    rollout_id = plan["result"]["result"]["rollout_id"]
    for outcome in ("answered", "auto", "timed_out"):
        forged = sim.run("fleet_rollout.record_answer", rollout_id=rollout_id, batch=0,
                         question="approval", outcome=outcome)
        assert forged["status"] == "failed", forged
        assert "runs only as a task" in json.dumps(forged["result"])
    assert "approval" not in (sim.kv(rollout_id, "batch.0") or {})
    assert sim.kv(rollout_id, "halt") is None


def test_chat_cannot_set_runner_or_fixed_parameters(sim):
    """Trailing `key=value` pairs in chat: runner parameters (env, timeout, ...) and the
    aliases' fixed parameters are refused before anything runs (as st2 refuses overriding an
    immutable parameter)."""
    plan = sim.run("fleet_rollout.plan", profile=PROFILE, targets="all")
    rollout_id = plan["result"]["result"]["rollout_id"]
    before = len(json.loads(sim.cli("execution", "list", "--json").stdout or "[]"))
    for command in (f'rollout status {rollout_id} env={{"HTTPS_PROXY":"http://127.0.0.1:9"}}',
                    f"rollout status {rollout_id} timeout=1",
                    f"rollout status {rollout_id} content_version=evil",
                    f"rollout abort {rollout_id} cause=canary_regression",
                    f"rollout rollback {rollout_id} batch=0"):
        out = sim.cli("chat", command)
        assert out.returncode != 0, command
        assert "immutable" in (out.stdout + out.stderr).lower(), (command, out.stdout,
                                                                   out.stderr)
    after = len(json.loads(sim.cli("execution", "list", "--json").stdout or "[]"))
    assert after == before
    assert sim.kv(rollout_id, "halt") is None


def test_an_injected_canary_regression_trigger_halts_nothing(sim, cfg, tmp_path):
    """`fleet_rollout.canary_regression` can be injected by anyone who may post triggers: its
    rollback halts the rollout only when a FAIL verdict is recorded for that batch."""
    from fleet_rollout.errors import ConfigError

    store = FileStore(str(tmp_path / "kv"))
    _plan(cfg, store, "adv-trigger")
    with pytest.raises(ConfigError, match="no FAIL verdict"):
        service.abort(cfg, store, "adv-trigger", "canary_regression", 0, "rule")
    state = RolloutState(store, "adv-trigger")
    assert state.halted() is None
    state.update_batch(0, lambda b: b.update(verdict={"verdict": "FAIL", "explanation": "x"}))
    out = service.abort(cfg, store, "adv-trigger", "canary_regression", 0, "rule")
    assert out["reason"] == "canary regression in batch 1: x" and state.halted()


@pytest.mark.parametrize("fault, step", [("value_ignored", "wait"),
                                         ("invalid_accepted", "stage")])
def test_a_bios_value_not_applied_fails_the_host_and_the_restore_brings_it_back(
        sim, cfg, tmp_path, fault, step):
    """Ironic/Metal3-style BIOS reports through the rollout's own steps: a value the BIOS
    ignored (found by the verify after the reboot) or refused inside a 200 answer (found by
    stage, before any reboot). The host is recorded failed with the setting named, nothing is
    reported applied, and the restore step brings back the snapshot's values, nothing pending,
    the host undrained."""
    store = FileStore(str(tmp_path / "kv"))
    rollout_id = f"adv-{fault.replace('_', '')}"
    _plan(cfg, store, rollout_id)
    _approve(store, cfg, rollout_id)
    host = _canary(store, rollout_id)
    sim.fault(host, **{fault: True})
    try:
        steps = ("precheck", "snapshot", "drain", "stage", "reboot", "wait")
        for done in steps[:steps.index(step)]:
            _run(cfg, store, rollout_id, host, done)
        with pytest.raises(Exception) as err:
            _run(cfg, store, rollout_id, host, step)
        state = RolloutState(store, rollout_id)
        record = state.host(host)
        assert record["status"] == "failed" and record["error"]["step"] == step
        assert record["error"]["message"] == str(err.value) and host in str(err.value)
        snap = record["bios_snapshot"]["attributes"]
        changed = [k for k in snap if k in str(err.value)]
        assert changed, str(err.value)  # the setting is named
        assert "not in effect" in str(err.value) or "does not show them pending" in str(err.value)
        out = service.host_restore(cfg, store, rollout_id, host, "ex-restore", "alice")
        assert out["status"] == "restored"
        now = sim.bmc(host)
        assert all(now["current"].get(k) == v for k, v in snap.items()), now["current"]
        assert not now["pending"]
        assert not os.path.exists(os.path.join(sim.sysroot(host), "run", "fleet-maintenance"))
    finally:
        sim.fault(host, **{fault: False})
