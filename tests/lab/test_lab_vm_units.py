"""The VM lab's pure parts: drop model, GRUB defaults parsing, firmware words, QEMU argv.

No VM boots here (see test_lab_vm_boot.py and test_lab_vm_grub.py); the disk tests (in
test_lab_vm_grub.py) use the real mkfs.ext4, debugfs and grub-mkimage.
"""
from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from net_support import LoopbackListener

from fleet_lab.hosts import boot_config
from fleet_lab.vm import persist
from fleet_lab.vm.backend import POWER_ON_MARK, SSHD_STARTED, VmBackend
from fleet_lab.vm.drop_model import expected_drop_fraction, receive_rate
from fleet_lab.vm.qemu import FW_CFG_NAME, Ports, firmware_words, numa_args, qemu_argv
from fleet_rollout.errors import ConfigError


def test_receive_rate_follows_snoop_mode_and_slowdown() -> None:
    assert receive_rate("home") == 4000
    assert receive_rate("early") == 3000
    assert receive_rate("cod") == 3500
    assert receive_rate("osb") == 3200
    assert receive_rate("home", "enabled") == 4000
    assert receive_rate("home", "disabled", {"LabReceiveSlowdown": "Enabled"}) == 1000
    assert receive_rate("early", "disabled", {"LabReceiveSlowdown": "Disabled"}) == 3000
    with pytest.raises(ValueError, match="allowed values are cod, early, home, osb"):
        receive_rate("turbo")
    with pytest.raises(ValueError, match="node_interleaving"):
        receive_rate("home", "sometimes")


def test_expected_drop_fraction() -> None:
    assert expected_drop_fraction(3500, 3000) == pytest.approx(1 / 7)
    assert expected_drop_fraction(2000, 4000) == 0.0
    assert expected_drop_fraction(0, 4000) == 0.0


