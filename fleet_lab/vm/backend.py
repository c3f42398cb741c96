"""VmBackend: lab servers as QEMU guests (the `vm` host backend).

State directory layout, per host (STATE/vms/HOST/):
  qemu.pid       {"pid", "start_ticks", "started"}: lets `cleanup_state_dir` stop a VM that a
                 crashed process left behind, and only that VM (checked against /proc)
  ports.json     {"ssh", "health", "udp"}: host ports, stable across power cycles
  persist.img    the VM's disk (raw, msdos label, GRUB, one ext4 partition), /persist in the guest
  console.log    serial console, appended at every power-on (with a separator line)
  qemu.log       QEMU's own messages
  boot.json      what the last power-on booted: settings, NUMA nodes, firmware words
  ssh_host_ed25519_key{,.pub}  the VM's own SSH host key, made here and put on its disk
and STATE/known_hosts: `[127.0.0.1]:<ssh port> <host key>` of every VM, what the lab's pack config
(ssh_known_hosts), its inventory and `ssh_argv` verify the guests' sshd against.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

from fleet_lab.hosts import BootConfig
from fleet_lab.vm import persist
from fleet_lab.vm.boot_gate import BootGate
from fleet_lab.vm.image import Image, default_cache_dir, ensure_image
from fleet_lab.vm.qemu import Ports, detect_accel, firmware_words, layout, qemu_argv
from fleet_rollout.errors import ConfigError, HostError

HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
STOP_TIMEOUT = 10.0


def _start_ticks(pid: int) -> Optional[int]:
    """Process start time (clock ticks since boot) from /proc, or None if there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def _is_our_qemu(pid: int, start_ticks: Optional[int], marker: str) -> bool:
    """True if pid is still the QEMU we started (same start time, our console path in argv)."""
    ticks = _start_ticks(pid)
    if ticks is None or (start_ticks is not None and ticks != start_ticks):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(marker.encode() in arg for arg in argv)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X")


