"""Child processes for the ChatOps lab: start in their own process group, wait, stop by PID."""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def spawn(argv: Sequence[str], log_path: Path, env: Optional[Dict[str, str]] = None,
          cwd: Optional[Path] = None) -> int:
    """Start `argv` in a new session (own process group), stdout+stderr appended to `log_path`.

    Returns the PID, which is also the process group id. stdin is /dev/null.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            list(argv), stdin=devnull, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=str(cwd) if cwd else None, start_new_session=True, close_fds=True)
    return proc.pid


def _reap(pid: int) -> bool:
    """True when `pid` is gone (reaping it if it is our exited child)."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child: fall through to the signal probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie that is not our child still answers kill(0); /proc tells.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    return not _reap(pid)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except OSError as e:  # pragma: no cover - EPERM on a foreign group
        if e.errno != errno.EPERM:
            raise
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid: Optional[int], timeout: float = 10.0) -> bool:
    """SIGTERM the process group led by `pid`, SIGKILL it after `timeout` s.

    Returns True when the process is gone (also when it was gone already).
    """
    if not pid or _reap(pid):
        if pid:
            _signal_group(pid, signal.SIGKILL)  # leftovers of the group, if any
        return True
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _reap(pid):
            _signal_group(pid, signal.SIGKILL)
            return True
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if _reap(pid):
            return True
        time.sleep(0.05)
    return False


def wait_tcp(host: str, port: int, timeout: float, pid: Optional[int] = None) -> None:
    """Wait until host:port accepts a TCP connection; fail early if `pid` died."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        if pid is not None and _reap(pid):
            raise RuntimeError(f"process {pid} exited before {host}:{port} accepted connections")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            last = e
            time.sleep(0.05)
    raise TimeoutError(f"{host}:{port} did not accept connections within {timeout}s ({last})")


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def write_pid(path: Path, pid: int) -> None:
    path.write_text(f"{pid}\n", encoding="ascii")


def read_pid(path: Path) -> Optional[int]:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
