"""Traffic for the lab: UDP to every server that is in service, so drop counters really move.

vm backend: a UDP sender on the host to each guest's forwarded UDP port; the guest's receiver
reads at a rate set by the BIOS settings in effect (fleet_lab.vm.drop_model), so the guest kernel
counts real drops (Udp RcvbufErrors/InErrors). A host is sent to only while its health check
answers 200 (a drained host answers 503: traffic stops, like a load balancer would).

sim backend: the same model as counter arithmetic on the fake trees (SimCounters).
"""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import random
import socket
import time
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from fleet_lab.hosts import BootConfig
from fleet_lab.simhost import SNMP_UDP_FIELDS, _write, proc_net_dev
from fleet_lab.vm.drop_model import receive_rate


@dataclass
class TrafficSettings:
    enabled: bool = True
    pps: int = 3500  # offered packets per second per server
    payload: int = 64

    @classmethod
    def load(cls, path: str) -> TrafficSettings:
        try:
            with open(path) as handle:
                data = json.load(handle)
            return cls(bool(data.get("enabled", True)), int(data.get("pps", 3500)),
                       int(data.get("payload", 64)))
        except (OSError, ValueError):
            return cls()

    def save(self, path: str) -> None:
        with open(path, "w") as handle:
            json.dump({"enabled": self.enabled, "pps": self.pps, "payload": self.payload}, handle)


