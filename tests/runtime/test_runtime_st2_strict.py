"""The embedded runtime is as strict as StackStorm 3.9 (orquesta 1.6) where StackStorm is strict.

Each test reproduces one thing StackStorm does that an earlier, laxer runtime did not (the pack
ran on st2 and stopped at its first approval), with small workflows of a pack the tests write
(`st2_strict`, below) and the runtime's fixture pack (rt_test). docs/runtime.md lists each
behaviour with its StackStorm source.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import requests
from jsonschema import SchemaError, ValidationError
from runtime_support import (
    FIXTURE_PACK,
    children,
    cli_inprocess,
    engine,
    fixture_home,
    run,
    wait,
)

from fleet_runtime import chatlog, hazards, st2ctx
from fleet_runtime.engine import Runtime
from fleet_runtime.runtime_errors import ExecutionStateError, InquiryError, ParameterError
from fleet_runtime.schema import validate_instance
from fleet_runtime.wfyaml import load_definition

PACK_FILES: Dict[str, str] = {
    "pack.yaml": """\
ref: st2_strict
name: st2_strict
description: What StackStorm refuses or treats strictly (tests/runtime/test_runtime_st2_strict.py).
version: 0.1.0
author: fleet_rollout engineers
""",
    # --- workflow YAML as orquesta 1.6 loads it
    "actions/anchors.yaml": "name: anchors\nrunner_type: orquesta\n"
                            "entry_point: workflows/anchors.yaml\n",
    "actions/workflows/anchors.yaml": """\
version: 1.0
vars:
  - greeting: &hello hello
tasks:
  one: &step
    action: core.noop
  two: *step
output:
  - said: *hello
""",
    "actions/merge.yaml": "name: merge\nrunner_type: orquesta\nentry_point: workflows/merge.yaml\n",
    "actions/workflows/merge.yaml": """\
version: 1.0
tasks:
  one: &step
    action: core.noop
  two:
    <<: *step
""",
    "actions/dupkey.yaml": "name: dupkey\nrunner_type: orquesta\n"
                           "entry_point: workflows/dupkey.yaml\n",
    "actions/workflows/dupkey.yaml": """\
version: 1.0
tasks:
  one:
    action: core.noop
  one:
    action: core.noop
""",
    # --- inquiry schemas
    "actions/ask_required.yaml": """\
name: ask_required
runner_type: orquesta
description: "A core.ask whose schema marks required fields as st2 does, or with Draft 4's list."
entry_point: workflows/ask_required.yaml
parameters:
  list_form:
    type: boolean
    default: true
""",
    "actions/workflows/ask_required.yaml": """\
version: 1.0
input:
  - list_form
tasks:
  route:
    action: core.noop
    next:
      - when: <% ctx(list_form) %>
        do: ask_list
      - when: <% not ctx(list_form) %>
        do: ask_st2
  ask_list:
    action: core.ask
    input:
      schema:
        type: object
        properties:
          approved:
            type: boolean
        required:
          - approved
    next:
      - do: done
  ask_st2:
    action: core.ask
    input:
      schema:
        type: object
        properties:
          approved:
            type: boolean
            required: true
    next:
      - do: done
  done:
    action: core.noop
""",
    # --- ctx(st2)
    "actions/who.yaml": """\
name: who
runner_type: orquesta
description: "Reads ctx(st2).api_user directly and with get()."
entry_point: workflows/who.yaml
parameters:
  direct:
    type: boolean
    default: true
""",
    "actions/workflows/who.yaml": """\
version: 1.0
input:
  - direct
vars:
  - who: null
tasks:
  pick:
    action: core.noop
    next:
      - when: <% ctx(direct) %>
        publish:
          - who: <% ctx(st2).api_user %>
      - when: <% not ctx(direct) %>
        publish:
          - who: <% ctx(st2).get("api_user") %>
output:
  - who: <% ctx(who) %>
  - user: <% ctx(st2).user %>
""",
    "actions/keys.yaml": "name: keys\nrunner_type: orquesta\nentry_point: workflows/keys.yaml\n",
    "actions/workflows/keys.yaml": """\
version: 1.0
tasks:
  child:
    action: core.noop
output:
  - st2: <% ctx(st2) %>
""",
    "triggers/poke.yaml": "name: poke\ndescription: starts st2_strict.keys\n",
    "rules/keys_on_poke.yaml": """\
name: keys_on_poke
enabled: true
trigger:
  type: st2_strict.poke
action:
  ref: st2_strict.keys
""",
    "aliases/keys.yaml": """\
name: keys
action_ref: st2_strict.keys
formats:
  - show st2 keys
""",
    # --- retry policies and timeouts
    "actions/flaky_in_flow.yaml": """\
name: flaky_in_flow
runner_type: orquesta
description: "Runs rt_test.flaky (which has a retry policy) inside a workflow."
entry_point: workflows/flaky_in_flow.yaml
parameters:
  key:
    type: string
    required: true
