"""The pack's guarantees with two action runners that share no file (the runtime's `runners`
setting: two runner processes, each with its own state_dir; they share the database, the
datastore and the concurrency policies, as st2actionrunners on two machines share MongoDB and
the coordination backend): two rollouts racing for the same hosts, a step and a restore of one
host started together, a runner SIGKILLed in the middle of a step, and one audit trail in time
order."""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

import pytest
from rollout_support import SimLab, error_text

pytestmark = pytest.mark.e2e

DONE = ("succeeded", "failed", "canceled", "timeout", "abandoned")


def _lab(tmp_path: Any, hosts: int, **options: Any) -> SimLab:
    lab = SimLab(str(tmp_path), hosts, **options)
    lab.env["FLEET_ROLLOUT_RUNNERS"] = "2"
    return lab


def _plan(lab: SimLab, profile: str, rollout_id: str, targets: str) -> List[str]:
    """Plan `rollout_id` and record its first batch as approved (the batch workflow's
    record_answer would): its hosts."""
    doc = lab.ask_run("fleet_rollout.plan", profile=profile, targets=targets,
                      rollout_id=rollout_id)
    assert doc["status"] == "succeeded", error_text(doc)
    approval = {"approved": True, "by": "alice", "at": time.time(), "via": "test"}
    out = lab.cli("key", "set", f"fleet_rollout.{rollout_id}.batch.0.state.approval",
                  json.dumps(approval))
    assert out.returncode == 0, out.stderr[-2000:]
    return list(lab.plan(rollout_id)["batches"][0]["hosts"])


def _start(lab: SimLab, action: str, **params: Any) -> str:
    args = [f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in params.items()]
    out = lab.cli("run", action, *args, "-a", "--json")
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]
    return str(json.loads(out.stdout)["id"])


def _get(lab: SimLab, execution_id: str) -> Dict[str, Any]:
    return json.loads(lab.cli("execution", "get", execution_id, "--json").stdout)


def _runner(doc: Dict[str, Any]) -> str:
    info = doc.get("runner_info") or (doc.get("liveaction") or {}).get("runner_info") or {}
    return str(info.get("hostname") or "")


def _span(doc: Dict[str, Any]) -> Tuple[float, float]:
    from fleet_rollout.watchdog import timestamp

    start = timestamp(doc.get("start_timestamp"))
    end = timestamp(doc.get("end_timestamp"))
    assert start is not None and end is not None, doc
    return start, end


def _apart(docs: List[Dict[str, Any]]) -> None:
    """No two of these executions ran at the same time."""
    spans = sorted(_span(d) for d in docs)
    for (_s1, e1), (s2, _e2) in zip(spans, spans[1:]):
        assert s2 >= e1 - 0.05, spans


def _fast_profile(lab: SimLab, size: int, **more: Any) -> str:
    """home-snoop with one batch of `size` hosts changed at once, no approval; `more`: other
    profile sections to override."""
    return lab.profile("home-snoop", approval={"required": False},
                       batches={"canary_size": size, "max_batch": size, "growth": 1,
                                "parallel": size, "control_ratio": 2,
                                "max_unavailable_per_rack": size,
                                "max_unavailable_per_site": size}, **more)


