"""The staged rollout through the embedded runtime (the pack's own workflows and actions, the real
Orquesta conductor) against a lab of `sim` hosts: real HTTPS to the simulated BMCs, real Ansible
(local connection with a sysroot), the real probe (sysroot model) and counter collector."""
from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from rollout_support import SimLab, error_text, output

from fleet_rollout import timeouts

EARLY = {"snoop_mode": "early", "node_interleaving": "disabled"}
HOME = {"snoop_mode": "home", "node_interleaving": "disabled"}


@pytest.fixture()
def small_lab(tmp_path):
    sim = SimLab(str(tmp_path), 6)
    yield sim
    sim.down()


def _assert_untouched(sim, hosts):
    for host in hosts:
        doc = sim.bmc(host)
        assert doc["logical"] == EARLY, host
        assert doc["pending"] == {} and doc["resets"] == [], host
        assert not sim.drained(host), host
        assert sim.read(host, "proc/sys/net/core/rmem_max") == "212992", host


def test_pack_metadata_is_valid_for_stackstorm(small_lab):
    out = small_lab.cli("pack", "validate")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fleet_rollout:" in out.stdout and "OK" in out.stdout


def test_plan_is_a_dry_run(small_lab):
    sim = small_lab
    execution = sim.run("fleet_rollout.plan", profile=sim.profile("home-snoop"), targets="all")
    assert execution["status"] == "succeeded", error_text(execution)
    result = output(execution)
    assert result["targets"] == 6 and result["batches"] >= 2
    assert len(result["control"]) >= 2
    assert "canary batch" in result["table"]
    for host in sim.host_names():
        counters = sim.bmc(host)["counters"]
        assert counters.get("PATCH", 0) == 0 and counters.get("POST", 0) == 0, host
    plan = sim.kv(result["rollout_id"], "plan")
    assert sorted(h for b in plan["batches"] for h in b["hosts"]) == sim.host_names()


def test_bad_inputs_fail_before_any_host_is_touched(small_lab, tmp_path):
    sim = small_lab
    sim.profile("home-snoop")  # the lab's profiles_dir exists from here on
    bad = os.path.join(sim.config["profiles_dir"], "bad.yaml")
    with open(bad, "w") as handle:
        handle.write("name: bad\nbios:\n  snoop_mode: home\nbatches:\n  canary_sise: 2\n")
    execution = sim.run("fleet_rollout.rollout", profile="bad")
    assert execution["status"] == "failed"
    assert "bad.yaml" in error_text(execution) and "batches.canary_sise" in error_text(execution)
    # a path is not a profile name: refused by the action's parameter pattern
    refused = sim.cli("run", "fleet_rollout.rollout", f"profile={bad}")
    assert refused.returncode != 0 and "does not match" in refused.stderr + refused.stdout

    execution = sim.run("fleet_rollout.rollout", profile=sim.profile("home-snoop"),
                        targets="no-such-host")
    assert execution["status"] == "failed" and "no host matches" in error_text(execution)

    sim.fault("lab-003", unreachable_s=120)
    execution = sim.run("fleet_rollout.rollout", profile=sim.profile("home-snoop"))
    assert execution["status"] == "failed"
    assert "lab-003" in error_text(execution) and "nothing was changed" in error_text(execution)
    sim.fault("lab-003", unreachable_s=0.01)
    time.sleep(0.1)

    # the inventory comes from the pack config only: no parameter can point elsewhere
    refused = sim.cli("run", "fleet_rollout.rollout", f"profile={sim.profile('interleave-on')}",
                      "inventory=/nonexistent/inventory.yml")
    assert refused.returncode != 0 and "inventory" in refused.stderr + refused.stdout
    inventory = sim.config["inventory"]
    sim.set_config(inventory="/nonexistent/inventory.yml")
    try:
        execution = sim.run("fleet_rollout.rollout", profile=sim.profile("interleave-on"))
    finally:
        sim.set_config(inventory=inventory)
    assert execution["status"] == "failed" and "/nonexistent/inventory.yml" in error_text(
        execution)
    # a pack config that names no inventory: refused, never some default file
    sim.set_config(inventory="")
    try:
        execution = sim.run("fleet_rollout.rollout", profile=sim.profile("interleave-on"))
    finally:
        sim.set_config(inventory=inventory)
    assert execution["status"] == "failed"
    assert "pack config: inventory is not set" in error_text(execution)
    _assert_untouched(sim, sim.host_names())


