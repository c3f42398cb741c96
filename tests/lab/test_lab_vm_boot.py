"""The `vm` backend boots real QEMU guests: NUMA layout per BIOS settings, health check, real UDP
drops, settings that survive a power cycle, and no QEMU left behind.

Two VMs boot in parallel (TCG on this machine, about 30-40 s); the image is built first if the
cache is empty (about a minute, needs root and the Debian mirror).
"""
from __future__ import annotations

import ctypes
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Tuple

import locations
import pytest

from fleet_lab.hosts import boot_config
from fleet_lab.vm.backend import VmBackend, cleanup_state_dir, running_vms
from fleet_lab.vm.qemu import FW_CFG_NAME
from fleet_rollout.errors import HostError

pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]

ROOT = locations.ROOT
SLOW = {"LabReceiveSlowdown": "Enabled"}  # receiver rate 4000 / 4 = 1000 packets/s
# Two guests (each TCG boot costs half a minute of a host core): vm-home (Home Snoop, interleaving
# disabled, the lab's receive slowdown on: its NUMA layout, clock, health check, UDP drops and
# power cycle) and vm-cod (cluster on die: four nodes)
CONFIGS = {
    "vm-home": boot_config("vm-home", "home", "disabled", extra=SLOW),
    "vm-cod": boot_config("vm-cod", "cod", "disabled"),
}