def test_two_rollouts_racing_for_the_same_hosts_one_holds_each(tmp_path):
    lab = _lab(tmp_path, 6)
    try:
        profile = _fast_profile(lab, 3)
        first = _plan(lab, profile, "race-a", "all")
        second = _plan(lab, profile, "race-b", "all")
        assert first == second
        for host in first:  # slow BMCs: the snapshots overlap, and both runners take some
            lab.fault(host, latency_ms=300)
        # both rollouts' snapshot step (the first that claims a host) of every host at the
        # same moment, on two runners
        pairs = [(rollout_id, host) for host in first for rollout_id in ("race-a", "race-b")]
        with ThreadPoolExecutor(len(pairs)) as pool:
            ids = pool.map(lambda p: _start(lab, "fleet_rollout.host_step", rollout_id=p[0],
                                            host=p[1], step="snapshot"), pairs)
            started = dict(zip(pairs, ids))
        docs = {k: lab.wait_status(v, DONE, timeout=600) for k, v in started.items()}
        assert {_runner(d) for d in docs.values()} == {"runner-1", "runner-2"}
        for host in first:
            mine = {r: docs[(r, host)] for r in ("race-a", "race-b")}
            _apart(list(mine.values()))  # the host policy ran them one after the other
            won = [r for r, d in mine.items() if d["status"] == "succeeded"]
            assert len(won) == 1, {r: (d["status"], error_text(d)) for r, d in mine.items()}
            [lost] = [r for r in mine if r not in won]
            assert f"held by rollout {won[0]}" in error_text(mine[lost]), error_text(mine[lost])
            claim = lab.cli("key", "get", f"fleet_rollout._hosts.{host}.claim", "--json")
            assert json.loads(json.loads(claim.stdout)["value"])["rollout_id"] == won[0]
            # the loser's restore leaves the host alone: it changed nothing there
            undo = lab.wait_status(_start(lab, "fleet_rollout.host_step", rollout_id=lost,
                                          host=host, step="restore"), DONE, timeout=600)
            assert undo["status"] == "succeeded", error_text(undo)
            assert undo["result"]["result"].get("held_by") == won[0]
            # the winner's work is still there: checked and snapshotted, not reset
            assert lab.kv(won[0], f"host.{host}")["steps"]["snapshot"]["ok"]
            assert lab.bmc(host)["resets"] == []
        # the runners' state dirs are their own: neither holds the other's caches
        dirs = [os.path.join(lab.home, "runners", str(k), "state_dir") for k in (1, 2)]
        assert all(os.path.isdir(d) for d in dirs)
    finally:
        lab.down()


def test_a_step_and_a_restore_of_one_host_started_together_run_one_after_the_other(tmp_path):
    lab = _lab(tmp_path, 4, reboot_seconds=3)
    try:
        profile = _fast_profile(lab, 2)
        hosts = _plan(lab, profile, "meet", "all")
        host = hosts[0]
        for step in ("precheck", "snapshot", "drain", "stage"):
            done = lab.wait_status(_start(lab, "fleet_rollout.host_step", rollout_id="meet",
                                          host=host, step=step), DONE, timeout=600)
            assert done["status"] == "succeeded", (step, error_text(done))
        reboot = _start(lab, "fleet_rollout.host_step", rollout_id="meet", host=host,
                        step="reboot")
        restore = _start(lab, "fleet_rollout.host_step", rollout_id="meet", host=host,
                         step="restore")
        docs = [lab.wait_status(e, DONE, timeout=600) for e in (reboot, restore)]
        _apart(docs)
        assert docs[1]["status"] == "succeeded", error_text(docs[1])
        state = lab.kv("meet", f"host.{host}")
        assert state["status"] == "restored", state
        bmc = lab.bmc(host)
        # one reset per purpose: the reboot's (when it ran first) and the restore's
        markers = [k for k in ("reset_marker", "restore_reset_marker") if state.get(k)]
        assert len(bmc["resets"]) == len(markers) >= 1, (bmc["resets"], markers)
        snapshot = state["bios_snapshot"]["attributes"]
        assert all(bmc["current"].get(k, v) == v for k, v in snapshot.items()), \
            (bmc["current"], snapshot)
    finally:
        lab.down()


