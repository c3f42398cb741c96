"""Looking at processes by PID from /proc: the tests stop only what they started, by PID."""
from __future__ import annotations

import os
import time
from typing import Callable, Iterator, List, Tuple


def gone(pid: int) -> bool:
    """The process has exited (or is a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_for(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def command_lines() -> Iterator[Tuple[int, List[str]]]:
    """(pid, argv) of every process this user can read."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        yield int(entry), argv
