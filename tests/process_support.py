"""Looking at processes by PID from /proc: the tests stop only what they started, by PID."""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple


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


# Nice values count only within an autogroup: the kernel (CONFIG_SCHED_AUTOGROUP, on here) gives
# every session its own scheduling group and shares the CPU between groups first. Every server,
# daemon and action run a test starts in a new session (start_new_session, setsid) therefore ran
# at full weight whatever LOWER_PRIORITY said, against the one group that holds all six of the VM
# demo's guests (its lab daemon's session). A fresh-clone CI run took 916 s for a VM demo that
# takes 531 s alone. The sessions a lower-priority test starts get its nice as their group's.
SCAN_SECONDS = 2.0


def _stat_fields(pid: str) -> Tuple[int, int]:
    """(parent pid, session id) of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[3])


def descendant_sessions(root: int, exempt: Set[int]) -> Dict[int, int]:
    """session id -> one process in it, for every session among `root`'s descendants other than
    root's own, leaving out the subtrees of the PIDs in `exempt`."""
    parent: Dict[int, int] = {}
    session: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)], session[int(entry)] = _stat_fields(entry)
            except (OSError, ValueError, IndexError):
                continue
    own = session.get(root)
    found: Dict[int, int] = {}
    for pid in parent:
        chain, node = [], pid
        while node and node != root and node not in exempt and len(chain) < 64:
            chain.append(node)
            node = parent.get(node, 0)
        if node == root and session[pid] != own:
            found.setdefault(session[pid], pid)
    return found


def set_session_nice(pid: int, value: int) -> None:
    """The nice value of the autogroup (session) `pid` is in; nothing if it cannot be set."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as handle:
            handle.write(str(value))
    except OSError:
        pass


class SessionShares:
    """A thread that gives the sessions this process's children start the nice value `lowered`
    asks (None: leave them) as their autogroup's, except under the PIDs in `exempt` (a VM
    demo's subprocess: its guests and services keep the session's priority)."""

    def __init__(self) -> None:
        self.lowered: Optional[int] = None
        self.exempt: Set[int] = set()
        self._done: Set[int] = set()
        self._thread = threading.Thread(target=self._run, name="session-shares", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = os.getpid()
        while True:
            time.sleep(SCAN_SECONDS)
            value = self.lowered
            if value is None:
                continue
            try:
                sessions = descendant_sessions(me, set(self.exempt))
            except OSError:
                continue
            for sid, pid in sessions.items():
                if sid not in self._done:
                    set_session_nice(pid, value)
                    self._done.add(sid)


_SHARES: List[SessionShares] = []


def session_shares() -> SessionShares:
    """This process's (an xdist worker's) SessionShares thread, started on first use. Import it
    as tests.process_support, as conftest.py does: under another name the module is a second
    copy with a thread of its own."""
    if not _SHARES:
        _SHARES.append(SessionShares())
    return _SHARES[0]
