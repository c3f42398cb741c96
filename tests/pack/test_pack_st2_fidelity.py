"""The pack's files as StackStorm 3.9 (orquesta 1.6) reads them: what st2 refuses or treats
differently from a lax runtime, checked on the files themselves. The same issues are also
reproduced by running the pack through the strict embedded runtime (test_rollout_sim,
test_pack_approvals)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import locations
import yaml

from fleet_rollout.states import WORKFLOW_STEPS

ROOT = locations.ROOT
PACK_YAML = sorted(p for d in ("actions", "rules", "aliases", "policies", "triggers")
                   for p in (ROOT / d).rglob("*.yaml")) + [ROOT / "pack.yaml",
                                                             ROOT / "config.schema.yaml"]
WORKFLOWS = sorted((ROOT / "actions" / "workflows").glob("*.yaml"))


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks(path: Path) -> Dict[str, Dict[str, Any]]:
    return (_load(path) or {}).get("tasks") or {}


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_pack_yaml_has_no_anchors_aliases_or_merge_keys():
    """orquesta >= 1.3 refuses merge keys at run time (registration passes)."""
    offenders: List[str] = []
    for path in PACK_YAML:
        for event in yaml.parse(path.read_text()):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                offenders.append(f"{path.relative_to(ROOT)}:{event.start_mark.line + 1}")
        if re.search(r"^\s*<<\s*:", path.read_text(), re.M):
            offenders.append(f"{path.relative_to(ROOT)}: merge key")
    assert not offenders, offenders


def _ask_tasks() -> List[Tuple[str, str, Dict[str, Any]]]:
    found = []
    for path in WORKFLOWS:
        for name, task in _tasks(path).items():
            if task.get("action") == "core.ask":
                found.append((path.name, name, task))
    return found


def test_inquiry_schemas_mark_required_properties_the_st2_way():
    """st2 validates answers with its own validator: `required: true` on each property; the
    draft-4 list form makes every answer fail with HTTP 400. The one core.ask task asks the
    schema questions.schema builds for each kind of question."""
    from fleet_rollout import questions

    asks = _ask_tasks()
    assert [(wf, name) for wf, name, _ in asks] == [("question.yaml", "ask")]
    assert asks[0][2]["input"]["schema"] == "<% ctx(schema) %>"
    for kind in questions.KINDS:
        schema = questions.schema(kind, "r1", "a question")
        for node in _walk(schema):
            if isinstance(node, dict) and "required" in node:
                assert isinstance(node["required"], bool), f"{kind}: required {node}"
        required = [k for k, v in schema["properties"].items() if v.get("required") is True]
        assert required, f"{kind}: no required answer field"
        assert schema.get("additionalProperties") is False, f"{kind}: typed extras allowed"
        assert "by" not in schema["properties"], f"{kind}: a typed approver field"
        assert schema["properties"]["rollout_id"]["default"] == "r1"


def test_every_question_has_a_task_after_it_on_every_outcome():
    """An inquiry that ends a sub-workflow races the parent's resume on st2."""
    for wf, name, task in _ask_tasks():
        nxt = task.get("next") or []
        conditions = [t.get("when", "") for t in nxt if t.get("do")]
        assert any("not succeeded()" in c for c in conditions), f"{wf}:{name}: no failure path"
        assert any(c.strip() and "not succeeded()" not in c for c in conditions), (
            f"{wf}:{name}: no success path")


def test_workflows_read_api_user_only_with_get():
    """ctx(st2).api_user exists only for alias executions with a chat user."""
    for path in WORKFLOWS:
        assert not re.search(r"ctx\(st2\)\.api_user", path.read_text()), path.name


def test_no_retry_policy_targets_an_action_run_inside_workflows():
    """st2 applies no retry policy inside workflows; orquesta's task retry is what works."""
    inside = {task.get("action") for path in WORKFLOWS for task in _tasks(path).values()}
    for path in (ROOT / "policies").glob("*.yaml"):
        policy = _load(path)
        if policy["policy_type"] == "action.retry":
            assert policy["resource_ref"] not in inside, path.name
    host_change = _tasks(ROOT / "actions" / "workflows" / "host_change.yaml")
    steps = [t for t in host_change.values() if t.get("action") == "fleet_rollout.host_step"]
    assert [t["input"]["step"] for t in steps] == list(WORKFLOW_STEPS) + ["restore"]
    assert all("Action failed to complete in" in t["retry"]["when"] for t in steps)


def test_failure_paths_also_catch_cancels():
    """Every failure path is `not succeeded()`: failed (orquesta's task state machine turns an
    action timeout into a failed task) and canceled alike lead to the restore or rollback. A
    task's `retry` may say `failed()`: a canceled task is not tried again."""
    for path in WORKFLOWS:
        for name, task in _tasks(path).items():
            for transition in task.get("next") or []:
                assert "failed()" not in str(transition.get("when", "")).replace(
                    "not succeeded()", ""), f"{path.name}:{name}"


# What each trigger type's payload always holds (st2: core.st2.generic.actiontrigger carries
# execution_id, status, start_timestamp, action_name, action_ref, runner_ref, parameters, result;
# core.st2.generic.inquiry: id, route). Anything below `result` or `parameters` may be missing.
TRIGGER_FIELDS = {
    "core.st2.generic.actiontrigger": {"execution_id", "status", "start_timestamp",
                                       "action_name", "action_ref", "runner_ref"},
    "core.st2.generic.inquiry": {"id", "route"},
    "core.st2.IntervalTimer": {"executed_at", "schedule"},
}


def test_rule_parameters_use_only_fields_every_payload_has():
    """st2 renders rule parameters strictly: a missing attribute fails the rule."""
    own = {f"fleet_rollout.{_load(p)['name']}": set(_load(p)["payload_schema"]["properties"])
           for p in (ROOT / "triggers").glob("*.yaml")}
    fields = {**TRIGGER_FIELDS, **own}
    for path in (ROOT / "rules").glob("*.yaml"):
        rule = _load(path)
        allowed = fields[rule["trigger"]["type"]]
        for value in _walk(rule["action"].get("parameters") or {}):
            if isinstance(value, str):
                for ref in re.findall(r"trigger((?:\.\w+)+)", value):
                    parts = ref.strip(".").split(".")
                    assert parts[0] in allowed and len(parts) == 1, f"{path.name}: trigger{ref}"
                assert "default(" not in value, f"{path.name}: default() does not replace None"


def test_chat_messages_go_to_the_configured_route_and_channel():
    """Stock chat bots listen on the `chatops` route; no literal other route in the pack."""
    for path in WORKFLOWS:
        for name, task in _tasks(path).items():
            if task.get("action") == "chatops.post_message":
                params = task["input"]
                assert "ctx(" in str(params["route"]) and "ctx(" in str(params["channel"]), (
                    f"{path.name}:{name}")
    schema = _load(ROOT / "config.schema.yaml")
    assert schema["chat_route"]["default"] == "chatops"
