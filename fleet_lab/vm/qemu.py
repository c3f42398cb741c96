"""QEMU command lines for lab servers, and the KVM-or-TCG decision.

/dev/kvm exists on the project's machines but a guest under it hangs (nested virtualisation); a
tiny KVM_RUN of one `hlt` even succeeds there, so only a real test boot tells: boot the lab kernel
under KVM without a root filesystem and expect its panic ("VFS: Unable to mount root fs") within
a few seconds. The answer is cached per QEMU version and host kernel.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fleet_lab.hosts import BootConfig, NumaNode, cpu_ranges, numa_layout
from fleet_lab.vm.drop_model import receive_rate, slowdown_active
from fleet_rollout.errors import ConfigError

QEMU = "qemu-system-x86_64"
GUEST_SSH, GUEST_HEALTH, GUEST_UDP, GUEST_EXPORTER = 22, 8080, 9999, 9100
KVM_TEST_SECONDS = 20.0
MIN_MEMORY_MB = 512  # the guest runs from RAM: about 135 MB of root tree plus the kernel
# The BIOS settings the guest's services read (fleet.host, fleet.snoop, ...) reach it as firmware
# data, as a server's BIOS settings do, not on its kernel command line (which is GRUB's, from the
# disk): a QEMU fw_cfg file, /sys/firmware/qemu_fw_cfg/by_name/FW_CFG_NAME/raw in the guest.
FW_CFG_NAME = "opt/org.fleet-lab/boot"
# TCG runs all of a guest's vCPUs on one host thread, in turn (thread=single), not one thread
# each (multi): the lab runs several guests on a host of few cores, where a guest's threads
# mostly waited on each other (a vCPU spinning for another that the host had not scheduled).
# Measured on one guest: boot until its services run 18.3 host CPU-s against 20.5-23.0, under
# the demo's traffic 0.081 host cores against 0.090. A vCPU that spins with PAUSE (the guest
# kernel's locks, the probe's core-to-core ping-pong) hands the thread to the next one at once.
TCG_THREAD = "single"
# No tsc=reliable on the kernel command line (persist.BASE_CMDLINE has the words every guest
# boots with): with several vCPUs under TCG the kernel finds the TSCs "unsynchronized" and
# keeps time with the emulated HPET (0.11 host cores for an idle guest with the demo's traffic,
# 0.093 with the TSC). Forced onto the TSC, a guest in a VM demo run had its clock run up to 11x
# fast and jump (uptime 4,767 s five minutes after its boot): its counter windows covered a
# fraction of their time. The kernel's own choice, with its clocksource watchdog, stands.

@dataclass(frozen=True)
class Ports:
    ssh: int
    health: int
    udp: int
    exporter: int  # the guest's node_exporter (fleet_lab.monitoring scrapes it)

    def as_dict(self) -> Dict[str, int]:
        return {"ssh": self.ssh, "health": self.health, "udp": self.udp,
                "exporter": self.exporter}


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise ConfigError(f"the VM lab needs {QEMU} (Debian package qemu-system-x86)")
    return path


def qemu_version() -> str:
    out = subprocess.run([qemu_binary(), "--version"], capture_output=True, text=True)
    return (out.stdout.splitlines() or ["unknown"])[0].strip()


def _kvm_boots(kernel: Path, seconds: float) -> bool:
    """Boot `kernel` under KVM with no root fs; True if it reaches its panic in time."""
    with tempfile.TemporaryDirectory(prefix="fleet-kvm-test-") as tmp:
        log = Path(tmp) / "console.log"
        cmd = [qemu_binary(), "-nodefaults", "-no-user-config", "-display", "none",
               "-accel", "kvm", "-cpu", "host", "-smp", "2", "-m", "256", "-no-reboot",
               "-serial", f"file:{log}", "-kernel", str(kernel),
               "-append", "console=ttyS0 panic=-1 quiet"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return False
        text = log.read_text(errors="replace") if log.exists() else ""
        return "Kernel panic" in text or "Unable to mount root" in text


def detect_accel(cache: Path, kernel: Path, progress=None) -> str:
    """'kvm' if KVM really runs a guest here, else 'tcg'. FLEET_ROLLOUT_LAB_ACCEL overrides."""
    forced = os.environ.get("FLEET_ROLLOUT_LAB_ACCEL", "").strip().lower()
    if forced in ("kvm", "tcg"):
        return forced
    if forced:
        raise ConfigError(f"FLEET_ROLLOUT_LAB_ACCEL={forced!r}: allowed values are kvm, tcg")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    key = {"qemu": qemu_version(), "host_kernel": os.uname().release, "guest": kernel.name}
    cache_file = cache / "accel.json"
    try:
        cached = json.loads(cache_file.read_text())
        if cached.get("key") == key:
            return str(cached["accel"])
    except (OSError, ValueError, KeyError):
        pass
    if progress:
        progress("fleet-lab: testing whether KVM runs guests here "
                 f"(up to {KVM_TEST_SECONDS:.0f} s)")
    started = time.monotonic()
    accel = "kvm" if _kvm_boots(kernel, KVM_TEST_SECONDS) else "tcg"
    cache.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps({"key": key, "accel": accel, "tested": time.time(),
                                      "seconds": round(time.monotonic() - started, 1)}))
    if progress:
        progress(f"fleet-lab: accelerator {accel}")
    return accel


def _cpu_ranges(cpus: Sequence[int]) -> List[str]:
    """[0,1,2,5] -> ['0-2', '5'] (one QEMU cpus= value each)."""
    return cpu_ranges(list(cpus))


def layout(config: BootConfig) -> tuple[List[NumaNode], List[List[int]]]:
    """The config's NUMA nodes and distances (computed from the settings if it carries none)."""
    if config.nodes:
        return list(config.nodes), [list(row) for row in config.distances]
    return numa_layout(config.sockets, config.cores_per_socket, config.memory_mb,
                       config.snoop_mode, config.node_interleaving)