def test_grub_defaults_parse_like_sh() -> None:
    texts = [
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
        "# GRUB_CMDLINE_LINUX=\"ignored\"\n"
        'GRUB_CMDLINE_LINUX="hugepages=16 isolcpus=2,3"\n',
        "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX transparent_hugepage=never\"  # comment\n"
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet $literal'\n",
    ]
    env = persist.parse_grub_defaults(texts)
    assert env["GRUB_CMDLINE_LINUX"] == "hugepages=16 isolcpus=2,3 transparent_hugepage=never"
    assert env["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet $literal"
    assert persist.cmdline_from_grub(texts) == [
        "hugepages=16", "isolcpus=2,3", "transparent_hugepage=never", "quiet", "$literal"]
    assert persist.cmdline_from_grub(["GRUB_CMDLINE_LINUX=mitigations=off\n"]) == [
        "mitigations=off"]


def test_firmware_words_carry_the_bios_settings() -> None:
    config = boot_config("web-01", "early", "disabled", extra={"LabReceiveSlowdown": "Enabled"})
    assert firmware_words(config).split() == [
        "fleet.host=web-01", "fleet.snoop=early", "fleet.interleave=disabled", "fleet.rate=750",
        "fleet.slowdown=1"]
    # the receiver's buffer: only when the lab asks for one
    assert "fleet.rcvbuf" not in firmware_words(config)
    assert firmware_words(config, rcvbuf=212992).split()[-1] == "fleet.rcvbuf=212992"


def _numa(args: list) -> list:
    return [args[i + 1] for i, a in enumerate(args) if a == "-numa"]


def test_numa_args_per_bios_setting() -> None:
    two = _numa(numa_args(boot_config("h", "home", "disabled")))
    assert two == ["node,nodeid=0,cpus=0-1,memdev=mem0", "node,nodeid=1,cpus=2-3,memdev=mem1",
                   "dist,src=0,dst=1,val=21", "dist,src=1,dst=0,val=21"]
    one = _numa(numa_args(boot_config("h", "home", "enabled")))
    assert one == ["node,nodeid=0,cpus=0-3,memdev=mem0"]
    cod = _numa(numa_args(boot_config("h", "cod", "disabled")))
    assert cod[:4] == ["node,nodeid=0,cpus=0,memdev=mem0", "node,nodeid=1,cpus=1,memdev=mem1",
                       "node,nodeid=2,cpus=2,memdev=mem2", "node,nodeid=3,cpus=3,memdev=mem3"]
    assert "dist,src=0,dst=1,val=11" in cod and "dist,src=0,dst=2,val=21" in cod
    args = numa_args(boot_config("h", "cod", "disabled", memory_mb=1024))
    assert args.count("memory-backend-ram,id=mem3,size=256M") == 1


def test_qemu_argv_forwards_loopback_only_and_sizes_the_vm(tmp_path: Path) -> None:
    config = boot_config("web-01", "home", "disabled", sockets=2, cores_per_socket=4,
                         memory_mb=1024)
    argv = qemu_argv(config, tmp_path / "disk", tmp_path / "console.log",
                     Ports(2201, 8001, 9001, 9101), "tcg", "fleet.host=web-01")
    joined = " ".join(argv)
    # the guest boots from its disk (GRUB); the lab passes no kernel and no command line
    assert not {"-kernel", "-initrd", "-append"} & set(argv)
    # the guest's kernel writes through virtio-blk; GRUB reads an AHCI port of the same disk
    # (its writes discarded), the one the firmware boots
    assert "virtio-blk-pci,drive=persist" in argv
    assert "ide-hd,drive=bootport,bus=ahci.0,bootindex=0" in argv
    assert (f"if=none,id=bootport,file={tmp_path / 'disk'},format=raw,snapshot=on,"
            "file.locking=off") in argv
    assert argv[argv.index("-fw_cfg") + 1] == f"name={FW_CFG_NAME},string=fleet.host=web-01"
    assert "-smp 8,sockets=2,cores=4,threads=1" in joined
    assert "-m 1024M" in joined
    netdev = argv[argv.index("-netdev") + 1]
    assert netdev == ("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:2201-:22,"
                      "hostfwd=tcp:127.0.0.1:8001-:8080,hostfwd=udp:127.0.0.1:9001-:9999,"
                      "hostfwd=tcp:127.0.0.1:9101-:9100")
    assert "-accel tcg,thread=single" in joined and "-no-reboot" not in joined
    with pytest.raises(ConfigError, match="web-01: memory_mb 256"):
        qemu_argv(boot_config("web-01", "home", "disabled", memory_mb=256), tmp_path / "d",
                  tmp_path / "c", Ports(1, 2, 3, 4), "tcg", "")


class _SlowSshd(LoopbackListener):
    """Answers every connection with an SSH banner after `delay` seconds, as a starved guest's
    sshd does (it re-execs itself per connection); it counts the connections it was given."""

    def __init__(self, port: int, delay: float) -> None:
        self.delay = delay
        super().__init__(port)

    def handle(self, conn: socket.socket) -> None:
        time.sleep(self.delay)
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")


def test_up_probe_waits_for_the_console_then_for_a_slow_banner(tmp_path: Path) -> None:
    """is_up makes no connection before this power-on's console says sshd runs, then waits for
    a banner slower than the old 2 s probe gave it. QEMU cannot boot here: a `sleep` process
    stands in for it, and a loopback listener for the guest's forwarded sshd."""
    backend = VmBackend(tmp_path, image=SimpleNamespace(key=tmp_path / "key"), accel="tcg")
    backend._procs["vm-a"] = subprocess.Popen(["sleep", "60"])
    sshd = _SlowSshd(backend.ports("vm-a").ssh, delay=3.0)
    console = backend.host_dir("vm-a") / "console.log"
    try:
        console.write_text(f"\n{POWER_ON_MARK} 1\nfleet-lab: [3.1] init\n")
        assert backend.is_up("vm-a") is False
        console.write_text(f"\n{POWER_ON_MARK} 1\nfleet-lab: [46.5] {SSHD_STARTED}, starting"
                           f" services\n\n{POWER_ON_MARK} 2\nfleet-lab: [2.0] init\n")
        assert backend.is_up("vm-a") is False  # the previous boot's sshd does not count
        assert sshd.accepted == 0
        with console.open("a") as out:
            out.write(f"fleet-lab: [40.2] host=vm-a {SSHD_STARTED}, starting services\n")
        assert backend.is_up("vm-a") is True
        assert sshd.accepted == 1
    finally:
        sshd.close()
        backend.close()


def _state(pid: int) -> str:
    """The process's state letter (T: stopped)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    state = _state(pid)
    while (state == "T") != (want == "T") and time.monotonic() < deadline:
        time.sleep(0.05)
        state = _state(pid)
    return state


def test_boot_gate_boots_two_at_a_time_and_a_waiting_guest_can_be_stopped(
        tmp_path: Path) -> None:
    """Guests powered on while `slots` others boot start stopped and are continued, in
    power-on order, as booting ones come up; a waiting one that is powered off is continued
    first, so SIGTERM ends it. `sleep` processes stand in for QEMU (none boots here)."""
    from fleet_lab.vm.boot_gate import BootGate

    booted: set = set()
    gate = BootGate(2, lambda host: host in booted)
    procs = {f"vm-{i}": subprocess.Popen(["sleep", "60"]) for i in range(5)}
    try:
        admitted = [gate.admit(host, proc.pid) for host, proc in procs.items()]
        assert admitted == [True, True, False, False, False]
        assert gate.booting() == ["vm-0", "vm-1"] and gate.waiting() == ["vm-2", "vm-3", "vm-4"]
        assert [_wait_state(procs[h].pid, "T") for h in ("vm-2", "vm-3", "vm-4")] == ["T"] * 3
        assert _state(procs["vm-0"].pid) != "T"
        booted.add("vm-1")  # one is up: the first waiting guest takes its slot
        assert _wait_state(procs["vm-2"].pid, "S") != "T"
        assert gate.booting() == ["vm-0", "vm-2"] and gate.waiting() == ["vm-3", "vm-4"]
        gate.forget("vm-4")  # powered off while it waits: continued, so SIGTERM ends it
        procs["vm-4"].terminate()
        assert procs["vm-4"].wait(timeout=5) == -15
        assert _state(procs["vm-3"].pid) == "T"  # still no free slot
        booted.update(("vm-0", "vm-2"))
        assert _wait_state(procs["vm-3"].pid, "S") != "T"
        assert gate.waiting() == []
    finally:
        for proc in procs.values():
            gate.forget(next(h for h, p in procs.items() if p is proc))
            proc.kill()
            proc.wait()


def test_a_stopped_guest_is_stopped_by_its_backend_too(tmp_path: Path) -> None:
    """VmBackend's power-off of a guest that waits at the boot gate ends it (SIGTERM to a
    stopped process would hang until the kill)."""
    backend = VmBackend(tmp_path, image=SimpleNamespace(key=tmp_path / "key"), accel="tcg",
                        boot_slots=1)
    for host in ("vm-a", "vm-b"):
        backend._procs[host] = proc = subprocess.Popen(["sleep", "60"])
        backend.boot_gate.admit(host, proc.pid)
    waiting = backend._procs["vm-b"]
    try:
        assert backend.boot_gate.waiting() == ["vm-b"]
        assert _wait_state(waiting.pid, "T") == "T"
        started = time.monotonic()
        backend.power_off("vm-b")
        assert waiting.poll() == -15 and time.monotonic() - started < 5
    finally:
        backend.close()