def _stop_pid(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL; reap it if it is our child (also when adopted as a subreaper)."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
        try:
            os.kill(pid, signal.SIGCONT)  # one a boot gate left stopped acts on SIGTERM too
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    return
            except ChildProcessError:
                if _is_zombie(pid):
                    return
            time.sleep(0.05)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _host_dirs(state_dir: Path) -> List[Path]:
    vms = state_dir / "vms"
    return sorted(p for p in vms.iterdir() if p.is_dir()) if vms.is_dir() else []


def running_vms(state_dir: Path) -> Dict[str, int]:
    """{host: pid} of the live QEMU processes a lab state directory's pidfiles name."""
    found: Dict[str, int] = {}
    for host_dir in _host_dirs(Path(state_dir)):
        info = _read_pidfile(host_dir)
        if info and _is_our_qemu(info["pid"], info.get("start_ticks"), str(host_dir)) \
                and not _is_zombie(info["pid"]):
            found[host_dir.name] = info["pid"]
    return found


def _read_pidfile(host_dir: Path) -> Optional[dict]:
    try:
        info = json.loads((host_dir / "qemu.pid").read_text())
        int(info["pid"])
        return info
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cleanup_state_dir(state_dir: Path) -> List[str]:
    """Stop every VM of a lab state directory (e.g. after a crash), by pidfile. Returns hosts."""
    stopped: List[str] = []
    for host_dir in _host_dirs(Path(state_dir)):
        info = _read_pidfile(host_dir)
        if info is None:
            continue
        pid = int(info["pid"])
        if _is_our_qemu(pid, info.get("start_ticks"), str(host_dir)) and not _is_zombie(pid):
            _stop_pid(pid)
            stopped.append(host_dir.name)
        (host_dir / "qemu.pid").unlink(missing_ok=True)
    return stopped


# The guest's /init prints this on the console once sshd runs (fleet_lab/vm/guest/init).
SSHD_STARTED = "sshd started"
SERVICES_RUNNING = "services running"  # fleet-supervise, once the guest's services run
POWER_ON_MARK = "=== fleet-lab power-on"
# How long an up-probe waits for sshd's banner once the console says sshd runs. sshd re-execs
# itself for every connection, which takes seconds in a starved TCG guest: a probe that gave up
# after 2 s and came back 0.5 s later spawned sshd children faster than the guest could finish
# them, and in a CI run six guests whose consoles said "services running" never answered one.
BANNER_PATIENCE = 30.0


def last_boot(text: str) -> str:
    """The part of a console or QEMU log from the last power-on's separator line on."""
    return text[text.rfind(POWER_ON_MARK):]


def ssh_banner(port: int, timeout: float = 2.0) -> bool:
    """True if 127.0.0.1:port answers with an SSH banner (QEMU's forwarder accepts connections
    even while the guest has nothing listening, so a TCP connect alone proves nothing)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


class VmBackend:
    """HostBackend with one QEMU guest per lab server; see the module docstring for the state."""

    def __init__(self, state_dir: Path, cache_dir: Optional[Path] = None,
                 image: Optional[Image] = None, accel: Optional[str] = None,
                 port_base: Optional[int] = None, rcvbuf: Optional[int] = None,
                 progress: Optional[Callable[[str], None]] = None,
                 boot_slots: Optional[int] = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.image = image or ensure_image(self.cache_dir, progress)
        self.accel = accel or detect_accel(self.cache_dir, self.image.kernel, progress)
        self.port_base = port_base
        self.rcvbuf = rcvbuf
        self.progress = progress
        self._procs: Dict[str, subprocess.Popen] = {}
        self._lock = threading.RLock()
        # guests booting at once (default: the CPU count); the others wait, stopped
        self.boot_gate = BootGate(boot_slots, self._booted)
        (self.state_dir / "vms").mkdir(parents=True, exist_ok=True)
        atexit.register(self.close)

    # -- paths and ports -------------------------------------------------------------------

    def host_dir(self, host: str) -> Path:
        if not HOST_NAME.match(host or ""):
            raise ConfigError(f"host name {host!r}: letters, digits, '.', '_', '-' only "
                              "(at most 63 characters)")
        return self.state_dir / "vms" / host

    @property
    def key_path(self) -> Path:
        return self.image.key

    @property
    def boot_files(self) -> persist.BootFiles:
        """The image's kernel and initrd, for the VMs' /boot."""
        return persist.BootFiles(self.image.kernel, self.image.initrd, self.image.kernel_release,
                                 self.image.image_id)

    @property
    def known_hosts_path(self) -> Path:
        return self.state_dir / "known_hosts"

    def host_key(self, host: str) -> Path:
        """The VM's SSH host key (private half; `.pub` beside it), made on first use."""
        key = self.host_dir(host) / persist.HOST_KEY_NAME
        pub = key.with_name(key.name + ".pub")
        if key.exists() and pub.exists():
            return key
        key.parent.mkdir(parents=True, exist_ok=True)
        for stale in (key, pub):
            stale.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                        f"fleet-lab host {host}", "-f", str(key)], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)
        key.chmod(0o600)
        return key

    def write_known_hosts(self) -> Path:
        """STATE/known_hosts with every VM that has ports and a host key."""
        lines = []
        for host_dir in _host_dirs(self.state_dir):
            pub = host_dir / (persist.HOST_KEY_NAME + ".pub")
            ports = host_dir / "ports.json"
            if pub.exists() and ports.exists():
                port = int(json.loads(ports.read_text())["ssh"])
                key_type, key_data = pub.read_text().split()[:2]
                lines.append(f"[127.0.0.1]:{port} {key_type} {key_data}\n")
        tmp = self.known_hosts_path.with_name("known_hosts.tmp")
        tmp.write_text("".join(lines))
        tmp.replace(self.known_hosts_path)
        return self.known_hosts_path

    def ports(self, host: str) -> Ports:
        """The host's forwarded ports (allocated on first use, then kept in ports.json)."""
        host_dir = self.host_dir(host)
        host_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "vms" / ".ports.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return self._ports_locked(host_dir)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _ports_locked(self, host_dir: Path) -> Ports:
        path = host_dir / "ports.json"
        try:
            data = json.loads(path.read_text())
            return Ports(int(data["ssh"]), int(data["health"]), int(data["udp"]),
                         int(data["exporter"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        taken = set()
        for other in _host_dirs(self.state_dir):
            try:
                taken.update(int(v) for v in json.loads((other / "ports.json").read_text())
                             .values())
            except (OSError, ValueError, TypeError, AttributeError):
                continue
        picked: List[int] = []
        candidate = self.port_base
        while len(picked) < 4:  # ssh, health, udp (a UDP port), exporter
            kind = socket.SOCK_DGRAM if len(picked) == 2 else socket.SOCK_STREAM
            if candidate is None:
                port = _free_port(kind, 0)
            else:
                port = candidate if _free_port(kind, candidate) else 0
                candidate += 1
                if candidate > 65535:
                    raise HostError(f"no free ports from {self.port_base} up",
                                    host=host_dir.name)
            if port and port not in taken and port not in picked:
                picked.append(port)
        ports = Ports(*picked)
        path.write_text(json.dumps(ports.as_dict()))
        return ports

    def endpoints(self) -> Dict[str, Dict[str, int]]:
        """{host: {"ssh", "health", "udp"}} of every host that has ports."""
        found: Dict[str, Dict[str, int]] = {}
        for host_dir in _host_dirs(self.state_dir):
            if (host_dir / "ports.json").exists():
                found[host_dir.name] = self.ports(host_dir.name).as_dict()
        return found

    def disk(self, host: str) -> Path:
        return self.host_dir(host) / "persist.img"

    def console_log(self, host: str) -> Path:
        return self.host_dir(host) / "console.log"

    # -- HostBackend --------------------------------------------------------------------------

    def power_on(self, config: BootConfig) -> None:
        """Start the guest with these BIOS settings in effect (returns at once).

        A guest that is already running is hard-reset first, as a BMC's ForceRestart would."""
        host = config.host
        host_dir = self.host_dir(host)
        with self._lock:
            self._stop(host)
            host_dir.mkdir(parents=True, exist_ok=True)
            ports = self.ports(host)
            disk = self.disk(host)
            persist.ensure_disk(disk, self.boot_files, self.progress)
            repaired = persist.check_disk(disk)
            persist.refresh_boot(disk, self.boot_files)
            persist.install_host_key(disk, self.host_key(host))
            self.write_known_hosts()
            firmware = firmware_words(config, self.rcvbuf)
            console = self.console_log(host)
            argv = qemu_argv(config, disk, console, ports, self.accel, firmware)
            nodes, distances = layout(config)
            boot = {"host": host, "time": time.time(), "accel": self.accel,
                    "image": self.image.image_id, "snoop_mode": config.snoop_mode,
                    "node_interleaving": config.node_interleaving, "extra": config.extra,
                    "nodes": [asdict(n) for n in nodes], "distances": distances,
                    "firmware": firmware, "ports": ports.as_dict()}
            (host_dir / "boot.json").write_text(json.dumps(boot, indent=2))
            with open(console, "a") as out:
                out.write(f"\n{POWER_ON_MARK} {time.strftime('%Y-%m-%d %H:%M:%S')} "
                          f"snoop={config.snoop_mode} interleave={config.node_interleaving} "
                          f"nodes={len(nodes)} accel={self.accel}\n")
                if repaired:
                    out.write(f"=== e2fsck repaired the persistent disk:\n{repaired}\n")
            # a session of its own: where the kernel groups CPU time by session (autogroups,
            # CONFIG_SCHED_AUTOGROUP), each guest gets a share of its own instead of all of a
            # lab's guests sharing the one of the process that started them
            with open(host_dir / "qemu.log", "ab") as qlog:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog,
                                        stderr=subprocess.STDOUT, close_fds=True,
                                        start_new_session=True)
            self._procs[host] = proc
            self.boot_gate.admit(host, proc.pid)
            pidfile = {"pid": proc.pid, "start_ticks": _start_ticks(proc.pid),
                       "started": time.time()}
            tmp = host_dir / "qemu.pid.tmp"
            tmp.write_text(json.dumps(pidfile))
            tmp.replace(host_dir / "qemu.pid")

    def power_off(self, host: str) -> None:
        """Hard power-off: QEMU is terminated (then killed) and reaped."""
        self.host_dir(host)
        with self._lock:
            self._stop(host)

    def is_up(self, host: str) -> bool:
        """True once the guest's sshd answers on the host's SSH port. No connection is made
        before the console of this power-on says sshd runs: until then QEMU's forwarder would
        accept and hold it, and once it runs the probe waits for its banner (BANNER_PATIENCE)
        instead of leaving a half-started sshd child behind."""
        with self._lock:
            proc = self._procs.get(host)
            if proc is None or proc.poll() is not None:
                return False
            port = self.ports(host).ssh
        if SSHD_STARTED not in self._last_boot_console(host):
            return False
        return ssh_banner(port, BANNER_PATIENCE)

    def _booted(self, host: str) -> bool:
        """For the boot gate (no lock taken): this power-on's guest runs its services, or its
        QEMU is gone."""
        proc = self._procs.get(host)
        if proc is None or proc.poll() is not None:
            return True
        return SERVICES_RUNNING in self._last_boot_console(host)

    def _last_boot_console(self, host: str) -> str:
        """The console output of the last power-on (after its separator line)."""
        try:
            return last_boot((self.host_dir(host) / "console.log").read_text(errors="replace"))
        except OSError:
            return ""

    # -- more than the protocol ---------------------------------------------------------------

    def is_running(self, host: str) -> bool:
        with self._lock:
            proc = self._procs.get(host)
            return proc is not None and proc.poll() is None

    def hosts(self) -> List[str]:
        with self._lock:
            return sorted(h for h, p in self._procs.items() if p.poll() is None)

    def wait_up(self, hosts: Iterable[str], timeout: float = 180.0) -> Dict[str, float]:
        """Block until every host is up; {host: seconds waited}. HostError names the hosts
        that died or did not come up, with the end of their console log."""
        pending = list(hosts)
        started = time.monotonic()
        done: Dict[str, float] = {}
        while pending:
            for host in list(pending):
                if self.is_up(host):
                    done[host] = round(time.monotonic() - started, 1)
                    pending.remove(host)
                elif not self.is_running(host):
                    raise HostError("QEMU exited before the guest came up:\n"
                                    + self.diagnostics(host), host=host)
            if pending and time.monotonic() - started > timeout:
                raise HostError(f"not up after {timeout:.0f} s:\n"
                                + self.diagnostics(pending[0]), host=",".join(pending))
            if pending:
                time.sleep(0.25)
        return done

    def diagnostics(self, host: str, lines: int = 15) -> str:
        """The end of qemu.log and of the last boot's console (its panic line, if any)."""
        parts = []
        for name in ("qemu.log", "console.log"):
            path = self.host_dir(host) / name
            if not path.exists():
                continue
            text = path.read_text(errors="replace")
            boot_lines = last_boot(text).splitlines()
            panic = [line for line in boot_lines if "Kernel panic" in line]
            tail = boot_lines[-lines:]
            parts.append(f"--- {path}\n" + "\n".join(panic[:1] + tail))
        return "\n".join(parts)

    def ssh_argv(self, host: str) -> List[str]:
        """ssh command prefix that logs into the guest as root with the lab key."""
        return ["ssh", "-i", str(self.image.key), "-p", str(self.ports(host).ssh),
                "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts_path}",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15",
                "root@127.0.0.1"]

    def ssh(self, host: str, command: str, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a shell command in the guest; HostError if it fails (check) or times out."""
        try:
            result = subprocess.run(self.ssh_argv(host) + [command], capture_output=True,
                                    text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise HostError(f"ssh command timed out after {timeout:.0f} s: {command}",
                            host=host) from exc
        if check and result.returncode != 0:
            raise HostError(f"ssh command failed (exit {result.returncode}): {command}: "
                            f"{result.stderr.strip()[-300:]}", host=host)
        return result

    def close(self) -> None:
        """Power off every VM this backend started."""
        with self._lock:
            for host in list(self._procs):
                self._stop(host)
        try:
            atexit.unregister(self.close)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> VmBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stop(self, host: str) -> None:
        host_dir = self.state_dir / "vms" / host
        proc = self._procs.pop(host, None)
        self.boot_gate.forget(host)  # continued if it waited: a stopped QEMU ignores SIGTERM
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        elif proc is None:
            # started by another backend object or a process that crashed: use the pidfile
            info = _read_pidfile(host_dir)
            if info and _is_our_qemu(int(info["pid"]), info.get("start_ticks"), str(host_dir)):
                _stop_pid(int(info["pid"]))
        (host_dir / "qemu.pid").unlink(missing_ok=True)


def _free_port(kind: int, port: int) -> int:
    """Bind 127.0.0.1:port (0: any) with this socket type; the port if it was free, else 0."""
    with socket.socket(socket.AF_INET, kind) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return 0
        return int(sock.getsockname()[1])
