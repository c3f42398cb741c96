"""Approvals carry the authenticated identity, on every path, through the strict embedded
runtime on a sim lab: `inquiry respond` (st2 inquiry respond / the API), the chat alias
(`rollout approve <id>`: an alias execution run by the chat bot's account for a chat user), and
`run fleet_rollout.respond` (st2 run). Only configured approvers may answer; the recorded
approver is who StackStorm authenticated, never a typed name."""
from __future__ import annotations

import json
import time

import pytest
from rollout_support import SimLab, error_text, output

EARLY = {"snoop_mode": "early", "node_interleaving": "disabled"}
ASK_EVERY_BATCH = {"required": True, "auto_approve_canary": False}


@pytest.fixture()
def lab(tmp_path):
    sim = SimLab(str(tmp_path), 2, approvers=["alice", "bob"])
    yield sim
    sim.down()


def _untouched(sim):
    for host in sim.host_names():
        doc = sim.bmc(host)
        assert doc["logical"] == EARLY and doc["resets"] == [], host
        assert not sim.drained(host), host


def test_rollout_needing_approval_refuses_to_start_without_approvers(lab):
    lab.set_config(approvers=[], approver_roles=[])
    execution = lab.ask_run("fleet_rollout.rollout",
                        profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert execution["status"] == "failed"
    assert "names no approvers and no approver_roles" in error_text(execution)
    assert lab.pending() == []
    _untouched(lab)


def test_only_approvers_answer_and_the_authenticated_identity_is_recorded(lab):
    execution = lab.ask_run("fleet_rollout.rollout",
                        profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    [inquiry] = lab.pending()
    assert sorted(inquiry["users"]) == ["alice", "bob", "chatops_bot"]

    # st2 inquiry respond as a non-approver: refused by the inquiry's users
    refused = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"approved": true}',
                      user="mallory")
    assert refused.returncode != 0
    assert 'User "mallory" is not authorized' in refused.stdout + refused.stderr
    # a chat user who is no approver: the respond action refuses, naming them
    chat = lab.cli("chat", "--user", "mallory", f"rollout approve {rollout_id}")
    assert "Refused: mallory is not an approver (approvers: alice, bob)" in chat.stdout, (
        chat.stdout[-2000:] + chat.stderr[-2000:])
    assert [i["id"] for i in lab.pending()] == [inquiry["id"]]
    _untouched(lab)

    # an approver answers directly: recorded as the authenticated user, whatever is typed
    answer = lab.cli("inquiry", "respond", inquiry["id"], "-r",
                     '{"approved": true, "chat_user": "bob"}', "--json")
    assert answer.returncode == 0, answer.stderr[-2000:]
    final = lab.settle(execution["id"])
    approval = lab.kv(rollout_id, "batch.0")["approval"]
    assert (approval["by"], approval["via"], approval["approved"]) == ("alice", "api", True)
    final = lab.settle(execution["id"])
    if lab.waiting(final):  # an INCONCLUSIVE verdict asks again: roll back
        lab.cli("chat", "--user", "bob", f"rollout reject {rollout_id}")
        final = lab.settle(execution["id"])
    assert final["status"] in ("succeeded", "failed"), final["status"]


