"""`make demo` end to end, as a user runs it: 6 target servers and 10 sim servers beside them
(the control group) in 2 sites, one simulated Dell iDRAC 8 BMC each over HTTPS, the lab's ChatOps
(ngircd, errbot + err-stackstorm, the runtime's st2 API and its engine) running the pack's
workflows, real Ansible; rollouts of the 6 started with the real st2 CLI as sre-alice; a good
rollout in batches with the approvals answered in IRC (`!st2 rollout approve <id>` in
#fleet-rollout) whose canaries PASS against the controls, then a bad one whose canary FAILs
against them (and above the drop ceiling) and is rolled back automatically.

- vm: what `make demo` runs: the targets are QEMU guests with real kernels (NUMA from the BIOS
  settings), Ansible over SSH, the probe in the guests, UDP traffic and the guest kernels' own
  drop counters; the controls are sim servers beside them.
- sim: the same flow with sim targets too (fake /sys trees that follow the BIOS, the lab's
  counter model, Ansible with a local connection), for breadth and speed, and with the judge's
  windows read from the lab's real Prometheus (DEMO_COUNTERS=prometheus), which scrapes a real
  node_exporter on every server.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from process_support import at_base_priority
from rollout_support import ROOT


@pytest.mark.parametrize("backend,counters", [("sim", "prometheus"), ("vm", "collector")])
def test_make_demo_end_to_end(tmp_path, backend, counters):
    env = dict(os.environ, FLEET_ROLLOUT_HOME=str(tmp_path / "home"), DEMO_HOSTS="6",
               DEMO_SIM_HOSTS="10", DEMO_BACKEND=backend, DEMO_STATE_DIR=str(tmp_path / "lab"),
               DEMO_INVENTORY=str(tmp_path / "inventory.yml"),  # not the repo's .lab/
               DEMO_COUNTERS=counters)
    # the VM demo's guests at the session's priority, above the other tests (conftest.py)
    proc = subprocess.run([sys.executable, "-m", "fleet_lab.demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=2700,
                          preexec_fn=at_base_priority if backend == "vm" else None)
    out = proc.stdout
    assert proc.returncode == 0, out[-8000:] + proc.stderr[-3000:]
    assert "servers up: 16/16" in out  # the 6 targets and the 10 controls
    if counters == "prometheus":  # lab status: the lab's Prometheus has every server up
        assert re.search(r"prometheus:\s+https://127\.0\.0\.1:\d+", out)
        assert "targets:     16/16 up" in out
    if backend == "vm":
        assert re.search(r"servers up: 16/16 \(vm 6/6, sim 10/10", out)
        assert "lab-001..lab-006 (6) on the vm backend" in out
        assert "lab-007..lab-016 (10) on the sim backend" in out
        assert re.search(r"lab-016\s+sim\s+dell-idrac8\s+site-b", out)  # lab status
    first, second = out.split("=== rollout 2", 1)
    # started with the st2 CLI; approvals asked in IRC by the bot and answered there by an
    # approver, recorded as that nick
    targets = "lab_vm" if backend == "vm" else ",".join(f"lab-00{i}" for i in range(1, 7))
    assert f"$ st2 run fleet_rollout.rollout profile=lab-home-snoop targets={targets} -a" \
        in first
    assert "st2 execution get " in first
    assert "[chat #fleet-rollout] <sre-alice> !st2 rollout approve" in first
    assert "[chat #fleet-rollout] <fleetbot> Approval needed for rollout" in first
    assert "<fleetbot> sre-alice answered approve for rollout" in first
    assert "rollout lab-home-snoop" in first and ": completed" in first
    # one message per batch + plan
    assert first.count("[chat #fleet-rollout] <fleetbot> Rollout") >= 3
    # the controls are the 10 servers nobody changes, 5 per site
    controls = re.search(r"<fleetbot> control group: (.*)", first).group(1).split(", ")
    assert sorted(controls) == [f"lab-{i:03d}" for i in range(7, 17)]
    # the judge decides: the canary batch PASSes (by the comparison with 3 or more canaries, a
    # large improvement with 1-2), its explanation in the demo's verdict lines, whole
    batches = int(re.search(r"6 host\(s\) to change in (\d+) batch", first).group(1))
    verdicts = re.findall(r"^  judge \[(\w+)\] (.*)$", first, re.M)
    assert len(verdicts) == batches >= 2, verdicts
    reason, text = verdicts[0]
    assert text.startswith("PASS (lab-home-snoop-") and ", batch 1): " in text, text
    assert "fewer drops" in text, text
    if reason == "large_improvement":
        assert ": a large improvement:" in text
    else:
        assert reason == "no_regression" and "An improvement:" in text, (reason, text)
    # progress: every host's steps as they finish, all six hosts verified and back in service
    for host in [f"lab-00{i}" for i in range(1, 7)]:
        for step in ("drain", "stage", "reboot", "verify", "undrain"):
            assert re.search(rf"{host}\s+{step}\s+ok", first), f"{host} {step} not shown"
    assert "FAIL" in second and "rolled_back" in second
    assert "ceiling" in second
    # FAILed by the comparison with the controls; the absolute ceiling is the second reason
    (reason, text), = re.findall(r"^  judge \[(\w+)\] (.*)$", second, re.M)
    assert reason in ("regression", "large_regression"), (reason, text)
    assert text.startswith("FAIL (lab-bad-"), text
    assert "Second reason: " in text and "absolute ceiling" in text.split("Second reason: ")[1]
    assert re.search(r"lab-001\s+restore\s+ok", second)  # the bad canary restored
    assert "report:" in second and "audit:" in second
    assert "lab stopped" in out or "lab down" in out
    state = env["DEMO_STATE_DIR"]
    home = env["FLEET_ROLLOUT_HOME"]
    # this demo's own processes only (their command lines name its state dir): never anyone
    # else's QEMU, errbot or API
    for pattern in (f"qemu-system-x86_64 .*{state}/", f"errbot -c {state}/",
                    f"ngircd .*{state}/", f"api serve .*{home}", f"prometheus.* .*{state}/"):
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        assert found.stdout.strip() == "", f"{pattern}: left behind: {found.stdout}"