""",
    "actions/workflows/flaky_in_flow.yaml": """\
version: 1.0
input:
  - key
tasks:
  once:
    action: rt_test.flaky
    input:
      key: <% ctx(key) %>
      failures: 1
""",
    "actions/slow_retry.yaml": "name: slow_retry\nrunner_type: orquesta\n"
                               "entry_point: workflows/slow_retry.yaml\n",
    "actions/workflows/slow_retry.yaml": """\
version: 1.0
tasks:
  slow:
    action: core.local
    input:
      cmd: sleep 5
      timeout: 1
    retry:
      when: <% failed() and str(result().get("error")).startsWith("Action failed to complete in") %>
      count: 1
      delay: 0
""",
    # --- rule parameters
    "rules/ended_strict.yaml": """\
name: ended_strict
enabled: true
trigger:
  type: core.st2.generic.actiontrigger
criteria:
  trigger.action_ref:
    type: equals
    pattern: st2_strict.ended
action:
  ref: chatops.post_message
  parameters:
    channel: ops
    message: "ended {{ trigger.result.output.name | default(trigger.execution_id) }}"
""",
    "rules/ended_default.yaml": """\
name: ended_default
enabled: true
trigger:
  type: core.st2.generic.actiontrigger
criteria:
  trigger.action_ref:
    type: equals
    pattern: st2_strict.ended
action:
  ref: chatops.post_message
  parameters:
    channel: ops
    message: "output {{ trigger.result.output | default('missing') }}"
""",
    # --- pause / resume / cancel requesters, inquiries answered while pausing
    "actions/outer.yaml": "name: outer\nrunner_type: orquesta\nentry_point: workflows/outer.yaml\n",
    "actions/workflows/outer.yaml": """\
version: 1.0
tasks:
  inner:
    action: st2_strict.inner
""",
    "actions/inner.yaml": "name: inner\nrunner_type: orquesta\nentry_point: workflows/inner.yaml\n",
    "actions/workflows/inner.yaml": """\
version: 1.0
tasks:
  wait:
    action: core.local
    input:
      cmd: sleep 1
    next:
      - do: again
  again:
    action: core.local
    input:
      cmd: sleep 1
""",
    "actions/ask_and_work.yaml": "name: ask_and_work\nrunner_type: orquesta\n"
                                 "entry_point: workflows/ask_and_work.yaml\n",
    "actions/workflows/ask_and_work.yaml": """\
version: 1.0
tasks:
  start:
    action: core.noop
    next:
      - do: [ask, work]
  ask:
    action: core.ask
    next:
      - do: done
  work:
    action: core.local
    input:
      cmd: sleep 2
  done:
    action: core.noop
""",
    # --- a known st2 hazard: an inquiry after which the workflow ends
    "actions/ask_last.yaml": "name: ask_last\nrunner_type: orquesta\n"
                             "entry_point: workflows/ask_last.yaml\n",
    "actions/workflows/ask_last.yaml": """\
version: 1.0
tasks:
  start:
    action: core.noop
    next:
      - do: question
  question:
    action: core.ask
    next:
      - when: <% succeeded() %>
        do: noop
""",
    # --- orquesta 1.6 behaviours
    "actions/join_on_failure.yaml": "name: join_on_failure\nrunner_type: orquesta\n"
                                    "entry_point: workflows/join_on_failure.yaml\n",
    "actions/workflows/join_on_failure.yaml": """\
version: 1.0
tasks:
  start:
    action: core.noop
    next:
      - do: [broken, slow]
  broken:
    action: core.local
    input:
      cmd: exit 3
    next:
      - when: <% failed() %>
        do: together
  slow:
    action: core.local
    input:
      cmd: sleep 1
    next:
      - when: <% succeeded() %>
        do: together
  together:
    join: all
    action: core.noop
""",
    "actions/items_zero.yaml": "name: items_zero\nrunner_type: orquesta\n"
                               "entry_point: workflows/items_zero.yaml\n",
    "actions/workflows/items_zero.yaml": """\
version: 1.0
tasks:
  each:
    with:
      items: <% [1, 2, 3] %>
      concurrency: 0
    action: core.noop
""",
    "actions/sandbox.yaml": "name: sandbox\nrunner_type: orquesta\n"
                            "entry_point: workflows/sandbox.yaml\n",
    "actions/workflows/sandbox.yaml": """\
version: 1.0
tasks:
  one:
    action: core.noop
output:
  - cls: '{{ "x".__class__.__name__ }}'
