"""At most `slots` guests booting at once; the others wait, stopped, until one has booted.

A TCG guest's boot is CPU work from its first instruction to its services, and guests booting
side by side on fewer cores cost more in all: six guests started at once on this machine's two
cores took 102 CPU-s and 52 s until all were up, two at a time 76 CPU-s and 40 s. So a guest
powered on while `slots` others are still booting starts stopped (SIGSTOP right after QEMU
starts: its process, ports and power state are there, its CPUs do not run) and is continued
(SIGCONT) as soon as a booting guest has booted, first come first served. A guest that is
powered off or reset while it waits is continued first, so that it can be stopped.

Booted is the backend's call (`booted(host)`: the console of this power-on says its services
run, or QEMU has exited). A thread checks every TICK seconds while guests wait.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Dict, List, Optional

TICK = 0.25


class BootGate:
    def __init__(self, slots: Optional[int], booted: Callable[[str], bool]) -> None:
        self.slots = max(1, int(slots or os.cpu_count() or 1))
        self._booted = booted
        self._booting: Dict[str, int] = {}  # host -> QEMU pid, running its boot
        self._waiting: List[tuple] = []  # (host, pid), stopped, in power-on order
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def admit(self, host: str, pid: int) -> bool:
        """A guest whose QEMU was just started: True if it boots now, False if it waits."""
        with self._lock:
            self._drop(host)
            self._settle()
            if len(self._booting) < self.slots:
                self._booting[host] = pid
                return True
            _signal(pid, signal.SIGSTOP)
            self._waiting.append((host, pid))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="fleet-lab-boot-gate",
                                                daemon=True)
                self._thread.start()
            return False

    def forget(self, host: str) -> None:
        """The host's guest is being powered off: a waiting one is continued (a stopped
        process does not act on SIGTERM) and neither counts any more."""
        with self._lock:
            self._drop(host)

    def waiting(self) -> List[str]:
        with self._lock:
            return [host for host, _pid in self._waiting]

    def booting(self) -> List[str]:
        with self._lock:
            return sorted(self._booting)

    def _drop(self, host: str) -> None:
        self._booting.pop(host, None)
        for entry in [e for e in self._waiting if e[0] == host]:
            self._waiting.remove(entry)
            _signal(entry[1], signal.SIGCONT)

    def _settle(self) -> None:
        """Booted guests leave their slots; waiting guests take the free ones."""
        for host in [h for h in self._booting if self._booted(h)]:
            del self._booting[host]
        while self._waiting and len(self._booting) < self.slots:
            host, pid = self._waiting.pop(0)
            if _signal(pid, signal.SIGCONT):
                self._booting[host] = pid

    def _run(self) -> None:
        event = threading.Event()
        while True:
            with self._lock:
                self._settle()
                if not self._waiting:
                    self._thread = None
                    return
            event.wait(TICK)


def _signal(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True
