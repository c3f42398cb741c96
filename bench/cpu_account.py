"""Controller CPU of a process tree, including processes that outlive or escape their parent.

A cgroup v1 cpuacct group (root, Linux) when one can be made: every process started from the
tracked one is counted, whoever reaps it. Otherwise RUSAGE_CHILDREN of this process, which
counts only descendants reaped up the chain (a fork server killed with its parent is lost):
`method` says which one was used.
"""
from __future__ import annotations

import os
import resource
import uuid
from typing import Callable, Optional

CPUACCT = "/sys/fs/cgroup/cpuacct"


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc); 0.0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuAccount:
    def __init__(self, label: str = "fleet-bench") -> None:
        self.path: Optional[str] = os.path.join(CPUACCT, f"{label}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(self.path)
            self.method = "cgroup cpuacct"
        except OSError:
            self.path = None
            self.method = "RUSAGE_CHILDREN (descendants reaped by their parents)"
        self._before = self._children()

    @staticmethod
    def _children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def preexec(self) -> Optional[Callable[[], None]]:
        """For subprocess.Popen(preexec_fn=...): the child joins the group before it execs."""
        if self.path is None:
            return None
        procs = os.path.join(self.path, "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        return join

    def seconds(self) -> float:
        if self.path is not None:
            with open(os.path.join(self.path, "cpuacct.usage")) as handle:
                return int(handle.read().strip()) / 1e9
        return self._children() - self._before

    def close(self) -> None:
        """Remove the group (its processes, if any are left, go back to the root group)."""
        if self.path is None:
            return
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as handle:
                left = [p for p in handle.read().split() if p]
            for pid in left:
                try:
                    with open(os.path.join(CPUACCT, "cgroup.procs"), "w") as handle:
                        handle.write(pid)
                except OSError:
                    pass
            os.rmdir(self.path)
        except OSError:
            pass