""",
}

ST2_KEYS = {"action_execution_id", "api_url", "user", "pack", "action", "runner",
            "workflow_execution_id"}


def write_pack(root: Path, files: Dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("FLEET_ROLLOUT_CHATOPS_USER", raising=False)
    return fixture_home(tmp_path / "home", monkeypatch)


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    return write_pack(tmp_path / "st2_strict", PACK_FILES)


@pytest.fixture()
def packs(pack: Path) -> List[str]:
    return [str(FIXTURE_PACK), str(pack)]


@pytest.fixture()
def rt(home: Path, packs: List[str]) -> Iterator[Runtime]:
    runtime = engine(home, packs=packs)
    yield runtime
    runtime.close()


def api_get(rt: Runtime, path: str, user: str = "operator") -> Any:
    response = requests.get(f"{rt.api.url}/{path}", timeout=10,
                            headers={"X-Auth-Token": rt.api.issue_token(user)})
    assert response.status_code == 200, response.text
    return response.json()


def inquiry_below(rt: Runtime, ex_id: str) -> Dict[str, Any]:
    for child in children(rt, ex_id):
        if child["runner"] == "inquirer":
            return child
        if child["runner"] == "orquesta":
            try:
                return inquiry_below(rt, child["id"])
            except LookupError:
                continue
    raise LookupError(f"no inquiry below {ex_id}")


# 1. workflow YAML ----------------------------------------------------------------------------
def test_workflow_yaml_loads_like_orquesta_16() -> None:
    assert load_definition("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}
    with pytest.raises(ValueError, match="tag:yaml.org,2002:merge"):
        load_definition("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n")
    with pytest.raises(ValueError, match='found duplicate key "a"'):
        load_definition("a: 1\na: 2\n")


def test_merge_keys_register_but_every_run_fails_and_validate_reports_them(
        rt: Runtime, home: Path, packs: List[str]) -> None:
    """st2 registers the action (registration does not parse workflows); running it fails
    with orquesta's loader message. Plain anchors and aliases load and run."""
    assert "st2_strict.merge" in rt.registry.actions
    ex = run(rt, "st2_strict.merge")
    assert ex["status"] == "failed" and ex["result"]["output"] is None
    [error] = ex["result"]["errors"]
    assert error["message"].startswith(
        "Failed to load workflow definition because could not determine a constructor for"
        " the tag 'tag:yaml.org,2002:merge'")
    dup = run(rt, "st2_strict.dupkey")
    assert dup["status"] == "failed"
    assert 'found duplicate key "one"' in dup["result"]["errors"][0]["message"]
    anchors = run(rt, "st2_strict.anchors")
    assert anchors["status"] == "succeeded"
    assert anchors["result"]["output"] == {"said": "hello"}
    assert [c["task_id"] for c in children(rt, anchors["id"])] == ["one", "two"]
    rt.close()
    code, out, err = cli_inprocess(home, "pack", "validate", packs=packs)
    assert code == 2 and not out.strip().endswith("OK")
    assert "workflows/merge.yaml: Failed to load workflow definition because could not" in err
    assert 'workflows/dupkey.yaml: Failed to load workflow definition because found duplicate' \
        in err
    assert "anchors.yaml" not in err


# 2. schemas: inquiry answers and parameters ---------------------------------------------------
def test_draft4_list_required_makes_every_answer_fail(rt: Runtime) -> None:
    """st2 validates answers with CustomValidator, and jsonschema.validate checks the schema
    against its meta-schema (custom.json, `required` a boolean) first: HTTP 400 for any answer."""
    ex = run(rt, "st2_strict.ask_required", {"list_form": True})
    assert ex["status"] == "paused"
    ask = inquiry_below(rt, ex["id"])
    for answer in ({"approved": True}, {}, {"approved": "yes"}):
        with pytest.raises(InquiryError, match=r"did not pass schema validation\. \['approved'\]"
                           " is not of type 'boolean'"):
            rt.respond(ask["id"], answer)
    url = f"{rt.api.url}/inquiries/{ask['id']}"
    refused = requests.put(url, json={"id": ask["id"], "response": {"approved": True}},
                           headers={"X-Auth-Token": rt.api.issue_token("operator")}, timeout=10)
    assert refused.status_code == 400 and "did not pass schema" in refused.json()["faultstring"]
    # st2's form: `required: true` inside the property
    ex = run(rt, "st2_strict.ask_required", {"list_form": False})
    ask = inquiry_below(rt, ex["id"])
    with pytest.raises(InquiryError, match="'approved' is a required property"):
        rt.respond(ask["id"], {})
    rt.respond(ask["id"], {"approved": True}, requester="alice")
    assert wait(rt, ex["id"], until_completed=True)["status"] == "succeeded"


