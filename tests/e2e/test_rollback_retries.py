"""A rollback whose first tasks fail transiently still restores every host: its halt and find
tasks (and its restores) are retried, on a sim lab through the embedded runtime.

The transient fault: the pack's lock directory under state_dir is a plain file for a while (as
a full or read-only file system would make it), so every action that takes a rollout lock fails
until it is put back."""
from __future__ import annotations

import json
import os
import shutil
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

        locks = os.path.join(lab.config["state_dir"], "locks")
        shutil.rmtree(locks)
        with open(locks, "w") as handle:
            handle.write("not a directory\n")
        # the rollout completed: its rollback is an operator's explicit choice (force)
        proc = lab.start("fleet_rollout.rollback", rollout_id=rollout_id, force="true")
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
            assert failed, "the halt task did not fail while the lock directory was gone"
        finally:
            os.remove(locks)  # the fault goes away; the retry finds the directory again
        out, _ = proc.communicate(timeout=600)
        doc = json.loads(out)
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
