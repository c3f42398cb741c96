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


# CPU shares in a test run: the QEMU guests (TCG, two cores for a dozen of them and everything
# else) keep real time only when they get the CPU as their traffic arrives. In a fresh-clone CI
# run at load 19, a VM demo canary's receiver was starved into dropping 39% of its packets under
# Home Snoop (the model: none), and the good rollout was rolled back. The tests that boot guests
# run at the session's own priority, every other test LOWER_PRIORITY nice steps below it.
LOWER_PRIORITY = 5
# the session's priority as its first process saw it (inherited by the xdist workers, and the same
# whichever name this module is imported under)
BASE_NICE = int(os.environ.setdefault("FLEET_TESTS_BASE_NICE",
                                      str(os.getpriority(os.PRIO_PROCESS, 0))))


def set_nice(value: int) -> None:
    """This thread's (and so its future children's) nice value; where lowering it needs a
    privilege this user lacks it stays as it is."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, value)
    except PermissionError:
        pass


def at_base_priority() -> None:
    """preexec_fn for a test's subprocess that boots guests: the session's own priority."""
    set_nice(BASE_NICE)
