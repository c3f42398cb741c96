"""Action runners that die during host actions (the runtime's dead_runner setting: what st2
does after a SIGKILLed st2actionrunner: the action's work done, its execution `running` for
good, the workflow waiting). The pack's watchdog (the interval-timer rule watch_host_actions)
finds each stale execution, recovers its host (fleet_rollout.recover_host: the host's part of
the change, or its wave, run again, every step idempotent) and completes the waiting workflow;
the rollout ends with every host done or restored, none drained, no second reset, each stale
execution in the audit trail and in chat."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List

from rollout_support import SimLab, error_text

DYING = ["fleet_rollout.host_step step=snapshot", "fleet_rollout.host_step step=reboot",
         "fleet_rollout.host_step step=wait", "fleet_rollout.host_step step=verify",
         "fleet_rollout.wave_step step=undrain", "fleet_rollout.host_step step=restore"]
DONE = ("succeeded", "failed", "canceled", "timeout", "abandoned")


def _audit(lab: SimLab, rollout_id: str) -> List[Dict[str, Any]]:
    return lab.audit(rollout_id)


def _executions(lab: SimLab, action: str, status: str) -> List[Dict[str, Any]]:
    out = lab.cli("execution", "list", "--all", "-n", "500", "--action", action, "--status",
                  status, "--json")
    return json.loads(out.stdout) if out.stdout.strip() else []


def _answer_until_done(lab: SimLab, execution_id: str, timeout: float) -> Dict[str, Any]:
    """The execution once it has ended, an INCONCLUSIVE question (few controls here) answered
    with "proceed" on the way."""
    deadline = time.time() + timeout
    doc = lab.settle(execution_id)
    while doc["status"] not in DONE and time.time() < deadline:
        for inquiry in lab.pending():
            out = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "proceed"}')
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        time.sleep(2)
        doc = lab.settle(execution_id, timeout=max(1, deadline - time.time()))
    return doc


def test_runners_dying_in_every_host_action_leave_no_host_drained(tmp_path):
    lab = SimLab(str(tmp_path), 9)
    lab.env["FLEET_ROLLOUT_DEAD_RUNNER"] = "; ".join(DYING)
    try:
        lab.set_config(watchdog_grace=15)
        profile = lab.profile("home-snoop", approval={"required": False},
                              failure_budget={"per_batch": 1, "total": 1},
                              batches={"canary_size": 6, "max_batch": 6, "growth": 1,
                                       "parallel": 6, "control_ratio": 2,
                                       "max_unavailable_per_rack": 6,
                                       "max_unavailable_per_site": 8})
        lab.start_engine()
        started = lab.cli("run", "fleet_rollout.rollout", f"profile={profile}", "-a", "--json")
        assert started.returncode == 0, started.stderr[-2000:]
        root = json.loads(started.stdout)["id"]
        deadline = time.time() + 120
        while time.time() < deadline and not (lab.kv_ids() and lab.plan(lab.kv_ids()[-1])):
            time.sleep(0.5)
        targets = [h for b in lab.plan(lab.kv_ids()[-1])["batches"] for h in b["hosts"]]
        faulty = targets[-1]
        lab.fault(faulty, settings_not_applied=True)  # its change fails: it is restored
        doc = _answer_until_done(lab, root, 1500)
        assert doc["status"] == "succeeded", error_text(doc)
        rollout_id = lab.kv_ids()[-1]
        keys = lab.keys(rollout_id)

        dead = [open(os.path.join(lab.home, f"dead-runner-{i}")).read().strip()
                for i in range(len(DYING)) if os.path.exists(
                    os.path.join(lab.home, f"dead-runner-{i}"))]
        assert len(dead) == len(DYING)  # a runner died in each kind of host action
        stale = {k[len("stale."):]: v for k, v in keys.items() if k.startswith("stale.")}
        assert set(stale) == set(dead)
        assert {s["step"] for s in stale.values()} == {
            "snapshot", "reboot", "wait", "verify", "undrain", "restore"}
        for record in stale.values():
            assert record["recovery"] and record["settled"] in ("succeeded", "failed"), record
        # the dead executions stay running (as on st2); nothing else of the rollout does
        running = {e["id"] for a in ("fleet_rollout.host_step", "fleet_rollout.wave_step",
                                     "fleet_rollout.host_change", "fleet_rollout.wave_change",
                                     "fleet_rollout.rollout_batch")
                   for e in _executions(lab, a, "running")}
        assert running <= set(dead)

        hosts = {k[len("host."):]: v for k, v in keys.items() if k.startswith("host.")}
        assert len(targets) >= 6
        for host in targets:
            state = hosts[host]
            assert state["status"] == ("restored" if host == faulty else "done"), (host, state)
            assert not lab.drained(host), host
            resets = lab.bmc(host)["resets"]
            # the change's and, for the restored host, the restore's if it had to reset: never
            # a second of either
            if host == faulty:
                assert 1 <= len(resets) <= 2, (host, resets)
            else:
                assert len(resets) == 1, (host, resets)
        audit = [e for e in _audit(lab, rollout_id) if e["action"] == "stale_execution"]
        assert sorted(e["old"] for e in audit) == sorted(dead)
        chat = open(os.path.join(lab.home, "chat.jsonl")).read()
        assert chat.count("outlived its action runner") >= 2 * len(DYING)
    finally:
        lab.down()


def test_a_runner_dying_in_a_rollbacks_restore_is_recovered(tmp_path):
    """The stale restore's workflow is the rollback itself: the recovery runs the rollback
    again (restored hosts are skipped) and completes the one that waited."""
    lab = SimLab(str(tmp_path), 4)
    lab.env["FLEET_ROLLOUT_DEAD_RUNNER"] = "fleet_rollout.host_step step=restore"
    try:
        lab.set_config(watchdog_grace=15)
        profile = lab.profile("home-snoop", approval={"required": False},
                              batches={"canary_size": 2, "max_batch": 2, "growth": 1,
                                       "parallel": 2, "control_ratio": 2,
                                       "max_unavailable_per_rack": 2})
        lab.start_engine()
        started = lab.cli("run", "fleet_rollout.rollout", f"profile={profile}", "-a", "--json")
        assert started.returncode == 0, started.stderr[-2000:]
        doc = _answer_until_done(lab, json.loads(started.stdout)["id"], 900)
        assert doc["status"] == "succeeded", error_text(doc)
        rollout_id = lab.kv_ids()[-1]
        changed = [h for h, s in lab.keys(rollout_id).items() if h.startswith("host.")
                   and s.get("status") == "done"]
        assert changed
        out = lab.cli("run", "fleet_rollout.rollback", f"rollout_id={rollout_id}", "force=true",
                      "-a", "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        rollback = lab.wait_status(json.loads(out.stdout)["id"], DONE, timeout=900)
        assert rollback["status"] == "succeeded", error_text(rollback)
        assert rollback["result"]["output"]["recovered_by"]
        [dead] = [open(os.path.join(lab.home, "dead-runner-0")).read().strip()]
        keys = lab.keys(rollout_id)
        assert keys[f"stale.{dead}"]["settled"] == "succeeded"
        assert keys["meta"]["status"] == "rolled_back", keys["meta"]
        for name in changed:
            host = name[len("host."):]
            assert keys[name]["status"] == "restored", keys[name]
            assert not lab.drained(host), host
            assert len(lab.bmc(host)["resets"]) == 2, host  # the change's, the restore's
    finally:
        lab.down()
