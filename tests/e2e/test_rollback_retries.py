"""A rollback whose first tasks fail transiently still restores every host: its halt and find
tasks (and its restores) are retried, on a sim lab through the embedded runtime.

The transient fault: the pack config holds a value the pack refuses for a while (an operator's
edit with a mistake, loaded by a restart of the services, corrected and loaded by another), so
every pack action fails with a config error until it is put right."""
from __future__ import annotations

import json
import time

from rollout_support import SimLab, error_text, output

EARLY = {"snoop_mode": "early", "node_interleaving": "disabled"}
HOME = {"snoop_mode": "home", "node_interleaving": "disabled"}


def _tasks(lab: SimLab, execution_id: str):
    doc = json.loads(lab.cli("execution", "get", execution_id, "--json").stdout)
    return doc, doc.get("children") or []


def test_a_rollback_whose_first_tasks_fail_still_restores_every_host(tmp_path):
    lab = SimLab(str(tmp_path), 2)
    try:
        execution = lab.ask_run("fleet_rollout.rollout",
                                profile=lab.profile("home-snoop", approval={"required": False}))
        while lab.waiting(execution):  # an INCONCLUSIVE verdict asks: go on
            for inquiry in lab.pending():
                lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "proceed"}')
            execution = lab.settle(execution["id"])
        assert execution["status"] == "succeeded", error_text(execution)
        rollout_id = lab.kv_ids()[-1]
        for host in lab.host_names():
            assert lab.bmc(host)["logical"] == HOME, host

        lab.set_config(watchdog_grace=1)  # the pack refuses it: its actions fail
        lab.stop_engine()  # the runtime, as st2, reads a pack config when it starts
        lab.start_engine()
        # the rollout completed: its rollback is an operator's explicit choice (force)
        started = lab.cli("run", "fleet_rollout.rollback", f"rollout_id={rollout_id}",
                          "force=true", "-a", "--json")
        assert started.returncode == 0, started.stderr[-2000:]
        rollback_id = json.loads(started.stdout)["id"]
        try:
            deadline = time.time() + 120
            failed = []
            while time.time() < deadline and not failed:
                time.sleep(0.5)
                ids = [d["id"] for d in json.loads(lab.cli(
                    "execution", "list", "-n", "20", "--action", "fleet_rollout.rollback",
                    "--json").stdout)]
                for ex_id in ids:
                    _, children = _tasks(lab, ex_id)
                    failed = [c for c in children if c["action"]["ref"] == "fleet_rollout.abort"
                              and c["status"] == "failed"]
            assert failed, "the halt task did not fail while the pack config was refused"
            assert "watchdog_grace" in error_text(failed[0]), error_text(failed[0])
        finally:
            lab.set_config(watchdog_grace=300)  # the fault goes away; the retry goes on
            lab.stop_engine()
            lab.start_engine()
        doc = lab.wait_status(rollback_id, ("succeeded", "failed", "canceled", "timeout"),
                              timeout=600)
        assert doc["status"] == "succeeded", error_text(doc)
        assert output(doc)["restored"] == sorted(lab.host_names())
        _, children = _tasks(lab, doc["id"])
        halts = [c["status"] for c in children if c["action"]["ref"] == "fleet_rollout.abort"]
        assert halts[0] == "failed" and halts[-1] == "succeeded", halts
        for host in lab.host_names():
            assert lab.bmc(host)["logical"] == EARLY, host
            assert not lab.drained(host), host
        assert lab.kv(rollout_id, "meta")["status"] == "rolled_back"
    finally:
        lab.down()