def test_defaults_and_nulls_follow_st2_validate() -> None:
    """st2common/util/schema validate(use_default, allow_default_none): an optional property
    without a type takes a string or null; defaults are filled only under `type: object`
    (into nested objects and array items); the schema is checked first."""
    loose = {"type": "object", "properties": {"comment": {"description": "free text"}}}
    assert validate_instance({"comment": None}, loose) == {"comment": None}
    assert validate_instance({"comment": "ok"}, loose) == {"comment": "ok"}
    with pytest.raises(ValidationError, match="5 is not of type 'string', 'null'"):
        validate_instance({"comment": 5}, loose)
    untyped = {"properties": {"approved": {"type": "boolean", "required": True,
                                           "default": False}}}
    with pytest.raises(ValidationError, match="'approved' is a required property"):
        validate_instance({}, untyped)
    assert validate_instance({}, dict(untyped, type="object")) == {"approved": False}
    nested = {"type": "object", "properties": {"hosts": {"type": "array", "items": {
        "type": "object", "properties": {"port": {"type": "integer", "default": 623}}}}}}
    assert validate_instance({"hosts": [{}, {"port": 1}]}, nested) == {
        "hosts": [{"port": 623}, {"port": 1}]}
    with pytest.raises(SchemaError):
        validate_instance({"a": 1}, {"type": "object", "required": ["a"]})


def test_an_immutable_parameter_cannot_be_given_even_with_its_default(rt: Runtime) -> None:
    """services/action.py create_request refuses any immutable parameter in the request."""
    with pytest.raises(ParameterError, match=r"Override of immutable parameter\(s\) cmd"):
        rt.request("core.echo", {"message": "hi", "cmd": 'echo "{{message}}"'})
    assert run(rt, "core.echo", {"message": "hi"})["result"]["stdout"] == "hi"


def test_pack_config_is_validated_as_written_before_dynamic_values_render(
        home: Path, tmp_path: Path) -> None:
    """st2 validates the config file at registration (ConfigAPI, validate_config_against_schema)
    with its Jinja values unrendered: an enum attribute cannot take a datastore expression."""
    from fleet_runtime.runtime_errors import MetadataError

    regional = write_pack(tmp_path / "regional", {
        "pack.yaml": "ref: regional\nname: regional\ndescription: d\nversion: 0.1.0\n"
                     "author: a\n",
        "config.schema.yaml": "region:\n  type: string\n  enum: [eu, us]\n",
    })
    rt = engine(home, packs=[str(FIXTURE_PACK), str(regional)])
    rt.datastore.set("region", "eu")
    rt.close()
    (home / "configs" / "regional.yaml").write_text('region: "{{ st2kv.system.region }}"\n')
    with pytest.raises(MetadataError, match=r"regional.yaml: region: .* is not one of \['eu',"):
        engine(home, packs=[str(FIXTURE_PACK), str(regional)])
    (home / "configs" / "regional.yaml").write_text("region: eu\n")
    rt = engine(home, packs=[str(FIXTURE_PACK), str(regional)])
    assert rt.pack_config("regional") == {"region": "eu"}
    rt.close()


# 3. ctx(st2) and execution contexts -----------------------------------------------------------
def test_api_user_exists_only_for_alias_executions(rt: Runtime) -> None:
    direct = run(rt, "st2_strict.who", {"direct": True})
    assert direct["status"] == "failed"
    assert "Unable to resolve key 'api_user'" in json.dumps(direct["result"])
    safe = run(rt, "st2_strict.who", {"direct": False})
    assert safe["status"] == "succeeded"
    assert safe["result"]["output"] == {"who": None, "user": "operator"}
    chat = run(rt, "st2_strict.who", {"direct": True},
               context=st2ctx.alias_context("st2_strict.x", "x", "alice", "chatops_bot", "ops"))
    assert chat["result"]["output"] == {"who": "alice", "user": "chatops_bot"}


def _keys_run(rt: Runtime, ex_id: str) -> Dict[str, Any]:
    final = wait(rt, ex_id, until_completed=True)
    assert final["status"] == "succeeded", final["result"]
    [child] = children(rt, ex_id)
    return {"st2": final["result"]["output"]["st2"], "context": final["context"],
            "child": child["context"]}


