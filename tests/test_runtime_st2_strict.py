"""The embedded runtime is as strict as StackStorm 3.9 (orquesta 1.6) where StackStorm is strict.
Each test reproduces one thing the pack once did that st2 refused (the pack ran on st2 and
stopped at its first approval) with a small workflow of tests/fixtures/st2_strict_pack."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from fleet_runtime.engine import Runtime
from fleet_runtime.errors import InquiryError, MetadataError
from fleet_runtime.testing import FIXTURE_PACK, children, engine, fixture_home, run, wait
from fleet_runtime.wfyaml import load_definition

STRICT_PACK = Path(__file__).resolve().parent / "fixtures" / "st2_strict_pack"


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_home(tmp_path / "home", monkeypatch)


@pytest.fixture()
def rt(home: Path) -> Iterator[Runtime]:
    runtime = engine(home, packs=[str(FIXTURE_PACK), str(STRICT_PACK)])
    yield runtime
    runtime.close()


# 1. YAML merge keys ------------------------------------------------------------------------
def test_workflow_yaml_loads_like_orquesta_16():
    assert load_definition("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}
    with pytest.raises(ValueError, match="tag:yaml.org,2002:merge"):
        load_definition("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n")
    with pytest.raises(ValueError, match='found duplicate key "a"'):
        load_definition("a: 1\na: 2\n")


def test_a_workflow_with_merge_keys_is_refused(home: Path, tmp_path: Path):
    pack = tmp_path / "merge_pack"
    shutil.copytree(STRICT_PACK, pack)
    flow = pack / "actions" / "workflows" / "who.yaml"
    flow.write_text(flow.read_text().replace(
        "tasks:\n  pick:\n    action: core.noop\n",
        "tasks:\n  pick: &base\n    action: core.noop\n  again:\n    <<: *base\n"))
    with pytest.raises(MetadataError, match="could not determine a constructor for the tag"):
        engine(home, packs=[str(FIXTURE_PACK), str(pack)])


# 2. inquiry schemas ------------------------------------------------------------------------
def test_draft4_list_required_makes_every_answer_fail(rt: Runtime):
    ex = run(rt, "st2_strict.ask_list_required", {"list_form": True})
    assert ex["status"] == "paused"
    [ask] = [c for c in children(rt, ex["id"]) if c["runner"] == "inquirer"]
    with pytest.raises(InquiryError, match="did not pass schema validation"):
        rt.respond(ask["id"], {"approved": True})


def test_st2_required_form_accepts_answers_and_refuses_missing_fields(rt: Runtime):
    ex = run(rt, "st2_strict.ask_list_required", {"list_form": False})
    [ask] = [c for c in children(rt, ex["id"]) if c["runner"] == "inquirer"]
    with pytest.raises(InquiryError, match="'approved' is a required property"):
        rt.respond(ask["id"], {})
    rt.respond(ask["id"], {"approved": True}, requester="alice")
    assert wait(rt, ex["id"], until_completed=True)["status"] == "succeeded"


def test_answer_records_the_requester_on_the_resumed_workflow(rt: Runtime):
    """st2's inquiry service resumes the asking workflow as the requester (resumed_by)."""
    ex = run(rt, "st2_strict.ask_list_required", {"list_form": False})
    [ask] = [c for c in children(rt, ex["id"]) if c["runner"] == "inquirer"]
    rt.respond(ask["id"], {"approved": True}, requester="alice")
    wait(rt, ex["id"], until_completed=True)
    assert rt.store.get_execution(ex["id"])["context"]["resumed_by"] == "alice"


# 3. ctx(st2) keys ----------------------------------------------------------------------------
def test_api_user_exists_only_for_alias_executions(rt: Runtime):
    direct = run(rt, "st2_strict.who", {"direct": True})
    assert direct["status"] == "failed"
    assert "Unable to resolve key 'api_user'" in json.dumps(direct["result"])
    safe = run(rt, "st2_strict.who", {"direct": False})
    assert safe["status"] == "succeeded"
    assert safe["result"]["output"] == {"who": None, "user": "operator"}
    chat = run(rt, "st2_strict.who", {"direct": True},
               context={"user": "chatops_bot", "api_user": "alice", "source_channel": "ops"})
    assert chat["result"]["output"] == {"who": "alice", "user": "chatops_bot"}


# 5. retry policies -------------------------------------------------------------------------
def test_retry_policy_is_not_applied_inside_a_workflow(rt: Runtime):
    ex = run(rt, "st2_strict.flaky_in_flow", {"key": "inside"})
    assert ex["status"] == "failed"
    flaky = rt.store.find_executions("action='rt_test.flaky'")
    assert len(flaky) == 1, "st2 does not re-run an action that runs inside a workflow"


def test_orquesta_task_retry_catches_a_timeout(rt: Runtime):
    ex = run(rt, "st2_strict.slow_retry", timeout=60)
    assert ex["status"] == "failed"
    attempts = [c for c in children(rt, ex["id"]) if c["action"] == "core.local"]
    assert len(attempts) == 2 and all(a["status"] == "timeout" for a in attempts)


# 6. rule parameters ------------------------------------------------------------------------
def test_rule_parameters_render_strictly_on_a_payload_without_output(rt: Runtime):
    """st2's cancel result is {message, user}: no output; the old rule shape fails to render."""
    rt.emit_trigger("core.st2.generic.actiontrigger", {
        "execution_id": "e1", "status": "canceled", "action_ref": "st2_strict.ended",
        "result": {"message": "Action canceled by user.", "user": "operator"}})
    rows = rt.store.conn.execute(
        "SELECT status, failure_reason FROM rule_enforcements WHERE rule=?",
        ("st2_strict.ended_strict",)).fetchall()
    assert [r[0] for r in rows] == ["failed"]
    assert "output" in rows[0][1]


# 7. chatops routes -------------------------------------------------------------------------
def test_only_the_chatops_route_reaches_chat(rt: Runtime, home: Path):
    run(rt, "chatops.post_message", {"channel": "ops", "message": "to a private route",
                                     "route": "fleet-rollout"})
    run(rt, "chatops.post_message", {"channel": "ops", "message": "to the bots"})
    chat = (home / "chat.jsonl").read_text()
    assert "to the bots" in chat and "to a private route" not in chat
    other = [json.loads(x) for x in (home / "announcements.jsonl").read_text().splitlines()]
    assert [(o["event"], o["message"]) for o in other] == [
        ("st2.announcement__fleet-rollout", "to a private route")]


# approvals through the API ------------------------------------------------------------------
def test_api_refuses_an_answer_from_a_user_the_inquiry_does_not_name(rt: Runtime):
    """The inquiry API checks the token's user against the inquiry's users (st2: 403)."""
    import requests

    ex = run(rt, "rt_test.ask_flow", {"users": ["alice"]})
    [ask] = [c for c in children(rt, ex["id"]) if c["runner"] == "inquirer"]
    url = f"{rt.api.url}/inquiries/{ask['id']}"
    body = {"id": ask["id"], "response": {"approved": True}}
    refused = requests.put(url, json=body, timeout=10,
                           headers={"X-Auth-Token": rt.api.issue_token("mallory")})
    assert refused.status_code == 403 and "mallory" in refused.json()["faultstring"]
    allowed = requests.put(url, json=body, timeout=10,
                           headers={"X-Auth-Token": rt.api.issue_token("alice")})
    assert allowed.status_code == 200, allowed.text
    final = wait(rt, ex["id"], until_completed=True)
    assert final["status"] == "succeeded"
    assert rt.store.get_execution(ex["id"])["context"]["resumed_by"] == "alice"