def health_ok(port: int, timeout: float = 1.0) -> Optional[bool]:
    """True: in service (200); False: drained (503); None: not answering."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", "/health")
        status = conn.getresponse().status
        conn.close()
        return status == 200
    except (OSError, http.client.HTTPException):
        return None


def send_tick(pps: int) -> float:
    """Seconds between the sender's bursts to each server: about 35 datagrams a burst, between
    20 ms and 100 ms. Every burst wakes a TCG guest's network stack and receiver: bursts every
    20 ms at the VM demo's 350 packets/s took 12.8% of a host core per guest, every 100 ms
    5.5% (with the receiver's matching tick; docs/lab.md). A burst stays well inside the
    guests' 64 kB socket buffer (about 85 datagrams), so drops still follow only the rate."""
    return min(0.1, max(0.02, 35.0 / max(1, pps)))


FALL_AFTER = 3  # health checks without an answer before a server is out of service


class UdpSender:
    """Sends `pps` packets per second to each target (host -> (udp_port, health_port))."""

    def __init__(self, targets: Dict[str, Dict[str, int]], settings_path: str) -> None:
        self.targets = targets
        self.settings_path = settings_path
        self.in_service: Dict[str, bool] = {}
        self.sent: Dict[str, int] = {h: 0 for h in targets}

    async def _health_loop(self) -> None:
        """Like a load balancer's health checks: a server that answers 503 (drained) is out of
        service at once; one that does not answer is taken out only after FALL_AFTER misses in a
        row (a rebooting server). A single slow answer from a TCG guest on a loaded machine
        once stopped its traffic for seconds in the middle of a counter window, and the judge
        saw a traffic shift where the only change was the lab's own."""
        loop = asyncio.get_running_loop()
        misses: Dict[str, int] = {h: 0 for h in self.targets}
        while True:
            for host, ports in self.targets.items():
                ok = await loop.run_in_executor(None, health_ok, ports["health"])
                misses[host] = misses[host] + 1 if ok is None else 0
                if ok is not None or misses[host] >= FALL_AFTER:
                    self.in_service[host] = bool(ok)
            await asyncio.sleep(2.0)

    async def run(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        health = asyncio.get_running_loop().create_task(self._health_loop())
        credit: Dict[str, float] = {h: 0.0 for h in self.targets}
        settings = TrafficSettings.load(self.settings_path)
        last_settings = time.monotonic()
        last = time.monotonic()
        try:
            while True:
                await asyncio.sleep(send_tick(settings.pps))
                now = time.monotonic()
                elapsed, last = now - last, now
                if now - last_settings > 1.0:
                    settings = TrafficSettings.load(self.settings_path)
                    last_settings = now
                if not settings.enabled:
                    continue
                payload = b"x" * settings.payload
                for host, ports in self.targets.items():
                    if not self.in_service.get(host):
                        credit[host] = 0.0
                        continue
                    credit[host] += settings.pps * elapsed
                    count = int(credit[host])
                    credit[host] -= count
                    for _ in range(count):
                        try:
                            sock.sendto(payload, ("127.0.0.1", ports["udp"]))
                        except (BlockingIOError, OSError):
                            break
                        self.sent[host] += 1
        finally:
            health.cancel()
            sock.close()


@dataclass
class HostCounters:
    config: BootConfig
    capacity_factor: float
    rx_packets: int = 0
    delivered: int = 0
    drops: int = 0
    softnet: List[int] = field(default_factory=list)
    updated: float = 0.0  # time.monotonic() when the counters last moved


class SimCounters:
    """Counter model of `sim` hosts: offered traffic, receive capacity from the BIOS settings
    (the same model as the VMs), per-host heterogeneity, drops written where the kernel would."""

    def __init__(self, root: str, seed: int = 1) -> None:
        self.root = root
        self.hosts: Dict[str, HostCounters] = {}
        self.random = random.Random(seed)

    def booted(self, config: BootConfig) -> None:
        factor = 0.9 + (zlib.crc32(config.host.encode()) % 1000) / 1000 * 0.2  # 0.9-1.1
        self.hosts[config.host] = HostCounters(config, factor, updated=time.monotonic())

    def powered_off(self, host: str) -> None:
        self.hosts.pop(host, None)

    def drained(self, host: str) -> bool:
        return os.path.exists(os.path.join(self.root, host, "etc/fleet/maintenance"))

    def tick(self, settings: TrafficSettings) -> None:
        """Move every host's counters by the traffic of the time since that host's own last
        update, read just before its files are written: on a loaded machine the writes of one
        tick spread over a second or more, and a window (two reads of one host) must count the
        traffic of the time between that host's writes."""
        for host, state in list(self.hosts.items()):
            now = time.monotonic()
            seconds, state.updated = now - state.updated, now
            if not settings.enabled or self.drained(host):
                continue
            cfg = state.config
            offered = int(settings.pps * seconds * self.random.uniform(0.95, 1.05))
            capacity = receive_rate(cfg.snoop_mode, cfg.node_interleaving, cfg.extra)
            capacity = capacity * state.capacity_factor * seconds
            dropped = max(0, int(offered - capacity))
            if self.random.random() < 0.1:  # bursts: occasional short overload
                dropped += self.random.randint(0, max(1, offered // 50))
            dropped = min(dropped, offered)
            state.rx_packets += offered
            state.delivered += offered - dropped
            state.drops += dropped
            self._write(host, state)

    def _write(self, host: str, state: HostCounters) -> None:
        """The host's counter files, every number WIDTH digits wide (zero-padded): a file keeps
        its length, so it is overwritten in place (`_overwrite`). Replacing it (a new file renamed
        over the old one) made ext4 write each one back at once (its auto_da_alloc): 0.2-0.4 ms
        of CPU a file, five files per host twice a second, against 0.02 ms in place. The
        readers (the collector's parsers, node_exporter) read the zeros as numbers."""
        root = os.path.join(self.root, host)
        stats = "sys/class/net/eth0/statistics"
        _overwrite(root, f"{stats}/rx_packets", f"{_n(state.rx_packets)}\n")
        _overwrite(root, f"{stats}/rx_bytes", f"{_n(state.rx_packets * 106)}\n")
        _overwrite(root, "proc/net/dev", proc_net_dev("eth0", state.rx_packets,
                                                      state.rx_packets * 106, WIDTH))
        values = {"InDatagrams": state.delivered, "InErrors": state.drops,
                  "RcvbufErrors": state.drops}
        header = "Udp: " + " ".join(SNMP_UDP_FIELDS)
        row = "Udp: " + " ".join(_n(values.get(f, 0)) for f in SNMP_UDP_FIELDS)
        _overwrite(root, "proc/net/snmp",
                   f"Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 {_n(state.rx_packets)}\n"
                   f"{header}\n{row}\n")
        _overwrite(root, "run/fleet-sim/ethtool-S/eth0",
                   f"NIC statistics:\n     rx_packets: {_n(state.rx_packets)}\n"
                   "     rx_missed_errors: 0\n     rx_no_buffer_count: 0\n")


WIDTH = 20  # digits of the largest 64-bit counter


def _n(value: int) -> str:
    """A counter WIDTH digits wide, zero-padded: node_exporter splits /proc/net/snmp on single
    spaces (as the kernel writes it), so the padding cannot be spaces."""
    return f"{int(value):0{WIDTH}d}"


def _overwrite(root: str, rel: str, text: str) -> None:
    """Write `text` over a file of the same length in one write() at offset 0 (its length never
    changes, so a reader sees the old or the new text); a new file, or one of another length,
    is written whole and renamed into place."""
    path = os.path.join(root, rel)
    data = text.encode()
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        _write(root, rel, text)
        return
    try:
        if os.fstat(fd).st_size == len(data):
            os.pwrite(fd, data, 0)
            return
    finally:
        os.close(fd)
    _write(root, rel, text)