def test_approval_rejected_stops_and_changes_nothing(small_lab):
    sim = small_lab
    profile = sim.profile("home-snoop", approval={"required": True,
                                                  "auto_approve_canary": False})
    execution = sim.ask_run("fleet_rollout.rollout", profile=profile)
    assert sim.waiting(execution), error_text(execution)
    inquiries = json.loads(sim.cli("inquiry", "list", "--json").stdout)
    assert len(inquiries) == 1
    inquiry = inquiries[0]["id"]
    answer = sim.cli("inquiry", "respond", inquiry, "-r", '{"approved": false}', "--json")
    assert answer.returncode == 0, answer.stderr
    final = sim.settle(execution["id"])
    assert final["status"] in ("succeeded", "failed"), final["status"]
    assert output(final)["status"] == "rejected"
    approval = sim.kv(sim.kv_ids()[-1], "batch.0")["approval"]
    assert (approval["by"], approval["approved"]) == ("alice", False)  # who authenticated
    chat = open(os.path.join(sim.home, "chat.jsonl")).read()
    assert "Approval needed" in chat and "rejected" in chat
    _assert_untouched(sim, sim.host_names())


def test_canary_failure_rolls_every_changed_host_back(small_lab):
    sim = small_lab
    profile = sim.profile("lab-bad", batches={"canary_size": 2, "max_unavailable_per_rack": 2},
                          kernel={"sysctl": {"net.core.rmem_max": 16777216}})
    execution = sim.run("fleet_rollout.rollout", profile=profile)
    assert execution["status"] == "failed", error_text(execution)
    result = output(execution)
    assert result.get("status") == "rolled_back", result
    rollout_id = result["rollout_id"]
    batch0 = sim.kv(rollout_id, "batch.0")
    assert batch0["verdict"]["verdict"] == "FAIL"
    sim.wait_idle()
    hosts = sim.kv(rollout_id, "plan")["batches"][0]["hosts"]
    for host in hosts:
        doc = sim.bmc(host)
        assert doc["logical"] == EARLY and doc["current"]["LabReceiveSlowdown"] == "Disabled"
        assert not sim.drained(host)
        assert sim.read(host, "proc/sys/net/core/rmem_max") == "212992"
        assert sim.nodes(host) == 2
        state = sim.kv(rollout_id, f"host.{host}")
        assert state["status"] == "restored"
    untouched = [h for h in sim.host_names() if h not in hosts]
    _assert_untouched(sim, untouched)
    chat = open(os.path.join(sim.home, "chat.jsonl")).read()
    assert "FAIL" in chat
    # the rollout's own rollback and the canary-regression rule's both ran; chat hears it once
    assert len(re.findall(rf"Rollout {rollout_id} \([^)]*\) rolled_back:", chat)) == 1, chat
    assert sim.kv(rollout_id, "meta")["status"] == "rolled_back"
    actions = [entry["action"] for entry in sim.audit(rollout_id)]
    assert "change" in actions and "restore" in actions
    assert os.path.exists(os.path.join(sim.state, "rollouts", "reports", f"{rollout_id}.html"))


def test_host_failure_within_budget_is_restored_and_the_rollout_goes_on(small_lab):
    sim = small_lab
    sim.fault("lab-001", settings_not_applied=True)
    profile = sim.profile("interleave-on", failure_budget={"per_batch": 1},
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 4},
                          approval={"required": False})
    execution = sim.ask_run("fleet_rollout.rollout", profile=profile,
                            targets="lab-001:lab-002")
    # one canary left to judge: INCONCLUSIVE, which asks a human; the SRE proceeds
    while sim.waiting(execution):
        rollout_id = sim.kv_ids()[-1]
        said = sim.cli("chat", "--user", "alice", f"rollout approve {rollout_id}")
        assert "answered approve" in said.stdout, said.stdout[-2000:] + said.stderr[-2000:]
        execution = sim.settle(execution["id"])
    result = output(execution)
    assert result.get("status") == "completed", error_text(execution)
    state = sim.kv(result["rollout_id"], "host.lab-001")
    assert state["status"] == "restored" and state["error"]["step"] == "wait"
    assert "settings not in effect after reset" in state["error"]["message"]
    assert sim.bmc("lab-001")["logical"]["node_interleaving"] == "disabled"
    assert not sim.drained("lab-001")
    sim.wait_idle()
    assert sim.bmc("lab-002")["logical"]["node_interleaving"] == "enabled"
    assert sim.nodes("lab-002") == 1