def qemu_pids_under(path: Path) -> List[int]:
    """Live (non-zombie) processes whose command line mentions path."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(path).encode() in cmdline and b"qemu-system" in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vmlab")


@pytest.fixture(scope="module")
def lab(state_dir: Path):
    backend = VmBackend(state_dir, progress=print)
    try:
        for config in CONFIGS.values():
            backend.power_on(config)
        backend.wait_up(CONFIGS, timeout=400)
        yield backend
    finally:
        backend.close()


def numa_hardware(lab: VmBackend, host: str) -> Tuple[int, List[List[int]]]:
    """(node count, distance matrix) from `numactl --hardware` in the guest."""
    out = lab.ssh(host, "numactl --hardware").stdout
    count = int(re.search(r"available: (\d+) nodes", out).group(1))
    rows = re.findall(r"^\s*\d+:\s+([\d ]+)$", out, re.M)
    return count, [[int(v) for v in row.split()] for row in rows]


def http_status(port: int, patience: float = 90.0) -> Tuple[int, str]:
    """The guest health service's answer. A TCG guest on a loaded machine can be slow to
    answer (a read timing out): asked again until `patience` runs out; an HTTP answer of any
    status is returned as it is."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def guest_file(lab: VmBackend, host: str, path: str, patience: float = 90.0) -> str:
    """A file a guest service writes once it runs (SSH can answer before the service has
    started on a slow, loaded TCG guest): read again until `patience` runs out."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return lab.ssh(host, f"cat {path}").stdout
        except HostError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def udp_counters(lab: VmBackend, host: str) -> Dict[str, int]:
    lines = [line.split() for line in lab.ssh(host, "cat /proc/net/snmp").stdout.splitlines()
             if line.startswith("Udp:")]
    return dict(zip(lines[0][1:], (int(v) for v in lines[1][1:])))


def send_udp(port: int, pps: int, seconds: float) -> int:
    """Send 200-byte datagrams to 127.0.0.1:port at about pps for seconds; returns the count."""
    sent = 0
    payload = b"x" * 200
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            while sent < int(elapsed * pps):
                sock.sendto(payload, ("127.0.0.1", port))
                sent += 1
            time.sleep(0.001)
    return sent


def test_interleaving_disabled_gives_one_node_per_socket(lab: VmBackend) -> None:
    assert numa_hardware(lab, "vm-home") == (2, [[10, 21], [21, 10]])
    words = lab.ssh("vm-home", f"cat /sys/firmware/qemu_fw_cfg/by_name/{FW_CFG_NAME}/raw"
                    ).stdout.split()
    # Home Snoop's rate (4000 packets/s), a quarter of it under the BIOS's receive slowdown,
    # in the firmware data the guest's services read
    assert {"fleet.snoop=home", "fleet.rate=1000", "fleet.slowdown=1"} <= set(words), words


# each read of the monotonic clock on the next of the guest's vCPUs in turn: the largest and the
# smallest step between two reads (a clock that differs between vCPUs jumps, or goes back)
_CLOCK_ACROSS_VCPUS = (
    "import os, time\n"
    "cpus = sorted(os.sched_getaffinity(0))\n"
    "reads = []\n"
    "for _ in range(10):\n"
    "    for cpu in cpus:\n"
    "        os.sched_setaffinity(0, {cpu})\n"
    "        reads.append(time.monotonic())\n"
    "steps = [b - a for a, b in zip(reads, reads[1:])]\n"
    "print(len(cpus), max(steps), min(steps))\n")


def test_the_guest_clock_keeps_the_hosts_pace_on_every_vcpu(lab: VmBackend) -> None:
    """The kernel keeps its own choice of clocksource, watchdog on (no tsc=reliable: forced
    onto its vCPUs' unsynchronized TSCs, a guest's clock ran up to 11x fast and jumped in a VM
    demo run). The guest's uptime advances as the host's clock does, and the monotonic clock
    read on each vCPU in turn neither jumps nor goes back. A guard, not a proof: the fault came
    in one boot of the dozen in that loaded run; forced onto the TSC on a quiet machine, a guest
    passed this (9.3 s of uptime in 11.4 s of host time, steps up to 4 ms)."""
    host = "vm-home"
    start = time.monotonic()
    first = float(lab.ssh(host, "cat /proc/uptime").stdout.split()[0])
    time.sleep(8.0)
    second = float(lab.ssh(host, "cat /proc/uptime").stdout.split()[0])
    host_span = time.monotonic() - start
    assert 6.0 <= second - first <= host_span + 1.0, (second - first, host_span)
    cpus, largest, smallest = lab.ssh(
        host, "python3 -c " + shlex.quote(_CLOCK_ACROSS_VCPUS)).stdout.split()
    assert int(cpus) == 4  # 2 sockets x 2 cores
    assert float(smallest) >= 0.0 and float(largest) < 2.0, (largest, smallest)


def test_cluster_on_die_gives_two_nodes_per_socket(lab: VmBackend) -> None:
    count, distances = numa_hardware(lab, "vm-cod")
    assert count == 4
    assert distances == [[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]]


def test_health_check_answers_503_while_the_drain_flag_exists(lab: VmBackend) -> None:
    port = lab.ports("vm-home").health
    assert http_status(port) == (200, "ok\n")
    lab.ssh("vm-home", "touch /etc/fleet/maintenance")
    assert http_status(port) == (503, "maintenance\n")
    lab.ssh("vm-home", "rm /etc/fleet/maintenance")
    assert http_status(port)[0] == 200


def test_udp_faster_than_the_receiver_makes_the_guest_kernel_count_drops(lab: VmBackend) -> None:
    port = lab.ports("vm-home").udp
    stats = guest_file(lab, "vm-home", "/run/fleet/udp.json")
    assert '"rate_pps": 1000' in stats
    before = udp_counters(lab, "vm-home")
    slow_sent = send_udp(port, 500, 2.0)  # below the receiver's 1000/s: (almost) no drops
    time.sleep(1.0)
    middle = udp_counters(lab, "vm-home")
    fast_sent = send_udp(port, 3000, 3.0)  # 3x its rate: about two thirds dropped
    time.sleep(1.0)
    after = udp_counters(lab, "vm-home")
    slow_drops = middle["RcvbufErrors"] - before["RcvbufErrors"]
    fast_drops = after["RcvbufErrors"] - middle["RcvbufErrors"]
    # below its rate the receiver keeps up, but a TCG guest on a loaded 2-core machine lags now
    # and then (107 of 955 dropped in one CI run with the other test workers busy, 282 of 999 in
    # another): drops are fewer at half the rate, most of the traffic at three times it, and the
    # share dropped grows by at least 30 points with the rate
    assert slow_drops <= 0.4 * slow_sent, (slow_drops, slow_sent)
    assert fast_drops >= 0.4 * fast_sent, (fast_drops, fast_sent)
    assert fast_drops / fast_sent >= slow_drops / max(1, slow_sent) + 0.3
    assert after["InErrors"] - middle["InErrors"] >= fast_drops


def test_settings_survive_a_power_cycle_into_new_bios_settings(lab: VmBackend) -> None:
    host = "vm-home"
    boot_id = lab.ssh(host, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lab.ssh(host, "echo 'vm.swappiness = 17' > /etc/sysctl.d/90-lab-test.conf && "
                  "sed -i 's/^GRUB_CMDLINE_LINUX=.*/GRUB_CMDLINE_LINUX=\"lab.marker=42\"/' "
                  "/etc/default/grub && update-grub && touch /etc/fleet/maintenance")
    lab.power_off(host)
    assert not lab.is_running(host) and not lab.is_up(host)
    assert running_vms(lab.state_dir).keys() == {"vm-cod"}

    lab.power_on(boot_config(host, "home", "enabled", extra=SLOW))
    lab.wait_up([host], timeout=300)
    assert lab.ssh(host, "cat /proc/sys/kernel/random/boot_id").stdout.strip() != boot_id
    assert numa_hardware(lab, host) == (1, [[10]])
    assert lab.ssh(host, "sysctl -n vm.swappiness").stdout.strip() == "17"
    assert "lab.marker=42" in lab.ssh(host, "cat /proc/cmdline").stdout.split()
    assert http_status(lab.ports(host).health)[0] == 503  # still drained after the reboot


def test_close_leaves_no_qemu(lab: VmBackend) -> None:
    assert qemu_pids_under(lab.state_dir)
    lab.close()
    assert qemu_pids_under(lab.state_dir) == []
    assert running_vms(lab.state_dir) == {}
    assert not list(lab.state_dir.glob("vms/*/qemu.pid"))


PR_SET_CHILD_SUBREAPER = 36
CRASHER = """
import os, sys
from fleet_lab.hosts import boot_config
from fleet_lab.vm.backend import VmBackend
backend = VmBackend(sys.argv[1])
backend.power_on(boot_config("crashed", "early", "disabled"))
os._exit(0)  # no close(), no atexit: as if the process had crashed
"""


def test_cleanup_stops_vms_a_crashed_process_left_behind(tmp_path: Path) -> None:
    """The crashed process's QEMU would be adopted by PID 1; we become a child subreaper for the
    test so that we can reap it after cleanup (PID 1 here does not reap)."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        subprocess.run([sys.executable, "-c", CRASHER, str(tmp_path)], check=True, cwd=ROOT,
                       timeout=120)
        assert len(qemu_pids_under(tmp_path)) == 1
        assert list(running_vms(tmp_path)) == ["crashed"]
        assert cleanup_state_dir(tmp_path) == ["crashed"]
        assert qemu_pids_under(tmp_path) == []
        assert not (tmp_path / "vms/crashed/qemu.pid").exists()
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        cleanup_state_dir(tmp_path)