def test_a_runner_killed_mid_step_the_step_is_retried_on_the_other_without_a_second_reset(
        tmp_path):
    lab = _lab(tmp_path, 4, reboot_seconds=60)
    try:
        lab.set_config(watchdog_grace=5)
        profile = _fast_profile(lab, 2, redfish={"boot_timeout": 180})
        hosts = _plan(lab, profile, "killed", "all")
        host = hosts[0]
        timeouts = {"precheck": 600, "snapshot": 600, "drain": 600, "kernel": 600,
                    "stage": 600, "reboot": 600, "wait": 120, "verify": 600, "probe": 600,
                    "undrain": 600, "restore": 900}
        change = _start(lab, "fleet_rollout.wave_change", rollout_id="killed", hosts=host,
                        timeouts=timeouts)
        # the host is rebooting (the reset sent, its marker saved before the POST) and the
        # wait step waits for it: the runner running that step dies
        victim: Dict[str, Any] = {}
        deadline = time.time() + 300
        while time.time() < deadline and not victim:
            listed = lab.cli("execution", "list", "--all", "--action",
                             "fleet_rollout.host_step", "--status", "running", "--json")
            running = json.loads(listed.stdout) if listed.stdout.strip() else []
            victim = next((d for d in running
                           if (d.get("parameters") or {}).get("step") == "wait"), {})
            time.sleep(0.2)
        assert (lab.kv("killed", f"host.{host}") or {}).get("reset_marker")
        assert victim, "the wait step was never seen running after the reset"
        killed = _runner(_get(lab, str(victim["id"])))
        out = lab.cli("runner", "kill", killed.split("-")[1], "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        assert _get(lab, str(victim["id"]))["status"] == "running"  # as st2 leaves it
        # the watchdog (its rule runs it every minute) completes it past its timeout; the
        # workflow's retry runs the step again on the runner left
        doc = lab.wait_status(change, DONE, timeout=600)
        assert doc["status"] == "succeeded", error_text(doc)
        assert len(lab.bmc(host)["resets"]) == 1, lab.bmc(host)["resets"]
        step = (victim.get("parameters") or {}).get("step")
        listed = lab.cli("execution", "list", "--all", "--action", "fleet_rollout.host_step",
                         "-n", "50", "--json")
        again = [d for d in json.loads(listed.stdout)
                 if (d.get("parameters") or {}).get("step") == step
                 and str(d["id"]) != str(victim["id"])]
        assert again and all(_runner(_get(lab, str(d["id"]))) != killed for d in again)
        stale = lab.snapshot("killed").stale(str(victim["id"]))
        assert stale and stale["status"] == "timeout", stale
        # one audit trail, in time order, whichever runner wrote each entry
        entries = lab.audit("killed")
        assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)
        kinds = [(e["setting"], e["action"]) for e in entries if e["host"] == host]
        assert ("service", "change") in kinds and ("execution", "stale_execution") in kinds
        assert sum(1 for s, a in kinds if s.startswith("bios.") and a == "change") >= 1
        assert kinds.count(("power", "change")) == 1  # one reset, in the trail once
        assert lab.kv("killed", f"host.{host}")["status"] == "done"
    finally:
        lab.down()


def test_a_restore_waits_for_the_wave_step_that_names_its_host(tmp_path):
    """A wave's drain (one action over the wave's hosts, outside the host policy) and a restore
    of one of its hosts started while it runs: the restore waits until the wave step has ended
    (its result says which execution it waited for), then puts the host back; the wave's other
    host is drained and left to its wave."""
    lab = _lab(tmp_path, 4)
    try:
        profile = _fast_profile(lab, 2, drain={"timeout": 20})
        hosts = _plan(lab, profile, "wave", "all")
        for host in hosts:
            for step in ("precheck", "snapshot"):
                done = lab.wait_status(_start(lab, "fleet_rollout.host_step", rollout_id="wave",
                                              host=host, step=step), DONE, timeout=600)
                assert done["status"] == "succeeded", error_text(done)
        # a connection on the service port that never closes: that host's drain waits out its
        # 20 s and fails
        busy = hosts[0]
        with open(os.path.join(lab.sysroot(busy), "proc/net/tcp"), "a") as handle:
            handle.write("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
                         "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")
        wave = _start(lab, "fleet_rollout.wave_step", rollout_id="wave",
                      hosts=",".join(hosts), step="drain")
        deadline = time.time() + 120
        while time.time() < deadline and not (lab.kv("wave", f"host.{busy}") or {}).get(
                "drain_asked"):
            time.sleep(0.2)
        restore = _start(lab, "fleet_rollout.host_step", rollout_id="wave", host=busy,
                         step="restore")
        wave_doc = lab.wait_status(wave, DONE, timeout=600)
        restore_doc = lab.wait_status(restore, DONE, timeout=600)
        assert wave_doc["status"] == "succeeded", error_text(wave_doc)
        out = wave_doc["result"]["result"]
        assert out["failed"] == [busy] and out["done"] == [hosts[1]], out
        assert restore_doc["status"] == "succeeded", error_text(restore_doc)
        report = restore_doc["result"]["result"]
        assert "waited_for" in report, (report, _span(wave_doc), _span(restore_doc))
        assert report["waited_for"]["executions"] == [wave], report
        assert report["waited_for"]["seconds"] > 5, report
        wave_end = _span(wave_doc)[1]
        state = lab.kv("wave", f"host.{busy}")
        assert state["status"] == "restored", state
        assert state["steps"]["restore"]["at"] >= wave_end
        assert not os.path.exists(os.path.join(lab.sysroot(busy), "etc/fleet/maintenance"))
        assert os.path.exists(os.path.join(lab.sysroot(hosts[1]), "etc/fleet/maintenance"))
        assert lab.kv("wave", f"host.{hosts[1]}")["steps"]["drain"]["ok"] is True
    finally:
        lab.down()