def test_st2_context_holds_st2s_keys_for_each_way_of_starting(
        rt: Runtime, home: Path, packs: List[str]) -> None:
    # the API / CLI
    api = _keys_run(rt, rt.request("st2_strict.keys", {}))
    assert set(api["st2"]) == ST2_KEYS and api["st2"]["user"] == "operator"
    assert set(api["context"]) == {"user", "pack"}
    assert set(api["child"]) == {"pack", "user", "parent", "orquesta"}
    assert api["child"]["parent"] == {"execution_id": api["st2"]["action_execution_id"],
                                      "user": "operator", "pack": "st2_strict"}
    assert set(api["child"]["orquesta"]) == {"workflow_execution_id", "task_execution_id",
                                             "task_name", "task_id", "task_route"}
    # a rule: the system user, trigger_instance and rule
    rt.emit_trigger("st2_strict.poke", {})
    [enforcement] = rt.store.conn.execute(
        "SELECT * FROM rule_enforcements WHERE rule='st2_strict.keys_on_poke'").fetchall()
    ruled = _keys_run(rt, enforcement["execution_id"])
    assert set(ruled["st2"]) == ST2_KEYS and ruled["st2"]["user"] == "stanley"
    assert set(ruled["context"]) == {"trigger_instance", "rule", "user", "pack"}
    assert ruled["context"]["rule"] == {"id": "st2_strict.keys_on_poke", "name": "keys_on_poke"}
    rt.close()
    # an alias: the bot's account, for the chat user
    code, out, err = cli_inprocess(home, "chat", "--user", "alice", "--channel", "ops",
                                   "show st2 keys", packs=packs)
    assert code == 0, out + err
    again = engine(home, packs=packs)
    try:
        [ex] = again.store.find_executions("action='st2_strict.keys' AND parent_id IS NULL AND"
                                           " context LIKE '%api_user%'")
        chat = _keys_run(again, ex["id"])
    finally:
        again.close()
    assert set(chat["st2"]) == ST2_KEYS | {"api_user", "source_channel"}
    assert (chat["st2"]["user"], chat["st2"]["api_user"]) == ("chatops_bot", "alice")
    assert set(chat["context"]) - {"notify"} == {"action_alias_ref", "api_user", "user",
                                                 "source_channel", "pack"}
    assert set(chat["child"]) == {"pack", "user", "parent", "orquesta", "api_user",
                                  "source_channel"}
    assert chat["child"]["parent"]["api_user"] == "alice"


