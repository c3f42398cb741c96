"""`make demo`'s flow end to end with `sim` servers (fake trees following the BIOS, the lab's
counter model): 6 servers in 2 sites, the BMC simulator over HTTPS, the embedded runtime running
the pack's workflows with a background engine, Ansible (local connection with a sysroot); a good
rollout in 3 batches with the approvals answered, then a bad one whose canary FAILs on the drop
ceiling and is rolled back automatically."""
from __future__ import annotations

import os
import subprocess
import sys

from rollout_support import ROOT


def test_make_demo_end_to_end_on_sim_servers(tmp_path):
    env = dict(os.environ, FLEET_ROLLOUT_HOME=str(tmp_path / "home"), DEMO_HOSTS="6",
               DEMO_BACKEND="sim")
    proc = subprocess.run([sys.executable, "-m", "fleet_runtime.demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=2400)
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:] + proc.stderr[-3000:]
    assert "servers up: 6/6" in out
    first, second = out.split("=== rollout 2", 1)
    assert "answers inquiry" in first  # approvals asked in chat and answered
    assert "rollout lab-home-snoop" in first and ": completed" in first
    assert first.count("[chat #fleet-rollout] Rollout") >= 3  # one message per batch + plan
    assert "INCONCLUSIVE" in first or "PASS" in first
    assert "FAIL" in second and "rolled_back" in second
    assert "ceiling" in second
    assert "report:" in second and "audit:" in second
    assert "lab stopped" in out or "lab down" in out
    pids = subprocess.run(["pgrep", "-f", "qemu-system-x86_64"], capture_output=True, text=True)
    assert pids.stdout.strip() == "", "QEMU processes left behind"