def test_host_failure_over_budget_halts_and_rolls_back(small_lab):
    sim = small_lab
    sim.fault("lab-002", settings_not_applied=True)
    profile = sim.profile("interleave-on", failure_budget={"per_batch": 0},
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 4},
                          approval={"required": False})
    execution = sim.run("fleet_rollout.rollout", profile=profile)
    result = output(execution)
    assert result.get("status") == "rolled_back", error_text(execution)
    rollout_id = result["rollout_id"]
    assert sim.kv(rollout_id, "batch.0")["verdict"]["reason"] == "failure_budget"
    assert sim.kv(rollout_id, "halt") is not None
    sim.wait_idle()
    for host in sim.host_names():
        assert sim.bmc(host)["logical"]["node_interleaving"] == "disabled", host
        assert not sim.drained(host), host
    later = sim.kv(rollout_id, "plan")["batches"][1]["hosts"]
    _assert_untouched(sim, later)


def test_runtime_killed_mid_rollout_resumes_without_double_changes(small_lab):
    sim = small_lab
    profile = sim.profile("home-snoop", approval={"required": False},
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 4, "parallel": 4})
    proc = sim.start("fleet_rollout.rollout", profile=profile)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill while the canary hosts are being changed
        if any(sim.bmc(h)["resets"] for h in sim.host_names()):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    executions = json.loads(sim.cli("execution", "list", "--json").stdout)
    rollout = [e for e in executions if e["action"]["ref"] == "fleet_rollout.rollout"][-1]
    resumed = sim.cli("execution", "resume", rollout["id"], "--json", timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = json.loads(sim.cli("execution", "get", rollout["id"], "--json").stdout)
    result = output(final)
    assert result.get("status") in ("completed", "rolled_back"), error_text(final)
    sim.wait_idle()
    for host in sim.host_names():
        doc = sim.bmc(host)
        assert len(doc["resets"]) <= 2, (host, doc["resets"])  # change (+ restore), never twice
        assert not sim.drained(host), host
        if result["status"] == "completed":
            assert doc["logical"] == HOME, host


def test_happy_path_20_hosts_in_4_batches(tmp_path):
    sim = SimLab(str(tmp_path), 20)
    try:
        profile = sim.profile("home-snoop", approval={"required": False},
                              batches={"canary_size": 3, "growth": 2, "max_batch": 8,
                                       "max_unavailable_per_site": 8,
                                       "max_unavailable_per_rack": 4, "parallel": 8},
                              canary={"window_seconds": 10, "window_steps": 2,
                                      "pre_windows": 2})
        execution = sim.run("fleet_rollout.rollout", profile=profile)
        result = output(execution)
        assert execution["status"] == "succeeded", error_text(execution)
        assert result["status"] == "completed" and result["batches"] == 4
        rollout_id = result["rollout_id"]
        sim.wait_idle()
        keys = sim.keys(rollout_id)  # the rollout has ended: its keys read at once
        for host in sim.host_names():
            assert sim.bmc(host)["logical"] == HOME, host
            assert sim.read(host, "proc/sys/net/core/rmem_max") == "16777216", host
            assert not sim.drained(host), host
            assert keys[f"host.{host}"]["status"] == "done"
        # verification compares each later host's probe fingerprint with the hosts verified in
        # earlier batches: none for the canaries, the canaries and more for the batches after
        plan = sim.kv(rollout_id, "plan")["batches"]
        used = [[_fingerprint(keys, h)["controls_used"] for h in b["hosts"]]
                for b in plan]
        assert set(used[0]) == {0} and min(used[1]) >= 3 and min(used[3]) >= min(used[1]), used
        # each window collected at its steps too (window_steps 2, the pre window 2 windows
        # long: pre_step_1..3 and post_step_1), every host of the batch and its controls,
        # between the window's start and end
        early = []
        for i, batch in enumerate(plan):
            times, starts = [], []
            for label in ("pre_start", "pre_step_1", "pre_step_2", "pre_step_3", "pre_end",
                          "post_start", "post_step_1", "post_end"):
                head = keys[f"batch.{i}.counters.{label}"]
                part = keys[f"batch.{i}.counters.{label}.0"]
                assert set(batch["hosts"]) <= set(part["snapshots"]), (i, label)
                times.append(head["time"])
                starts.append(head["started"])
            # each collection is due after the one before it, and each window's end is
            # written last (a start's own time is when its run ended, which a loaded machine
            # can take past the first step's due time)
            assert starts == sorted(starts), starts
            assert times[4] == max(times[:5]) and times[7] == max(times), times
            # the hosts sample a step (10 s / 2) apart from the window's start (gate.py), and
            # the window's end stores each step's collection
            pre, post = starts[:5], starts[5:]
            assert all(b - a >= 5 for w in (pre, post) for a, b in zip(w, w[1:])), starts
            # a batch after another (no approval between them) took over the pre window its
            # predecessor started early: from the end of that batch's post window, never
            # overlapping it; a pre window of its own starts after it too
            if i:
                before = keys[f"batch.{i - 1}.counters.post_start"]["started"] + 2 * 5
                assert pre[0] >= before - 0.001, (i, pre[0], before)
                if keys[f"batch.{i}.counters.pre_start"].get("early"):
                    early.append(i)
                    assert pre[0] == pytest.approx(before, abs=0.001), (i, pre[0], before)
        # the early start is in time on any machine this runs on (a post window of 15 s)
        assert early, "no batch took over a pre window started early"
        verdicts = [keys[f"batch.{i}"]["verdict"]["verdict"] for i in range(4)]
        assert verdicts[:3] == ["PASS", "PASS", "PASS"], verdicts
        # the last batch's waits were paced by the reboots of the batch before it
        learned = timeouts.observed_reboot(keys[f"host.{h}"]
                                           for h in plan[2]["hosts"])
        assert learned is not None and learned >= 0.5  # SimLab reboots take 0.5 s
        assert keys["meta"]["expected_reboot"] == learned
        # learned from the reboots as the BMCs showed them (reset to POST seen finished,
        # rounded to 0.1 s), within the reboot and wait steps
        for host in plan[2]["hosts"]:
            steps = keys[f"host.{host}"]["steps"]
            post = steps["wait"]["detail"]["post_after_reset"]
            assert 0.5 <= post <= steps["wait"]["at"] - steps["reboot"]["started"] + 0.05, steps
        status = sim.run("fleet_rollout.status", rollout_id=rollout_id)
        assert "PASS" in output(status)["table"]
        report = os.path.join(sim.state, "rollouts", "reports", f"{rollout_id}.html")
        assert os.path.getsize(report) > 10000
    finally:
        sim.down()


def _fingerprint(keys, host):
    detail = keys[f"host.{host}"]["steps"]["probe"]["detail"]
    return detail["probe"]["numbers"]["fingerprint"]


def test_a_host_unlike_the_verified_canaries_fails_verification_and_is_restored(small_lab):
    sim = small_lab
    profile = sim.profile("home-snoop", approval={"required": False},
                          failure_budget={"per_batch": 1},
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 4})
    dry = output(sim.run("fleet_rollout.plan", profile=profile))
    odd = sim.kv(dry["rollout_id"], "plan")["batches"][1]["hosts"][0]
    with open(os.path.join(sim.state, "hosts", f"{odd}.hardware.json"), "w") as handle:
        json.dump({"cross_socket_distance": 31}, handle)  # another memory population
    execution = sim.ask_run("fleet_rollout.rollout", profile=profile)
    # 6 hosts are too few for a verdict: the first INCONCLUSIVE is answered "extend" (a fresh
    # post window and a new verdict, INCONCLUSIVE again), every other one "proceed"
    choices = ["extend"] + ["proceed"] * len(sim.host_names())
    for choice in choices:
        if not sim.waiting(execution):
            break
        inquiry = json.loads(sim.cli("inquiry", "list", "--json").stdout)[0]["id"]
        answer = sim.cli("inquiry", "respond", inquiry, "-r", json.dumps({"choice": choice}),
                         "--json")
        assert answer.returncode == 0, answer.stderr
        execution = sim.settle(execution["id"])
    result = output(execution)
    assert result.get("status") == "completed", error_text(execution)
    rollout_id = result["rollout_id"]
    batches = sim.kv(rollout_id, "plan")["batches"]
    assert odd in batches[1]["hosts"]
    keys = sim.keys(rollout_id)  # the rollout has ended: its keys read at once
    # every INCONCLUSIVE answer is recorded with who gave it (the authenticated requester)
    answers = [a for i in range(len(batches) - 1)
               for a in keys[f"batch.{i}"].get("answers", [])]
    assert [(a["choice"], a["by"]) for a in answers[:2]] == [("extend", "alice"),
                                                             ("proceed", "alice")]
    assert all((a["choice"], a["by"]) == ("proceed", "alice") for a in answers[1:])
    # extend: batch 0's post window was collected again after the first answer, then judged
    first = keys["batch.0"]
    post_start = keys["batch.0.counters.post_start"]["time"]
    assert post_start > answers[0]["at"] and first["verdict"]["verdict"] == "INCONCLUSIVE"
    status = sim.run("fleet_rollout.status", rollout_id=rollout_id)
    assert "proceed:alice" in output(status)["table"]
    state = keys[f"host.{odd}"]
    assert state["status"] == "restored" and state["error"]["step"] == "probe", state
    assert "fingerprint: remote_ns" in state["error"]["message"], state["error"]
    assert "outside the spread of 2 control hosts" in state["error"]["message"]
    sim.wait_idle()
    assert sim.bmc(odd)["logical"] == EARLY and not sim.drained(odd)
    for host in (h for b in batches for h in b["hosts"] if h != odd):
        assert keys[f"host.{host}"]["status"] == "done", host
        assert sim.bmc(host)["logical"] == HOME, host


