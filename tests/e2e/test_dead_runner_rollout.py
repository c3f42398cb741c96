"""A rollout whose action runner dies during a host's reboot step (the runtime's dead_runner
setting: what st2 does after a SIGKILLed st2actionrunner). The host was reset, the step's
execution stays `running` for good and, until the watchdog's grace (the pack config's
watchdog_grace, 300 s here) has passed, the rollout waits with the host drained; a cancel
stays `canceling`. The operator's way out works at any time: `fleet_rollout.rollback` from
the CLI restores the host (BIOS and kernel back, in service again), with no second reset for
the change. tests/e2e/test_watchdog_rollout.py: the watchdog moving such hosts on."""
from __future__ import annotations

import json
import os
import time

from rollout_support import SimLab, error_text

EARLY = {"snoop_mode": "early", "node_interleaving": "disabled"}


def test_a_dead_runner_strands_the_rollout_and_a_rollback_restores_the_host(tmp_path):
    lab = SimLab(str(tmp_path), 2)
    lab.env["FLEET_ROLLOUT_DEAD_RUNNER"] = "fleet_rollout.host_step step=reboot"
    try:
        profile = lab.profile("home-snoop", approval={"required": False})
        lab.start_engine()  # after profile(): that sets the pack config the engine reads
        started = lab.cli("run", "fleet_rollout.rollout", f"profile={profile}", "-a", "--json")
        execution = json.loads(started.stdout)
        marker = os.path.join(lab.home, "dead-runner-0")
        deadline = time.time() + 300
        while time.time() < deadline and not os.path.exists(marker):
            time.sleep(1)
        time.sleep(1)
        with open(marker) as handle:
            dead = json.loads(lab.cli("execution", "get", handle.read().strip(),
                                      "--json").stdout)
        assert (dead["action"]["ref"], dead["parameters"]["step"]) == (
            "fleet_rollout.host_step", "reboot")
        assert dead["status"] == "running" and dead["result"]["exit_code"] == 0
        host = dead["parameters"]["host"]
        time.sleep(20)  # nothing reconciles it
        record = json.loads(lab.cli("execution", "get", execution["id"], "--json").stdout)
        assert record["status"] == "running", error_text(record)
        assert json.loads(lab.cli("execution", "get", dead["id"], "--json").stdout)[
            "status"] == "running"
        assert lab.drained(host)
        assert len(lab.bmc(host)["resets"]) == 1

        canceled = lab.cli("execution", "cancel", execution["id"], "--no-wait")
        assert canceled.returncode == 0, canceled.stderr[-2000:]
        time.sleep(5)
        record = json.loads(lab.cli("execution", "get", execution["id"], "--json").stdout)
        assert record["status"] == "canceling"

        rollout_id = lab.kv_ids()[-1]
        rollback = lab.cli("run", "fleet_rollout.rollback", f"rollout_id={rollout_id}",
                           "--json", timeout=900)
        doc = json.loads(rollback.stdout)
        assert doc["status"] == "succeeded", error_text(doc)
        assert not lab.drained(host)
        assert lab.bmc(host)["logical"] == EARLY
        assert lab.kv(rollout_id, f"host.{host}")["status"] == "restored"
    finally:
        lab.down()