# 4. retry policies ---------------------------------------------------------------------------
def test_retry_policy_is_not_applied_inside_a_workflow(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fleet_runtime.engine")
    ex = run(rt, "st2_strict.flaky_in_flow", {"key": "inside"})
    assert ex["status"] == "failed"
    assert len(rt.store.find_executions("action='rt_test.flaky'")) == 1
    assert "Retry cannot be applied to this liveaction because it is executed under a" \
        " workflow" in caplog.text
    # the same policy still retries the action run on its own
    top = run(rt, "rt_test.flaky", {"key": "top", "failures": 1})
    assert top["status"] == "failed"
    wait(rt, top["id"])
    rt.run(timeout=20)
    retried = rt.store.find_executions("action='rt_test.flaky' AND parent_id IS NULL")
    assert [r["status"] for r in retried] == ["failed", "succeeded"]


def test_orquesta_task_retry_catches_a_timeout(rt: Runtime) -> None:
    ex = run(rt, "st2_strict.slow_retry", timeout=60)
    assert ex["status"] == "failed"
    attempts = [c for c in children(rt, ex["id"]) if c["action"] == "core.local"]
    assert len(attempts) == 2 and all(a["status"] == "timeout" for a in attempts)


# 5. rule parameters --------------------------------------------------------------------------
def _enforcements(rt: Runtime, rule: str) -> List[Dict[str, Any]]:
    return [dict(r) for r in rt.store.conn.execute(
        "SELECT * FROM rule_enforcements WHERE rule=? ORDER BY ts", (rule,)).fetchall()]


def test_rule_parameters_render_strictly_and_a_failed_render_fails_the_enforcement(
        rt: Runtime) -> None:
    """StrictUndefined: an attribute missing from the payload fails the enforcement; st2
    still records a failed execution holding the error. default() replaces an undefined value
    (also an attribute read from None), not None itself."""
    canceled = {"message": "Action canceled by user.", "user": "operator"}  # st2's cancel
    for result in (canceled, {"output": None}):
        rt.emit_trigger("core.st2.generic.actiontrigger", {
            "execution_id": "e1", "status": "canceled", "action_ref": "st2_strict.ended",
            "result": result})
    rt.run(timeout=20)
    strict = _enforcements(rt, "st2_strict.ended_strict")
    assert [e["status"] for e in strict] == ["failed", "succeeded"]
    assert strict[0]["execution_id"] is None
    assert strict[0]["failure_reason"] == (
        'Failed to render parameter "message": \'dict object\' has no attribute \'output\'')
    assert rt.store.get_execution(strict[1]["execution_id"])["parameters"]["message"] == \
        "ended e1"
    [failed] = rt.store.find_executions("action='chatops.post_message' AND status='failed'")
    assert failed["result"]["error"] == strict[0]["failure_reason"]
    assert "Traceback" not in failed["result"]["traceback"] and failed["result"]["traceback"]
    assert failed["context"]["user"] == "stanley" and failed["context"]["rule"]["name"] == \
        "ended_strict"
    assert failed["parameters"]["message"].startswith("ended {{")
    posted = [rt.store.get_execution(e["execution_id"])["parameters"]["message"]
              for e in _enforcements(rt, "st2_strict.ended_default")]
    assert posted == ["output missing", "output None"]


# 6. chatops routes ---------------------------------------------------------------------------
def test_only_the_chatops_route_reaches_chat(rt: Runtime, home: Path) -> None:
    private = run(rt, "chatops.post_message", {"channel": "ops", "message": "to a private route",
                                               "route": "fleet-rollout"})
    public = run(rt, "chatops.post_message", {"channel": "ops", "message": "to the bots"})
    # the announcement runner's result: {"output": params, **params}
    params = {"channel": "ops", "message": "to the bots", "user": None, "whisper": False,
              "context": None, "extra": None}
    assert public["result"] == dict(params, output=params)
    assert private["result"]["output"]["message"] == "to a private route"
    assert [m["message"] for m in chatlog.chat_messages(home)] == ["to the bots"]
    assert chatlog.chat_messages(home)[0]["event"] == "st2.announcement__chatops"
    assert [(a["event"], a["route"], a["message"]) for a in chatlog.announcements(home)] == [
        ("st2.announcement__fleet-rollout", "fleet-rollout", "to a private route")]
    rt.close()
    code, out, _ = cli_inprocess(home, "chat", "--transcript")
    chat_part, _, other_part = out.partition("-- announcements on routes no chat bot")
    assert code == 0 and "to the bots" in chat_part and "to a private route" not in chat_part
    assert "st2.announcement__fleet-rollout #ops: to a private route" in other_part


# 7. who paused, resumed, canceled, answered -----------------------------------------------------
def test_answer_records_the_requester_on_the_inquirys_parent(rt: Runtime) -> None:
    """st2's inquiry service resumes the inquiry's parent workflow as the requester
    (context.resumed_by), not the root; the local API shows it."""
    ex = run(rt, "rt_test.ask_parent")
    assert ex["status"] == "paused"
    ask = inquiry_below(rt, ex["id"])
    rt.respond(ask["id"], {"approved": True}, requester="alice")
    assert wait(rt, ex["id"], until_completed=True)["status"] == "succeeded"
    asking = api_get(rt, f"executions/{ask['parent_id']}")
    assert asking["action"]["ref"] == "rt_test.ask_flow"
    assert asking["context"]["resumed_by"] == "alice"
    assert "resumed_by" not in api_get(rt, f"executions/{ex['id']}")["context"]


def test_an_answer_while_the_asking_workflow_is_still_pausing_is_refused(rt: Runtime) -> None:
    """respond resumes the parent first; st2's request_resume refuses a pausing workflow
    (HTTP 500), the inquiry stays pending until the other tasks are done."""
    ex_id = rt.request("st2_strict.ask_and_work", {})
    rt.run(until=lambda: any(c["status"] == "pending" for c in children(rt, ex_id)),
           eager=True, timeout=30)
    assert rt.store.get_execution(ex_id)["status"] == "pausing"
    ask = inquiry_below(rt, ex_id)
    with pytest.raises(ExecutionStateError, match='because it is in "pausing" state'):
        rt.respond(ask["id"], {"continue": True}, requester="alice")
    refused = requests.put(f"{rt.api.url}/inquiries/{ask['id']}", timeout=10,
                           json={"id": ask["id"], "response": {"continue": True}},
                           headers={"X-Auth-Token": rt.api.issue_token("alice")})
    assert refused.status_code == 500
    assert wait(rt, ex_id)["status"] == "paused"
    rt.respond(ask["id"], {"continue": True}, requester="alice")
    final = wait(rt, ex_id, until_completed=True)
    assert final["status"] == "succeeded" and final["context"]["resumed_by"] == "alice"


def _running_below(rt: Runtime, ex_id: str) -> bool:
    inner = children(rt, ex_id)
    return bool(inner) and any(c["status"] == "running" for c in children(rt, inner[0]["id"]))


def test_pause_resume_and_cancel_record_who_asked(rt: Runtime) -> None:
    """services/action.py request_pause/resume/cancellation record the requester; the orquesta
    runner passes them on to sub-workflows as the workflow's own context user."""
    ex_id = rt.request("st2_strict.outer", {})
    rt.run(until=lambda: _running_below(rt, ex_id), eager=True, timeout=30)
    rt.pause(ex_id, requester="bob")
    assert wait(rt, ex_id)["status"] == "paused"
    rt.resume(ex_id, requester="carol")
    assert wait(rt, ex_id, until_completed=True)["status"] == "succeeded"
    [inner] = children(rt, ex_id)
    outer_ctx = api_get(rt, f"executions/{ex_id}")["context"]
    inner_ctx = api_get(rt, f"executions/{inner['id']}")["context"]
    assert (outer_ctx["paused_by"], outer_ctx["resumed_by"]) == ("bob", "carol")
    assert (inner_ctx["paused_by"], inner_ctx["resumed_by"]) == ("operator", "operator")
    ex_id = rt.request("st2_strict.outer", {})
    rt.run(until=lambda: _running_below(rt, ex_id), eager=True, timeout=30)
    rt.cancel(ex_id, requester="dave")
    assert wait(rt, ex_id, until_completed=True)["status"] == "canceled"
    [inner] = children(rt, ex_id)
    assert api_get(rt, f"executions/{ex_id}")["context"]["cancelled_by"] == "dave"
    assert api_get(rt, f"executions/{inner['id']}")["context"]["cancelled_by"] == "operator"


# 8. chat identity ------------------------------------------------------------------------------
def test_chat_runs_as_the_chatops_bot_account_for_the_chat_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packs: List[str]) -> None:
    monkeypatch.setenv("FLEET_ROLLOUT_CHATOPS_USER", "hubot")
    home = fixture_home(tmp_path / "chat_home", monkeypatch)
    code, out, err = cli_inprocess(home, "chat", "--user", "alice", "show st2 keys",
                                   packs=packs)
    assert code == 0, out + err
    rt = engine(home, packs=packs)
    try:
        [ex] = rt.store.find_executions("action='st2_strict.keys'")
        assert (ex["context"]["user"], ex["context"]["api_user"]) == ("hubot", "alice")
        assert ex["result"]["output"]["st2"]["user"] == "hubot"
    finally:
        rt.close()


