"""Counter windows from a real Prometheus (Debian's prometheus) scraping a real node_exporter
(Debian's prometheus-node-exporter) on every lab server: the lab's monitoring, a window read
through it against the hosts' own collector, reboots and scrape gaps inside a window, rollouts
judged from it (PASS and FAIL), and a Prometheus that stops in the middle of a rollout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest
import requests
from rollout_support import ROOT, SimLab, error_text, output

from fleet_lab import monitoring
from fleet_lab.chatops import procs
from fleet_rollout.config import load_pack_config
from fleet_rollout.counters.collector import collect, samples_dir
from fleet_rollout.counters.deltas import window_from_snapshots
from fleet_rollout.counters.metric import DEFAULT_METRIC
from fleet_rollout.counters.prometheus import BOOT_TIME_TOLERANCE_S


def _source(sim: SimLab) -> Any:
    config = load_pack_config(sim.config)
    assert config.counters.source == "prometheus"
    return config.counters.prometheus.source()


def _reset(sim: SimLab, host: str) -> None:
    """A forced restart through the host's BMC (Redfish), as an operator's would be."""
    entry = next(h for h in sim.manifest["hosts"] if h["name"] == host)
    cred = sim.config["credentials"]["lab"]
    auth = (cred["username"], cred["password"])
    base = entry["bmc_url"]
    members = requests.get(f"{base}/redfish/v1/Systems", auth=auth, verify=sim.manifest["ca"],
                           timeout=10).json()["Members"]
    system = members[0]["@odata.id"]
    answer = requests.post(f"{base}{system}/Actions/ComputerSystem.Reset", auth=auth,
                           json={"ResetType": "ForceRestart"}, verify=sim.manifest["ca"],
                           timeout=10)
    assert answer.status_code < 300, answer.text


@pytest.fixture()
def watched_lab(tmp_path):
    sim = SimLab(str(tmp_path), 4, prometheus=True, reboot_seconds=2.0)
    yield sim
    sim.down()


def test_the_labs_prometheus_scrapes_every_server_and_stops_with_the_lab(watched_lab):
    sim = watched_lab
    info = monitoring.read_info(sim.state)
    assert info is not None and info["url"].startswith("https://127.0.0.1:")
    seen = monitoring.targets(info)
    assert sorted(seen) == sim.host_names()
    assert all(t["health"] == "up" for t in seen.values()), seen
    # its API asks for the credentials the pack config holds, over TLS verified by the lab CA
    denied = requests.get(f"{info['url']}/api/v1/query", params={"query": "up"},
                          verify=info["ca"], timeout=10)
    assert denied.status_code == 401
    prom = sim.config["counters"]["prometheus"]
    assert sim.config["counters"]["source"] == "prometheus"
    assert prom["auth_header"].startswith("Basic ") and prom["ca_bundle"] == info["ca"]
    # `lab status --json` shows it, targets included, and never the password
    status = subprocess.run([sys.executable, "-m", "fleet_runtime.cli", "lab", "status",
                             "--state-dir", sim.state, "--json"], cwd=ROOT, env=sim.env,
                            capture_output=True, text=True, timeout=60)
    doc = json.loads(status.stdout)["prometheus"]
    assert doc["url"] == info["url"] and doc["pid"] == info["prometheus"]
    assert {h: t["health"] for h, t in doc["targets"].items()} == {
        h: "up" for h in sim.host_names()}
    assert info["password"] not in status.stdout
    pids = [info["prometheus"]] + list(info["exporters"].values())
    assert len(info["exporters"]) == 4 and all(procs.alive(p) for p in pids)
    sim.down()
    assert not any(procs.alive(p) for p in pids)
    assert monitoring.read_info(sim.state) is None


def test_a_window_read_through_prometheus_equals_the_collectors(watched_lab):
    sim = watched_lab
    hosts = sim.host_names()
    time.sleep(3)  # a few scrapes of the running traffic
    firsts = {h: collect(sysroot=sim.sysroot(h), host=h) for h in hosts}
    start = time.time()
    time.sleep(12)
    lasts = {h: collect(sysroot=sim.sysroot(h), host=h) for h in hosts}
    end = time.time()
    time.sleep(3)  # the last scrape lands
    counts = _source(sim).window_counts(hosts, DEFAULT_METRIC, start, end, step=1.0)
    for host in hosts:
        mine = window_from_snapshots(firsts[host], lasts[host], DEFAULT_METRIC)
        theirs = counts[host]
        assert theirs.usable and mine.usable, (theirs, mine)
        # within the scrape resolution: each end of the window is read up to one scrape
        # (1 s) apart, at the host's own rate
        rate = mine.packets / (end - start)
        assert abs(theirs.packets - mine.packets) <= 2.5 * rate, (host, theirs, mine)
        drop_rate = mine.drops / (end - start)
        assert abs(theirs.drops - mine.drops) <= 2.5 * drop_rate + 50, (host, theirs, mine)
        assert theirs.coverage >= 0.9 and theirs.detail["snmp:Udp.RcvbufErrors"] > 0


def test_a_reboot_or_a_scrape_gap_inside_a_window_is_seen(watched_lab):
    sim = watched_lab
    info = monitoring.read_info(sim.state)
    # node_boot_time_seconds may move by up to a minute without a reboot (NTP steps): a
    # reboot is a boot more than BOOT_TIME_TOLERANCE_S after the last, as a real server's is
    booted = float(sim.read("lab-001", "proc/stat").split("btime ")[1].split()[0])
    time.sleep(max(0.0, booted + BOOT_TIME_TOLERANCE_S + 2 - time.time()))
    start = time.time()
    time.sleep(2)
    _reset(sim, "lab-001")  # a reboot inside the window (2 s reboots in this lab)
    gap = info["exporters"]["lab-002"]
    os.kill(gap, signal.SIGSTOP)  # its scrapes time out: a gap of about 8 s
    try:
        time.sleep(8)
    finally:
        os.kill(gap, signal.SIGCONT)
    time.sleep(4)
    end = time.time()
    time.sleep(3)
    counts = _source(sim).step_counts(sim.host_names(), DEFAULT_METRIC, start, end, 2, 1.0)
    assert not counts["lab-001"].usable
    assert "reboot inside the window" in counts["lab-001"].problem
    assert counts["lab-002"].usable and counts["lab-002"].coverage < 0.7, counts["lab-002"]
    for host in ("lab-003", "lab-004"):
        assert counts[host].usable and counts[host].coverage >= 0.9, counts[host]
        steps = counts[host].steps
        assert steps is not None and len(steps) == 2 and sum(steps) == counts[host].drops
    # the judge leaves the rebooted host out and reads the gap as too little data
    from fleet_rollout.judge import judge, judge_input_from_dict

    doc = {"canary": ["lab-001", "lab-002"], "control": ["lab-003", "lab-004"],
           "hosts": {h: {"pre": c.to_dict(), "post": c.to_dict()} for h, c in counts.items()
                     if c.usable}}
    verdict = judge(judge_input_from_dict(doc)).to_dict()
    usable = {h["host"]: h["usable"] for h in verdict["hosts"]}
    assert usable.get("lab-001") is not True and usable["lab-002"] is False, verdict["hosts"]


def test_a_plan_refuses_hosts_its_prometheus_does_not_scrape(watched_lab):
    sim = watched_lab
    info = monitoring.read_info(sim.state)
    assert procs.stop(info["exporters"]["lab-004"], 15.0)  # its next scrape fails: stale
    time.sleep(3)
    execution = sim.run("fleet_rollout.plan", profile=sim.profile("home-snoop"),
                        targets="lab-001,lab-002")
    assert execution["status"] == "failed"
    text = error_text(execution)
    assert info["url"] in text and "for 1 host(s): lab-004." in text, text
    assert "nothing was changed" in text
    assert not sim.kv_ids()  # no plan stored


def _rollout(sim: SimLab, profile: str, targets: str) -> Dict[str, Any]:
    execution = sim.run_proceeding("fleet_rollout.rollout", profile=profile, targets=targets)
    return execution


def _windows_from_prometheus(sim: SimLab, rollout_id: str) -> None:
    """Every window of batch 1 was read from Prometheus: its starts ran nothing on the hosts
    (no sampler left a window there), its ends hold counts read at the scrape resolution."""
    start = _key(sim, rollout_id, "batch.0.counters.post_start.0")["snapshots"]
    assert start and all(doc.get("prometheus") is True for doc in start.values()), start
    end = _key(sim, rollout_id, "batch.0.counters.post_end.0")["snapshots"]
    assert end and all(doc["packets"] > 0 and "coverage" in doc for doc in end.values()), end
    for host in sim.host_names():
        samples = samples_dir(sim.sysroot(host))
        assert not os.path.isdir(samples) or not os.listdir(samples), (host, samples)


def _key(sim: SimLab, rollout_id: str, name: str) -> Any:
    out = sim.cli("key", "get", f"fleet_rollout.{rollout_id}.{name}", "--json")
    if out.returncode != 0:
        return None
    return json.loads(json.loads(out.stdout)["value"])


@pytest.fixture()
def judged_lab(tmp_path):
    sim = SimLab(str(tmp_path), 9, prometheus=True)
    yield sim
    sim.down()


def test_rollouts_judged_from_prometheus_pass_the_good_change_and_fail_the_bad(judged_lab):
    sim = judged_lab
    batch = {"canary_size": 3, "max_batch": 3, "growth": 1, "max_unavailable_per_rack": 3,
             "max_unavailable_per_site": 3}
    good = sim.profile("home-snoop", approval={"required": False}, batches=batch)
    execution = _rollout(sim, good, "lab-001,lab-002,lab-003")
    result = output(execution)
    assert execution["status"] == "succeeded", error_text(execution)
    rollout_id = result["rollout_id"]
    verdict = sim.kv(rollout_id, "batch.0")["verdict"]
    assert verdict["verdict"] == "PASS", verdict["explanation"]
    _windows_from_prometheus(sim, rollout_id)
    bad = sim.profile("lab-bad", approval={"required": False}, batches=batch,
                      kernel={"sysctl": {"net.core.rmem_max": 16777216}})
    execution = _rollout(sim, bad, "lab-004,lab-005,lab-006")
    result = output(execution)
    assert execution["status"] == "failed" and result["status"] == "rolled_back", result
    verdict = sim.kv(result["rollout_id"], "batch.0")["verdict"]
    assert verdict["verdict"] == "FAIL", verdict["explanation"]
    _windows_from_prometheus(sim, result["rollout_id"])
    for host in ("lab-004", "lab-005", "lab-006"):
        assert sim.kv(result["rollout_id"], f"host.{host}")["status"] == "restored"


def _wait_for(what: Any, timeout: float, message: str) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(message)


def test_prometheus_stopped_mid_rollout_names_its_url_and_keeps_the_hosts(judged_lab):
    sim = judged_lab
    info = monitoring.read_info(sim.state)
    profile = sim.profile("home-snoop", approval={"required": False},
                          batches={"canary_size": 3, "max_batch": 3, "growth": 1,
                                   "max_unavailable_per_rack": 3,
                                   "max_unavailable_per_site": 3})
    sim.start_engine()  # the rollout runs in the background engine; this test watches it
    started = sim.cli("run", "fleet_rollout.rollout", f"profile={profile}",
                      "targets=lab-001,lab-002,lab-003", "-a", "--json")
    assert started.returncode == 0, started.stderr[-3000:]
    execution_id = json.loads(started.stdout)["id"]
    # the batch's change begins (its first host drained) after its pre window ended, before
    # either window is read (the pre window is read during the post window's soak)
    _wait_for(lambda: sim.drained("lab-001") or sim.drained("lab-002")
              or sim.drained("lab-003"), 600, "batch 1 did not begin its change")
    assert procs.stop(info["prometheus"], 15.0)
    rollout_id = _rollout_id(sim)
    execution = sim.settle(execution_id)
    verdict = sim.kv(rollout_id, "batch.0")["verdict"]
    assert sim.waiting(execution), (execution["status"], verdict)
    assert verdict["verdict"] == "INCONCLUSIVE" and verdict["reason"] == "counters_unread"
    assert info["url"] in verdict["explanation"], verdict["explanation"]
    assert "cannot connect" in verdict["explanation"]
    for host in ("lab-001", "lab-002", "lab-003"):  # changed, in service, not lost
        state = sim.kv(rollout_id, f"host.{host}")
        assert state["status"] == "done", state
        assert sim.bmc(host)["logical"]["snoop_mode"] == "home"
        assert not sim.drained(host)
    questions = sim.pending()
    assert questions, "the INCONCLUSIVE verdict asks an approver"
    for inquiry in questions:
        sim.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "rollback"}')
    execution = sim.settle(execution["id"])
    sim.wait_idle()
    sim.stop_engine()
    assert output(execution)["status"] == "rolled_back", output(execution)


def _rollout_id(sim: SimLab) -> str:
    ids: List[str] = sim.kv_ids()
    return ids[0] if ids else ""
