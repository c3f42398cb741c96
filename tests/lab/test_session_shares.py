"""The test harness's CPU shares across sessions (tests/process_support.py): the sessions a test's
children start are found, a VM demo's subtree is left out, and a session's autogroup takes the
nice value given. Only this test's own `sleep` processes, stopped by PID."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.process_support import descendant_sessions, set_session_nice


def _autogroup_nice(pid: int) -> int:
    with open(f"/proc/{pid}/autogroup") as handle:
        return int(handle.read().split()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"),
                    reason="this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): nothing to set")
def test_sessions_of_children_are_found_and_lowered_but_not_an_exempt_subtree():
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    demo = subprocess.Popen(["sh", "-c", "exec setsid sleep 31"])  # a VM demo in its session
    try:
        deadline = time.monotonic() + 10
        while len(descendant_sessions(os.getpid(), set())) < 2:
            assert time.monotonic() < deadline, "the children's sessions were not found"
            time.sleep(0.05)
        found = descendant_sessions(os.getpid(), {demo.pid})
        assert list(found) == [server.pid]  # its own session; the demo's subtree left out
        before = _autogroup_nice(os.getpid())
        set_session_nice(found[server.pid], before + 3)
        assert _autogroup_nice(server.pid) == before + 3
        assert _autogroup_nice(os.getpid()) == before  # the test's own session untouched
    finally:
        for proc in (server, demo):
            proc.kill()
            proc.wait()