def test_an_action_token_acts_as_the_executions_user(rt: Runtime) -> None:
    """st2 issues each action execution a token of its context user: an alias execution's
    answer through the API is recorded as the bot's account (the pack then reads the chat user
    from the answer)."""
    ex = run(rt, "rt_test.ask_flow", {"users": ["chatops_bot"]})
    ask = inquiry_below(rt, ex["id"])
    answer = run(rt, "rt_test.answer", {"route": "rt-approvals"},
                 context=st2ctx.alias_context("rt_test.answer", "answer", "alice",
                                              "chatops_bot", "ops"))
    assert answer["status"] == "succeeded", answer["result"]
    assert answer["result"]["result"]["status"] == 200
    final = wait(rt, ex["id"], until_completed=True)
    assert final["status"] == "succeeded"
    assert final["context"]["resumed_by"] == "chatops_bot"
    assert rt.store.get_execution(ask["id"])["context"]["inquiry"]["responder"] == "chatops_bot"


def test_api_refuses_an_answer_from_a_user_the_inquiry_does_not_name(rt: Runtime) -> None:
    """The inquiry API checks the token's user against the inquiry's users (st2: 403)."""
    ex = run(rt, "rt_test.ask_flow", {"users": ["alice"]})
    ask = inquiry_below(rt, ex["id"])
    url = f"{rt.api.url}/inquiries/{ask['id']}"
    body = {"id": ask["id"], "response": {"approved": True}}
    refused = requests.put(url, json=body, timeout=10,
                           headers={"X-Auth-Token": rt.api.issue_token("mallory")})
    assert refused.status_code == 403 and "mallory" in refused.json()["faultstring"]
    allowed = requests.put(url, json=body, timeout=10,
                           headers={"X-Auth-Token": rt.api.issue_token("alice")})
    assert allowed.status_code == 200, allowed.text
    assert wait(rt, ex["id"], until_completed=True)["status"] == "succeeded"
    assert api_get(rt, f"executions/{ex['id']}")["context"]["resumed_by"] == "alice"


# 9. inquiry hazards ------------------------------------------------------------------------------
def test_inquiries_the_workflow_can_end_after_are_reported(
        rt: Runtime, home: Path, packs: List[str]) -> None:
    assert hazards.outcomes("<% succeeded() and ctx(x) %>") == {"succeeded"}
    assert hazards.outcomes("<% not succeeded() %>") == {"failed"}
    assert hazards.outcomes("<% completed() %>") == hazards.outcomes(None) == {
        "succeeded", "failed"}
    assert hazards.uncovered_outcomes({"next": [{"when": "<% failed() %>", "do": "fail"},
                                                {"do": "next_step"}]}) == []
    found = [(Path(h.file).name, h.task) for h in hazards.inquiry_hazards(rt.registry)]
    assert ("ask_last.yaml", "question") in found
    assert ("ask_bare.yaml", "approve") in found  # rt_test's bare ask, on purpose
    assert not [f for f in found if f[0] in ("ask_required.yaml", "ask_flow.yaml")]
    rt.close()
    code, out, err = cli_inprocess(home, "pack", "validate", packs=packs)
    assert code == 2
    assert "workflows/ask_last.yaml: tasks.question: the inquiry (core.ask) can end the" \
        " workflow when it succeeded or failed" in err


# 10. orquesta 1.6 -----------------------------------------------------------------------------
def test_a_failure_leading_to_a_join_that_is_not_ready_is_remediated(rt: Runtime) -> None:
    """orquesta 1.4+ (machines.py with has_barrier_next); 1.2.0 failed the workflow."""
    ex = run(rt, "st2_strict.join_on_failure", timeout=30)
    assert ex["status"] == "succeeded", ex["result"]
    assert {c["task_id"]: c["status"] for c in children(rt, ex["id"])}["together"] == \
        "succeeded"