def numa_args(config: BootConfig) -> List[str]:
    nodes, distances = layout(config)
    cpus = config.sockets * config.cores_per_socket
    seen = sorted(c for node in nodes for c in node.cpus)
    if seen != list(range(cpus)):
        raise ConfigError(f"NUMA nodes cover CPUs {seen}, expected 0-{cpus - 1}",
                          host=config.host)
    if distances and (len(distances) != len(nodes)
                      or any(len(row) != len(nodes) for row in distances)):
        raise ConfigError(f"distances must be {len(nodes)}x{len(nodes)}", host=config.host)
    args: List[str] = []
    for node in nodes:
        args += ["-object", f"memory-backend-ram,id=mem{node.node_id},size={node.memory_mb}M"]
        spec = f"node,nodeid={node.node_id}"
        for cpu_range in _cpu_ranges(node.cpus):
            spec += f",cpus={cpu_range}"
        args += ["-numa", spec + f",memdev=mem{node.node_id}"]
    for a, row in enumerate(distances):
        for b, value in enumerate(row):
            if a != b:
                args += ["-numa", f"dist,src={nodes[a].node_id},dst={nodes[b].node_id},val={value}"]
    return args


def firmware_words(config: BootConfig, rcvbuf: Optional[int] = None) -> str:
    """The fleet.* words the guest's services read from the firmware: host name, the BIOS
    settings and the receiver rate they give (the lab's drop model)."""
    rate = receive_rate(config.snoop_mode, config.node_interleaving, config.extra)
    words = [f"fleet.host={config.host}", f"fleet.snoop={config.snoop_mode}",
             f"fleet.interleave={config.node_interleaving}", f"fleet.rate={rate}"]
    if slowdown_active(config.extra):
        words.append("fleet.slowdown=1")
    if rcvbuf:
        words.append(f"fleet.rcvbuf={int(rcvbuf)}")
    return " ".join(words)


def boot_port_args(disk: Path) -> List[str]:
    """The same disk on an AHCI port the firmware boots from, its writes (none: GRUB only
    reads) kept in a temporary overlay QEMU discards (snapshot=on; an IDE disk cannot be
    read-only), so the virtio-blk port is the only one that writes the image. GRUB has no virtio
    driver: through the BIOS (int 13h) it took 5-8 s of a TCG guest's boot to read the kernel
    and initrd, with its own ahci driver under 2 s. The guest's kernel (Debian's cloud kernel)
    has no AHCI driver and uses the virtio-blk port. GRUB reads before
    the kernel writes, from the host's page cache, so it reads what the last boot wrote (the
    port takes no image lock: the virtio-blk one holds it)."""
    return ["-drive", f"if=none,id=bootport,file={disk},format=raw,snapshot=on,"
                      "file.locking=off",
            "-device", "ahci,id=ahci",
            "-device", "ide-hd,drive=bootport,bus=ahci.0,bootindex=0"]


def qemu_argv(config: BootConfig, disk: Path, console: Path, ports: Ports, accel: str,
              firmware: str) -> List[str]:
    """The guest boots from its disk (SeaBIOS -> GRUB in the MBR -> the kernel grub.cfg names,
    read through GRUB's ahci driver: boot_port_args),
    with the BIOS settings as its NUMA topology and `firmware` as fw_cfg data."""
    nodes, _ = layout(config)
    memory = sum(node.memory_mb for node in nodes)
    if memory < MIN_MEMORY_MB:
        raise ConfigError(f"memory_mb {memory}: the lab guest needs at least {MIN_MEMORY_MB} "
                          "(it runs from RAM)", host=config.host)
    cpus = config.sockets * config.cores_per_socket
    hostfwd = (f"hostfwd=tcp:127.0.0.1:{ports.ssh}-:{GUEST_SSH},"
               f"hostfwd=tcp:127.0.0.1:{ports.health}-:{GUEST_HEALTH},"
               f"hostfwd=udp:127.0.0.1:{ports.udp}-:{GUEST_UDP},"
               f"hostfwd=tcp:127.0.0.1:{ports.exporter}-:{GUEST_EXPORTER}")
    accel_args = (["-accel", "kvm", "-cpu", "host"] if accel == "kvm"
                  else ["-accel", f"tcg,thread={TCG_THREAD}", "-cpu", "max"])
    return [
        qemu_binary(), "-name", f"fleet-lab-{config.host}",
        "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
        "-monitor", "none", "-machine", "pc",
        *accel_args,
        "-smp", f"{cpus},sockets={config.sockets},cores={config.cores_per_socket},threads=1",
        "-m", f"{memory}M",
        *numa_args(config),
        "-fw_cfg", f"name={FW_CFG_NAME},string={firmware}",
        "-netdev", f"user,id=net0,restrict=on,{hostfwd}",
        # romfile=: no network-boot option ROM (iPXE), which the firmware would load and run at
        # every power-on under TCG; the guest boots from its disk
        "-device", "virtio-net-pci,netdev=net0,romfile=",
        "-drive", f"if=none,id=persist,file={disk},format=raw,cache=writeback",
        "-device", "virtio-blk-pci,drive=persist",
        *boot_port_args(disk),
        "-chardev", f"file,id=console,path={console},append=on",
        "-serial", "chardev:console",
    ]