def test_typed_approver_name_is_refused_by_the_schema(lab):
    execution = lab.ask_run("fleet_rollout.rollout",
                        profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert lab.waiting(execution), error_text(execution)
    [inquiry] = lab.pending()
    typed = lab.cli("inquiry", "respond", inquiry["id"], "-r",
                    '{"approved": true, "by": "bob"}')
    assert typed.returncode != 0 and "did not pass schema validation" in (
        typed.stdout + typed.stderr)
    assert len(lab.pending()) == 1


def test_non_approver_run_of_respond_fails_and_answers_nothing(lab):
    execution = lab.ask_run("fleet_rollout.rollout",
                        profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    out = lab.cli("run", "fleet_rollout.respond", f"rollout_id={rollout_id}",
                  "decision=approve", "--json", user="mallory")
    doc = json.loads(out.stdout)
    assert doc["status"] == "failed"
    assert output(doc)["message"].startswith("Refused: mallory is not an approver")
    assert len(lab.pending()) == 1
    _untouched(lab)


def test_chat_approval_is_recorded_as_the_chat_user(lab):
    profile = lab.profile("home-snoop", approval=ASK_EVERY_BATCH,
                          batches={"canary_size": 2, "max_unavailable_per_rack": 2,
                                   "max_unavailable_per_site": 2})
    execution = lab.ask_run("fleet_rollout.rollout", profile=profile)
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    chat = lab.cli("chat", "--user", "bob", f"rollout approve {rollout_id}")
    assert f"bob answered approve for rollout {rollout_id}" in chat.stdout, chat.stdout[-2000:]
    final = lab.settle(execution["id"])
    while lab.waiting(final):  # an INCONCLUSIVE verdict: go on
        lab.cli("chat", "--user", "bob", f"rollout approve {rollout_id}")
        final = lab.settle(execution["id"])
    assert output(final)["status"] == "completed", error_text(final)
    approval = lab.kv(rollout_id, "batch.0")["approval"]
    assert (approval["by"], approval["via"], approval["account"]) == (
        "bob", "chat", "chatops_bot")
    audit = lab.cli("run", "fleet_rollout.status", f"rollout_id={rollout_id}", "--json")
    assert "bob" in audit.stdout


def test_an_unanswered_approval_times_out_and_the_rollout_ends_with_nothing_changed(lab):
    """rollout_batch's other branch of the approval: nobody answers within approval.ttl_minutes
    (1), the inquiry times out (core.ask fails), the batch records a refusal by nobody and the
    rollout ends rejected with every host untouched and nothing left pending."""
    execution = lab.ask_run("fleet_rollout.rollout",
                        profile=lab.profile("home-snoop",
                                            approval=dict(ASK_EVERY_BATCH, ttl_minutes=1)))
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    assert len(lab.pending()) == 1
    # the background engine times the inquiry out after its ttl; the batch reads that
    final = lab.wait_status(execution["id"], ("succeeded", "failed", "canceled"), timeout=300)
    assert final["status"] in ("succeeded", "failed"), final["status"]
    approval = lab.kv(rollout_id, "batch.0")["approval"]
    assert (approval["outcome"], approval["approved"], approval["by"]) == (
        "timed_out", False, "nobody (the question timed out)")
    assert lab.kv(rollout_id, "meta")["status"] == "rejected", lab.kv(rollout_id, "meta")
    assert lab.pending() == []
    _untouched(lab)


def test_an_abort_while_the_approval_waits_cancels_the_question_and_changes_nothing(lab):
    """The batch waits for its answer with a task running, not paused: an abort reaches it
    there. The question is canceled (a late answer is refused by the runtime, as by st2), the
    batch ends without a rollback and every host is untouched."""
    execution = lab.ask_run("fleet_rollout.rollout",
                            profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert lab.waiting(execution), error_text(execution)
    assert execution["status"] == "running"
    rollout_id = lab.kv_ids()[-1]
    [inquiry] = lab.pending()
    aborted = lab.cli("run", "fleet_rollout.abort", f"rollout_id={rollout_id}", "--json",
                      user="bob")
    assert json.loads(aborted.stdout)["status"] == "succeeded", aborted.stdout[-2000:]
    final = lab.wait_status(execution["id"], ("succeeded", "failed", "canceled"), timeout=300)
    assert final["status"] in ("succeeded", "failed"), final["status"]
    assert lab.pending() == []
    late = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"approved": true}')
    assert late.returncode != 0
    approval = lab.kv(rollout_id, "batch.0")["approval"]
    assert (approval["outcome"], approval["approved"]) == ("halted", False)
    assert approval["reason"] == "the rollout was halted: halted by bob"
    assert lab.kv(rollout_id, "halt")["by"] == "bob"
    _untouched(lab)


def _question_workflow(sim, inquiry_id):
    doc = json.loads(sim.cli("execution", "get", inquiry_id, "--json").stdout)
    return doc.get("parent") or doc["liveaction"]["context"]["parent"]["execution_id"]


def test_a_resume_by_somebody_else_never_names_the_approver(lab):
    """mallory resumes alice's question before she answers (`execution resume`: StackStorm then
    records mallory as resumed_by, and alice's answer resumes nothing): the answer names
    nobody, is not counted either way, and the question is asked again saying why. alice's
    answer to that counts, and mallory's pause and resume after it change nothing."""
    lab.set_config(answer_gap=5)
    execution = lab.ask_run("fleet_rollout.rollout",
                            profile=lab.profile("home-snoop", approval=ASK_EVERY_BATCH))
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    [inquiry] = lab.pending()
    workflow = _question_workflow(lab, inquiry["id"])
    out = lab.cli("execution", "resume", workflow, "--no-wait", user="mallory")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    time.sleep(6)  # later than the configured answer_gap
    out = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"approved": true}', "--no-wait")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    deadline = time.time() + 120
    while time.time() < deadline and not [i for i in lab.pending() if i["id"] != inquiry["id"]]:
        time.sleep(0.5)
    [again] = lab.pending()
    message = again["schema"]["properties"]["approved"]["description"]
    assert message.startswith(f"Asked again: the answer to inquiry {inquiry['id']} was not "
                              "counted: its workflow was resumed"), message
    assert "before the answer (by mallory)" in message
    assert "approval" not in lab.kv(rollout_id, "batch.0")
    _untouched(lab)

    out = lab.cli("inquiry", "respond", again["id"], "-r", '{"approved": true}', "--no-wait")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    second = _question_workflow(lab, again["id"])
    for op in ("pause", "resume"):  # after the answer: refused or too late, never counted
        lab.cli("execution", op, second, "--no-wait", user="mallory")
    final = lab.settle(execution["id"])
    approval = lab.kv(rollout_id, "batch.0")["approval"]
    assert (approval["by"], approval["via"], approval["approved"]) == ("alice", "api", True)
    entries = lab.audit(rollout_id)
    [unattributed] = [e for e in entries if e["action"] == "answer_unattributed"]
    assert unattributed["old"] == inquiry["id"] and "by mallory" in unattributed["new"]
    while lab.waiting(final):  # an INCONCLUSIVE verdict: roll back
        lab.cli("chat", "--user", "bob", f"rollout reject {rollout_id}")
        final = lab.settle(execution["id"])
    assert final["status"] in ("succeeded", "failed"), final["status"]