def test_with_items_concurrency_below_one_runs_one_at_a_time(rt: Runtime) -> None:
    """orquesta 1.6 conducting.py: concurrency 0 means 1; 1.2.0 never started an item."""
    started = time.time()
    ex = run(rt, "st2_strict.items_zero", timeout=30)
    assert ex["status"] == "succeeded" and time.time() - started < 30
    assert len(children(rt, ex["id"])) == 3


def test_jinja_expressions_are_sandboxed(rt: Runtime) -> None:
    """orquesta 1.5+ evaluates Jinja in a SandboxedEnvironment."""
    ex = run(rt, "st2_strict.sandbox")
    assert ex["status"] == "failed"
    assert "unsafe" in json.dumps(ex["result"]["errors"])


def test_an_action_starts_an_execution_through_the_local_api_as_its_user(rt: Runtime) -> None:
    """st2api's POST /executions with an action's token: the new root execution runs as the
    token's user; its parameters are literals; a bad body or action is refused."""
    import threading

    answers: Dict[str, Any] = {}

    def post(name: str, body: Any) -> None:
        answers[name] = requests.post(f"{rt.api.url}/executions", json=body, timeout=30,
                                      headers={"X-Auth-Token": rt.api.issue_token("carol")})

    bodies = {"ok": {"action": "rt_test.greet", "parameters": {"name": "{{ 7 * 7 }}"}},
              "unknown": {"action": "rt_test.nope", "parameters": {}},
              "bad": {"parameters": {}},
              "invalid": {"action": "rt_test.greet", "parameters": {"times": "x"}}}
    threads = [threading.Thread(target=post, args=item) for item in bodies.items()]
    for thread in threads:
        thread.start()
    rt.run(until=lambda: not any(t.is_alive() for t in threads), forever=True, timeout=60)
    assert answers["ok"].status_code == 201, answers["ok"].text
    started = answers["ok"].json()
    assert started["context"]["user"] == "carol"
    final = wait(rt, started["id"], until_completed=True)
    assert final["status"] == "succeeded"
    assert final["parameters"]["name"] == "{{ 7 * 7 }}"  # data, never rendered
    assert answers["unknown"].status_code == 404, answers["unknown"].text
    assert answers["bad"].status_code == 400 and "action" in answers["bad"].json()["faultstring"]
    assert answers["invalid"].status_code == 400, answers["invalid"].text


def test_an_action_token_has_its_users_grants_once_the_home_has_rbac(
        home: Path, packs: List[str]) -> None:
    """With RBAC definitions in the home, the engine's action API checks the token's user as
    st2 checks an action's token: no grant, no new execution, no answer, no cancel."""
    from fleet_runtime import rbac

    (home / "rbac" / "roles").mkdir(parents=True)
    (home / "rbac" / "roles" / "rt.yaml").write_text(
        "name: rt\npermission_grants:\n  - resource_uid: pack:rt_test\n"
        "    permission_types: [action_execute]\n")
    rbac.write_assignment(home / "rbac", "dora", ["rt"])
    runtime = engine(home, packs=packs)
    try:
        body = {"action": "rt_test.greet", "parameters": {"name": "x"}}
        answers: Dict[str, Any] = {}

        def post(user: str) -> None:
            answers[user] = requests.post(f"{runtime.api.url}/executions", json=body,
                                          timeout=30,
                                          headers={"X-Auth-Token": runtime.api.issue_token(user)})

        import threading

        threads = [threading.Thread(target=post, args=(u,)) for u in ("carol", "dora")]
        for thread in threads:
            thread.start()
        runtime.run(until=lambda: not any(t.is_alive() for t in threads), forever=True,
                    timeout=60)
        assert answers["carol"].status_code == 403, answers["carol"].text
        assert "action_execute" in answers["carol"].json()["faultstring"]
        assert answers["dora"].status_code == 201, answers["dora"].text
        ex = run(runtime, "rt_test.ask_flow", {"users": ["carol"]})
        ask = inquiry_below(runtime, ex["id"])
        refused = requests.put(f"{runtime.api.url}/inquiries/{ask['id']}", timeout=10,
                               json={"id": ask["id"], "response": {"approved": True}},
                               headers={"X-Auth-Token": runtime.api.issue_token("carol")})
        assert refused.status_code == 403 and "inquiry_respond" in refused.json()["faultstring"]
        stop = requests.put(f"{runtime.api.url}/executions/{ex['id']}", timeout=10,
                            json={"status": "canceling"},
                            headers={"X-Auth-Token": runtime.api.issue_token("carol")})
        assert stop.status_code == 403 and "execution_stop" in stop.json()["faultstring"]
    finally:
        runtime.close()