def test_chatops_aliases_plan_approve_and_status(small_lab):
    """The approval answered in chat: `rollout approve <id>` finds the rollout's inquiry through
    the StackStorm API (served by the runtime) and records who approved."""
    sim = small_lab
    profile = sim.profile("interleave-on", approval={"required": True,
                                                     "auto_approve_canary": False},
                          batches={"canary_size": 6, "max_unavailable_per_rack": 6,
                                   "max_unavailable_per_site": 6})
    planned = sim.cli("chat", f"rollout plan {profile} on lab-001")
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "canary batch" in planned.stdout
    execution = sim.ask_run("fleet_rollout.rollout", profile=profile, targets="lab-001:lab-002")
    assert sim.waiting(execution), error_text(execution)
    rollout_id = sim.kv_ids()[-1]
    approved = sim.cli("chat", f"rollout approve {rollout_id}")
    assert approved.returncode == 0, approved.stderr[-2000:] + approved.stdout[-2000:]
    assert f"alice answered approve for rollout {rollout_id}" in approved.stdout
    doc = sim.settle(execution["id"])
    while sim.waiting(doc):
        sim.cli("chat", f"rollout approve {rollout_id}")  # proceed after INCONCLUSIVE
        doc = sim.settle(execution["id"])
    assert doc["status"] in ("succeeded", "failed"), doc["status"]
    assert sim.kv(rollout_id, "batch.0")["approval"]["by"] == "alice"
    status = sim.cli("chat", f"rollout status {rollout_id}")
    assert status.returncode == 0 and "lab-001" in status.stdout


