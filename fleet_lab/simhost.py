"""The `sim` host backend: each server is a fake sysfs/procfs tree that follows its BIOS.

At every boot the tree is rewritten from the BootConfig: NUMA nodes, cpulists, SLIT distances,
memory per node, CPU packages, LLC, huge pages, a new boot_id, and NIC/UDP counters reset to zero
(a reboot resets kernel counters). The probe (--sysroot) and the counter collector read it with
the same code they use on a real host.

A server unlike its peers (say another DIMM population) is made by writing
`<root>/<host>.hardware.json` with {"cross_socket_distance": 31}: from its next boot its SLIT
shows that distance between sockets (21 otherwise), so the probe's modelled remote latency moves
while the topology stays right (what a fingerprint against like hosts catches).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
import time
import uuid
from typing import Dict, List, Optional

from fleet_lab.hosts import BootConfig, cpu_ranges
from fleet_lab.vm.persist import cmdline_from_grub

SNMP_UDP_FIELDS = ["InDatagrams", "NoPorts", "InErrors", "OutDatagrams", "RcvbufErrors",
                   "SndbufErrors", "InCsumErrors", "IgnoredMulti", "MemErrors"]
NET_STATS = ["rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors",
             "rx_dropped", "tx_dropped", "rx_missed_errors", "rx_fifo_errors", "rx_over_errors",
             "rx_crc_errors", "rx_frame_errors", "rx_length_errors", "multicast", "collisions"]


def _write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _cpulist(cpus: list[int]) -> str:
    return ",".join(cpu_ranges(cpus))


def write_tree(root: str, config: BootConfig, kernel: str = "6.1.0-lab-sim") -> None:
    """Write (or rewrite) the fake tree of one host for a boot with this configuration."""
    node_dir = os.path.join(root, "sys/devices/system/node")
    if os.path.isdir(node_dir):
        shutil.rmtree(node_dir)
    cpus = sorted(c for n in config.nodes for c in n.cpus)
    _write(root, "sys/devices/system/node/online", _cpulist([n.node_id for n in config.nodes])
           + "\n")
    _write(root, "sys/devices/system/node/possible",
           _cpulist([n.node_id for n in config.nodes]) + "\n")
    for node, row in zip(config.nodes, config.distances):
        base = f"sys/devices/system/node/node{node.node_id}"
        _write(root, f"{base}/cpulist", _cpulist(node.cpus) + "\n")
        _write(root, f"{base}/distance", " ".join(str(d) for d in row) + "\n")
        kb = node.memory_mb * 1024
        _write(root, f"{base}/meminfo",
               f"Node {node.node_id} MemTotal:       {kb} kB\n"
               f"Node {node.node_id} MemFree:        {kb * 3 // 4} kB\n"
               f"Node {node.node_id} MemUsed:        {kb // 4} kB\n")
        _write(root, f"{base}/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
        _write(root, f"{base}/hugepages/hugepages-2048kB/free_hugepages", "0\n")
    socket_of = {c: c // config.cores_per_socket for c in cpus}  # packages stay physical
    cpu_dir = os.path.join(root, "sys/devices/system/cpu")
    if os.path.isdir(cpu_dir):
        shutil.rmtree(cpu_dir)
    _write(root, "sys/devices/system/cpu/online", _cpulist(cpus) + "\n")
    _write(root, "sys/devices/system/cpu/possible", _cpulist(cpus) + "\n")
    for cpu in cpus:
        base = f"sys/devices/system/cpu/cpu{cpu}"
        _write(root, f"{base}/topology/physical_package_id", f"{socket_of[cpu]}\n")
        _write(root, f"{base}/topology/core_id", f"{cpu % config.cores_per_socket}\n")
        _write(root, f"{base}/cache/index3/level", "3\n")
        _write(root, f"{base}/cache/index3/type", "Unified\n")
        _write(root, f"{base}/cache/index3/size", "16384K\n")
    _write(root, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    _write(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
    _write(root, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "0\n")
    _write(root, "proc/sys/kernel/random/boot_id", f"{uuid.uuid4()}\n")
    _write(root, "proc/sys/kernel/osrelease", f"{kernel}\n")
    _write(root, "proc/sys/kernel/hostname", f"{config.host}\n")
    cpuinfo = "".join(
        f"processor\t: {c}\nvendor_id\t: GenuineIntel\nmodel name\t: Lab Xeon E5-2680 v4 (sim)\n"
        f"physical id\t: {socket_of[c]}\ncore id\t\t: {c % config.cores_per_socket}\n\n"
        for c in cpus)
    _write(root, "proc/cpuinfo", cpuinfo)
    if not os.path.exists(os.path.join(root, "etc/default/grub")):
        _write(root, "etc/default/grub", 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
               'GRUB_CMDLINE_LINUX=""\n')
    # the kernel boots with what GRUB's defaults say, as a server's boot loader passes them
    _write(root, "proc/cmdline", " ".join(["console=ttyS0"] + [
        f"fleet.{k}={v}" for k, v in (("snoop", config.snoop_mode),
                                      ("interleave", config.node_interleaving))] +
        grub_words(root)) + "\n")
    for key, value in SIM_SYSCTLS.items():  # runtime values reset at boot, then sysctl.d
        _write(root, "proc/sys/" + key.replace(".", "/"), f"{value}\n")
    _apply_sysctl_d(root)
    _write(root, "proc/uptime", "1.00 1.00\n")
    _write(root, "proc/net/tcp", "  sl  local_address rem_address   st tx_queue rx_queue\n")
    _write(root, "proc/net/tcp6", "  sl  local_address rem_address   st tx_queue rx_queue\n")
    irqs = [24 + i for i in range(2)]
    _write(root, "proc/interrupts", "           CPU0\n" + "".join(
        f" {irq}:          0   PCI-MSI  eth0-TxRx-{i}\n" for i, irq in enumerate(irqs)))
    for irq in irqs:
        _write(root, f"proc/irq/{irq}/smp_affinity_list", _cpulist(cpus) + "\n")
    reset_counters(root, cpus)


SIM_SYSCTLS = {"net.core.rmem_max": 212992, "net.core.rmem_default": 212992,
               "net.core.netdev_max_backlog": 1000, "net.core.netdev_budget": 300,
               "vm.swappiness": 60, "kernel.numa_balancing": 1}


def grub_words(root: str) -> List[str]:
    """The words GRUB's defaults give a normal boot entry (/etc/default/grub, then
    /etc/default/grub.d/*.cfg, as update-grub sources them)."""
    texts = []
    names = ["etc/default/grub"]
    drop_ins = os.path.join(root, "etc/default/grub.d")
    if os.path.isdir(drop_ins):
        names += [f"etc/default/grub.d/{n}" for n in sorted(os.listdir(drop_ins))
                  if n.endswith(".cfg")]
    for name in names:
        try:
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                texts.append(handle.read())
        except OSError:
            continue
    return cmdline_from_grub(texts)


def _apply_sysctl_d(root: str) -> None:
    """What systemd-sysctl does at boot: values from etc/sysctl.d/*.conf."""
    directory = os.path.join(root, "etc/sysctl.d")
    if not os.path.isdir(directory):
        return
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".conf"):
            continue
        with open(os.path.join(directory, name)) as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and not key.strip().startswith("#"):
                    rel = "proc/sys/" + key.strip().replace(".", "/")
                    if os.path.exists(os.path.join(root, rel)):
                        _write(root, rel, value.strip() + "\n")


def proc_net_dev(iface: str, rx_packets: int, rx_bytes: int, width: int = 0) -> str:
    """/proc/net/dev with one interface (its receive packets and bytes; drops live in the UDP
    counters of /proc/net/snmp here), each number `width` digits wide (zero-padded: the
    traffic model overwrites the file in place, and node_exporter reads zeros as the
    kernel's numbers)."""
    def n(value: int) -> str:
        return f"{int(value):0{width}d}"

    receive = [n(rx_bytes), n(rx_packets)] + [n(0)] * 6
    transmit = [n(0)] * 8
    return ("Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
            "errs drop fifo colls carrier compressed\n"
            f"  {iface}: " + " ".join(receive + transmit) + "\n")


def proc_stat(cpus: list[int], booted: float) -> str:
    """/proc/stat of a boot at `booted` (unix time): btime is what node_exporter exports as
    node_boot_time_seconds, which a counter window read from Prometheus checks for reboots."""
    zeros = " 0" * 10
    return (f"cpu {zeros}\n" + "".join(f"cpu{c}{zeros}\n" for c in cpus) +
            f"intr 0\nctxt 0\nbtime {int(booted)}\nprocesses 1\nprocs_running 1\n"
            "procs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n")


def reset_counters(root: str, cpus: list[int], iface: str = "eth0") -> None:
    for name in NET_STATS:
        _write(root, f"sys/class/net/{iface}/statistics/{name}", "0\n")
    _write(root, "proc/net/dev", proc_net_dev(iface, 0, 0))
    _write(root, "proc/net/netstat", "TcpExt: SyncookiesSent SyncookiesRecv\nTcpExt: 0 0\n")
    _write(root, "proc/stat", proc_stat(cpus, time.time()))
    _write(root, f"sys/class/net/{iface}/device/numa_node", "0\n")
    _write(root, "proc/net/softnet_stat", "".join(
        "00000000 " * 12 + f"{cpu:08x}\n" for cpu in cpus))  # kernel 6.1: 13 columns
    header = "Udp: " + " ".join(SNMP_UDP_FIELDS)
    _write(root, "proc/net/snmp",
           "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 0\n"
           f"{header}\nUdp: " + " ".join("0" for _ in SNMP_UDP_FIELDS) + "\n")
    _write(root, f"run/fleet-sim/ethtool-S/{iface}",
           "NIC statistics:\n     rx_packets: 0\n     rx_missed_errors: 0\n"
           "     rx_no_buffer_count: 0\n")


class SimBackend:
    """HostBackend writing one fake tree per host under `root`.

    `os_boot`: seconds the OS takes to start after power on (a real server's kernel and init:
    its SSH answers only then). Until then the host keeps the tree of its last boot (its old
    boot id) and is not up; 0 (the default): the tree is written at power on."""

    def __init__(self, root: str, os_boot: float = 0.0) -> None:
        self.root = root
        self.os_boot = max(0.0, float(os_boot))
        self._up: Dict[str, bool] = {}
        self._starting: Dict[str, threading.Timer] = {}
        self._lock = threading.Lock()
        os.makedirs(root, exist_ok=True)

    def sysroot(self, host: str) -> str:
        return os.path.join(self.root, host)

    def hardware_path(self, host: str) -> str:
        return os.path.join(self.root, f"{host}.hardware.json")

    def power_on(self, config: BootConfig) -> None:
        if self.os_boot <= 0:
            self._start(config)
            return
        timer = threading.Timer(self.os_boot, lambda: self._start(config, timer))
        timer.daemon = True
        with self._lock:
            self._up[config.host] = False
            earlier = self._starting.pop(config.host, None)
            self._starting[config.host] = timer
        if earlier is not None:
            earlier.cancel()
        timer.start()

    def _start(self, config: BootConfig, timer: Optional[threading.Timer] = None) -> None:
        """The OS is up: the tree of this boot (a new boot id), then booted(). `timer`: the
        power on's wait, which a later power on or a power off takes over."""
        with self._lock:
            if timer is not None:
                if self._starting.get(config.host) is not timer:
                    return
                del self._starting[config.host]
        root = self.sysroot(config.host)
        if os.path.exists(self.hardware_path(config.host)):
            with open(self.hardware_path(config.host)) as handle:
                cross = int(json.load(handle).get("cross_socket_distance", 21))
            sockets = [node.socket for node in config.nodes]
            config = dataclasses.replace(config, distances=[
                [d if sockets[a] == sockets[b] else cross for b, d in enumerate(row)]
                for a, row in enumerate(config.distances)])
        write_tree(root, config)
        _write(root, "run/fleet-sim/power", "on\n")
        self.booted(config)
        with self._lock:
            self._up[config.host] = True

    def booted(self, config: BootConfig) -> None:
        """Called once a boot's tree is written (subclasses: what else a boot resets)."""

    def power_off(self, host: str) -> None:
        with self._lock:
            starting = self._starting.pop(host, None)
            self._up[host] = False
        if starting is not None:
            starting.cancel()
        _write(self.sysroot(host), "run/fleet-sim/power", "off\n")

    def is_up(self, host: str) -> bool:
        with self._lock:
            return self._up.get(host, True)
