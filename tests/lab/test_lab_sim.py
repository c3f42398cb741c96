"""The lab with the `sim` backend, end to end: `lab up` (a daemon process), Redfish through the
simulated BMCs, Ansible through the written inventory, counters under traffic, `lab down`."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pytest
import yaml
from hostside_support import lab_host_side

from fleet_lab import lab
from fleet_rollout.redfish.client import BmcEndpoint
from fleet_rollout.redfish.operations import Timeouts, apply_bios


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def sim_lab(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("lab"))
    inventory = os.path.join(state, "inventory.yml")
    out = _cli("lab", "up", "--hosts", "4", "--backend", "sim", "--vendor",
               "dell-idrac8,generic", "--reboot-seconds", "1", "--state-dir", state,
               "--inventory", inventory)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "servers up: 4/4" in out.stdout and "lab ready" in out.stdout
    yield state, inventory
    down = _cli("lab", "down", "--state-dir", state)
    assert down.returncode == 0
    assert lab.daemon_pid(state) is None


def _nodes(state, host):
    return len([n for n in os.listdir(os.path.join(state, "hosts", host,
                                                   "sys/devices/system/node"))
                if n.startswith("node")])


def _wait_os(state, index):
    """POST done is not OS up: wait like the rollout does before it looks at the host."""
    import requests

    manifest = lab.read_manifest(state)
    url = manifest["hosts"][index]["bmc_url"]
    for _ in range(100):
        doc = requests.get(f"{url}/_sim/state", verify=manifest["ca"], timeout=5).json()
        if doc["boot_state"] == "OSRunning" and not doc["rebooting"]:
            return
        time.sleep(0.1)
    raise AssertionError("OS not up")


def _udp(state, host):
    text = open(os.path.join(state, "hosts", host, "proc/net/snmp")).read().splitlines()
    head, values = [line.split()[1:] for line in text if line.startswith("Udp:")]
    return dict(zip(head, (int(v) for v in values)))


def test_inventory_and_pack_config_written(sim_lab):
    state, inventory = sim_lab
    doc = yaml.safe_load(open(inventory))
    hosts = {h: v for g in doc["all"]["children"].values() for h, v in g["hosts"].items()}
    assert sorted(hosts) == ["lab-001", "lab-002", "lab-003", "lab-004"]
    assert {v["site"] for v in hosts.values()} == {"site-a", "site-b"}
    assert all(v["bmc_address"].startswith("https://127.0.0.1:") for v in hosts.values())
    config_path = lab.paths(state)["pack_config"]
    assert oct(os.stat(config_path).st_mode & 0o777) == "0o600"
    config = yaml.safe_load(open(config_path))
    assert config["credentials"]["lab"]["password"] not in open(inventory).read()


def test_bios_change_through_redfish_changes_the_topology(sim_lab):
    state, inventory = sim_lab
    config = yaml.safe_load(open(lab.paths(state)["pack_config"]))
    manifest = lab.read_manifest(state)
    host = manifest["hosts"][0]
    assert _nodes(state, host["name"]) == 2  # 2 sockets, interleaving off
    ep = BmcEndpoint(host["name"], host["bmc_url"], "admin",
                     config["credentials"]["lab"]["password"], ca_bundle=config["ca_bundle"])
    apply_bios(ep, {"node_interleaving": "enabled"}, Timeouts(graceful=10, force=10, boot=60,
                                                              poll=0.2))
    _wait_os(state, 0)
    assert _nodes(state, host["name"]) == 1
    apply_bios(ep, {"node_interleaving": "disabled", "snoop_mode": "cod"},
               Timeouts(graceful=10, force=10, boot=60, poll=0.2))
    _wait_os(state, 0)
    assert _nodes(state, host["name"]) == 4


def test_counters_move_under_traffic_and_drain_stops_it(sim_lab):
    state, inventory = sim_lab
    side = lab_host_side(state, inventory)
    before = _udp(state, "lab-002")
    time.sleep(4.5)
    moving = _udp(state, "lab-002")
    assert moving["InDatagrams"] > before["InDatagrams"]
    assert moving["RcvbufErrors"] > before["RcvbufErrors"]  # early snoop: slower receiver
    assert side.drain(["lab-002"])["lab-002"].ok
    time.sleep(2.5)
    drained = _udp(state, "lab-002")
    time.sleep(4.5)
    assert _udp(state, "lab-002") == drained
    assert side.undrain(["lab-002"])["lab-002"].ok
    time.sleep(4.5)
    assert _udp(state, "lab-002")["InDatagrams"] > drained["InDatagrams"]


def _rx_packets_written(state, host):
    """rx_packets and when the lab daemon wrote it (the file's mtime). The daemon writes the
    file in place, and a write updates the mtime a moment before the text: the value is read
    on both sides of the mtime, a millisecond apart, and read again if a write came between."""
    path = os.path.join(state, "hosts", host, "sys/class/net/eth0/statistics/rx_packets")
    with open(path) as handle:
        while True:
            first = int(os.pread(handle.fileno(), 64, 0))
            written = os.fstat(handle.fileno()).st_mtime
            time.sleep(0.001)
            if int(os.pread(handle.fileno(), 64, 0)) == first and \
                    os.fstat(handle.fileno()).st_mtime == written:
                return first, written


def test_counters_move_in_small_steps_so_a_window_counts_its_own_traffic(sim_lab):
    """A counter window is two reads some seconds apart: the packets between them must follow
    the time between them (a 2 s step once gave windows of 8 s of traffic in 9 s and 10 s in
    8 s: canary and control looked like a 1.6x traffic change). Timed by the daemon's own
    writes, not by this test's reads: on a loaded machine (a CI run) a late tick made a window
    read by the clock here count 2.3 s of traffic in 3.3 s, which says nothing of the step."""
    from fleet_lab.daemon import sim_tick

    assert sim_tick(4) == 0.5 and sim_tick(500) == 0.5 and sim_tick(2000) == 2.0
    state, _inventory = sim_lab
    updates = []  # (packets, written) at each change seen
    deadline = time.monotonic() + 10.5
    while time.monotonic() < deadline:
        packets, written = _rx_packets_written(state, "lab-003")
        if not updates or packets != updates[-1][0]:
            updates.append((packets, written))
        time.sleep(0.05)
    steps = [b[1] - a[1] for a, b in zip(updates, updates[1:])]
    assert len(steps) >= 5 and statistics.median(steps) <= 1.0, steps  # 0.5 s (a 2 s step: 2)
    rates = []  # packets per second over windows of 3 s or more between two writes
    first = 0
    for i in range(1, len(updates)):
        if updates[i][1] - updates[first][1] >= 3.0:
            rates.append((updates[i][0] - updates[first][0]) /
                         (updates[i][1] - updates[first][1]))
            first = i
    assert len(rates) >= 2 and min(rates) > 0, (rates, updates)
    assert max(rates) / min(rates) < 1.2, rates  # each step is +-5% of the offered rate


def test_each_sim_host_counts_the_traffic_of_the_time_since_its_own_write(tmp_path, monkeypatch):
    """One tick writes host after host; on a loaded machine the last write comes a second or
    more after the first. Each host's counters move by the time since its own last write, read
    just before it is written (a CI run once counted 2,916 packets/s in one 3 s window of a host
    against 3,595 in the next, its writes timed by the tick's start)."""
    from fleet_lab.hosts import boot_config
    from fleet_lab.traffic import SimCounters, TrafficSettings

    clock = [1000.0]
    monkeypatch.setattr("fleet_lab.traffic.time.monotonic", lambda: clock[0])
    counters = SimCounters(str(tmp_path))
    for host in ("a", "b"):
        counters.booted(boot_config(host, "home", "disabled"))
    real_write = counters._write

    def slow_write(host, state):  # each write takes 1.5 s of the clock
        real_write(host, state)
        clock[0] += 1.5

    monkeypatch.setattr(counters, "_write", slow_write)
    clock[0] += 2.0
    counters.tick(TrafficSettings(pps=1000))  # a: 2.0 s since boot, b: 3.5 s
    first = {h: s.rx_packets for h, s in counters.hosts.items()}
    assert 1900 <= first["a"] <= 2100 and 3325 <= first["b"] <= 3675, first
    counters.tick(TrafficSettings(pps=1000))  # both: 3.0 s since their own last write
    moved = {h: s.rx_packets - first[h] for h, s in counters.hosts.items()}
    assert all(2850 <= n <= 3150 for n in moved.values()), moved
    rx = tmp_path / "b" / "sys/class/net/eth0/statistics/rx_packets"
    assert int(rx.read_text()) == counters.hosts["b"].rx_packets
    clock[0] += 5.0
    counters.tick(TrafficSettings(enabled=False))  # stopped traffic: those 5 s count nothing
    clock[0] += 3.0
    counters.tick(TrafficSettings(pps=1000))  # a: 3.0 s, b: 4.5 s (after a's write)
    last = {h: s.rx_packets - first[h] - moved[h] for h, s in counters.hosts.items()}
    assert 2850 <= last["a"] <= 3150 and 4275 <= last["b"] <= 4725, last


def test_sim_counter_files_are_written_in_place_and_read_by_the_collector(tmp_path):
    """The daemon's counter files keep their length (numbers 20 wide), so each write goes over
    the file in place (the same inode: no new file renamed over the old one, which ext4 wrote
    back at once); the collector's parsers read the padded numbers as the kernel's."""
    from fleet_lab.hosts import boot_config
    from fleet_lab.traffic import SimCounters, TrafficSettings
    from fleet_rollout.counters.collector import (
        parse_counter_value,
        parse_ethtool_stats,
        parse_snmp,
    )

    counters = SimCounters(str(tmp_path))
    counters.booted(boot_config("a", "early", "disabled"))
    root = tmp_path / "a"
    files = {"rx": root / "sys/class/net/eth0/statistics/rx_packets",
             "snmp": root / "proc/net/snmp", "ethtool": root / "run/fleet-sim/ethtool-S/eth0"}
    counters.tick(TrafficSettings(pps=100000))
    time.sleep(0.05)
    first = {name: (path.stat().st_ino, path.stat().st_size) for name, path in files.items()}
    for _ in range(3):
        time.sleep(0.05)
        counters.tick(TrafficSettings(pps=100000))
    state = counters.hosts["a"]
    assert state.rx_packets > 0 and state.drops > 0
    assert {name: (path.stat().st_ino, path.stat().st_size)
            for name, path in files.items()} == first  # written over, not replaced
    assert parse_counter_value(files["rx"].read_text()) == state.rx_packets
    udp = parse_snmp(files["snmp"].read_text())["Udp"]
    assert udp["InDatagrams"] == state.delivered and udp["RcvbufErrors"] == state.drops
    assert parse_ethtool_stats(files["ethtool"].read_text())["rx_packets"] == state.rx_packets
    counters.booted(boot_config("a", "home", "disabled"))  # a reboot: counters start again
    counters.tick(TrafficSettings(pps=10))
    assert parse_counter_value(files["rx"].read_text()) == counters.hosts["a"].rx_packets
    assert files["rx"].stat().st_size == first["rx"][1]


def test_the_sender_bursts_fit_the_guests_socket_buffer_at_few_wakeups():
    """The lab's sender bursts to each server every 20-100 ms (each burst wakes a TCG guest:
    every 20 ms took 12.8% of a host core per demo guest, every 100 ms 5.5%); a burst stays far
    below the ~85 datagrams a guest's socket buffer holds, so drops follow only the rate. The
    guest's receiver reads as rarely: about 40 datagrams a tick, at most every 100 ms."""
    import ast
    from pathlib import Path

    from fleet_lab.traffic import send_tick

    assert send_tick(350) == 0.1 and send_tick(3500) == 0.02 and send_tick(0) == 0.1
    for pps in (50, 175, 350, 700, 1000, 1750):
        assert 0.02 <= send_tick(pps) <= 0.1 and pps * send_tick(pps) <= 35.0 + 1e-9, pps
    recv = Path(__file__).resolve().parents[2] / "fleet_lab/vm/guest/fleet-udprecv.py"
    tree = ast.parse(recv.read_text())
    ticks = next(n for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.targets[0], ast.Tuple)
                 and [t.id for t in n.targets[0].elts] == ["MAX_TICK", "MIN_TICK",
                                                           "DATAGRAMS_PER_TICK"])
    max_tick, _min_tick, per_tick = ast.literal_eval(ticks.value)
    assert max_tick == 0.1 and per_tick == 40.0  # the demo's rates (300-400): one read a 0.1 s


def test_the_sender_keeps_a_server_in_service_through_a_slow_health_answer(monkeypatch):
    """503 (drained) stops a server's traffic at once; no answer stops it only after 3 misses in
    a row (a reboot). In a VM demo run one slow answer from a loaded TCG guest paused its traffic
    for seconds of a counter window: the judge saw 101 packets/s against 350 and a traffic
    shift. The health answers here are scripted (the loop is what is tested)."""
    import asyncio

    from fleet_lab import traffic

    script = {"a": [True, None, True, None, None, None, True, False],
              "b": [True, None, None, None, False, True, True, True]}
    passes = len(script["a"])
    calls = {h: iter(answers) for h, answers in script.items()}
    monkeypatch.setattr(traffic, "health_ok", lambda port: next(calls[port]))
    sender = traffic.UdpSender({"a": {"udp": 0, "health": "a"}, "b": {"udp": 0, "health": "b"}},
                               "/nonexistent")
    seen = []
    real_sleep = asyncio.sleep

    async def one_pass(_seconds):
        seen.append(dict(sender.in_service))
        if len(seen) == passes:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(traffic.asyncio, "sleep", one_pass)
    try:
        asyncio.run(sender._health_loop())
    except asyncio.CancelledError:
        pass
    assert [p["a"] for p in seen] == [True, True, True, True, True, False, True, False], seen
    assert [p["b"] for p in seen] == [True, True, True, False, False, True, True, True], seen


def test_status_json(sim_lab):
    state, _ = sim_lab
    out = _cli("lab", "status", "--state-dir", state, "--json")
    assert out.returncode == 0
    import json

    doc = json.loads(out.stdout)
    assert doc["running"] and len(doc["hosts"]) == 4
    assert all(h["boot"] == "OSRunning" for h in doc["hosts"])


def test_a_sim_server_unlike_its_peers_shows_another_cross_socket_distance(tmp_path):
    from fleet_lab.hosts import boot_config
    from fleet_lab.simhost import SimBackend

    backend = SimBackend(str(tmp_path))
    distances = os.path.join(backend.sysroot("odd"), "sys/devices/system/node/node0/distance")
    backend.power_on(boot_config("odd", "home", "disabled"))
    assert open(distances).read().split() == ["10", "21"]
    with open(backend.hardware_path("odd"), "w") as handle:
        handle.write('{"cross_socket_distance": 31}')
    backend.power_on(boot_config("odd", "home", "disabled"))  # the next boot shows it
    assert open(distances).read().split() == ["10", "31"]
    backend.power_on(boot_config("odd", "cod", "disabled"))  # same die stays near
    assert open(distances).read().split() == ["10", "11", "31", "31"]


def test_a_sim_servers_os_answers_with_its_new_boot_only_once_it_has_started(tmp_path):
    """With an OS start time, a power on leaves the host down with its last boot (its old boot
    id) until that time has passed; a power off while it starts cancels that start."""
    from fleet_lab.hosts import boot_config
    from fleet_lab.simhost import SimBackend

    backend = SimBackend(str(tmp_path), os_boot=1.0)
    boot_id = os.path.join(backend.sysroot("slow"), "proc/sys/kernel/random/boot_id")
    backend.power_on(boot_config("slow", "early", "disabled"))
    while not backend.is_up("slow"):
        time.sleep(0.05)
    first = open(boot_id).read()
    backend.power_off("slow")
    started = time.monotonic()
    backend.power_on(boot_config("slow", "home", "disabled"))
    assert not backend.is_up("slow") and open(boot_id).read() == first
    while not backend.is_up("slow"):
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.9
    assert open(boot_id).read() != first
    second = open(boot_id).read()
    backend.power_on(boot_config("slow", "early", "disabled"))
    backend.power_off("slow")  # before its OS started: that start never comes
    time.sleep(1.5)
    assert not backend.is_up("slow") and open(boot_id).read() == second