def test_abort_mid_batch_touches_no_further_host(small_lab):
    sim = small_lab
    profile = sim.profile("home-snoop", approval={"required": False},
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 4, "parallel": 1})
    proc = sim.start("fleet_rollout.rollout", profile=profile)
    deadline = time.time() + 180
    rollout_id = None
    while time.time() < deadline and rollout_id is None:
        ids = sim.kv_ids()
        if ids and any(sim.drained(h) for h in sim.host_names()):
            rollout_id = ids[-1]
        time.sleep(0.3)
    assert rollout_id, "the rollout never drained a host"
    aborted = sim.run("fleet_rollout.abort", rollout_id=rollout_id)
    assert aborted["status"] == "succeeded", error_text(aborted)
    out, err = proc.communicate(timeout=600)
    plan = sim.kv(rollout_id, "plan")
    batch0 = plan["batches"][0]["hosts"]
    later = [h for b in plan["batches"][1:] for h in b["hosts"]]
    _assert_untouched(sim, later)
    sim.wait_idle()
    for host in batch0:
        state = sim.kv(rollout_id, f"host.{host}")
        if state is None:  # the abort came before this host started: nothing was done to it
            _assert_untouched(sim, [host])
            continue
        # in flight when the abort came: finished and back in service, restored, or marked
        assert state.get("status") in ("done", "restored", "failed", "left_drained"), (host, state)
        assert sim.drained(host) == (state.get("status") == "left_drained"), (host, state)
    assert sim.kv(rollout_id, "halt")["reason"] == "halted by alice"
