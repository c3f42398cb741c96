"""Triggers and rules: st2's criteria operators, Jinja parameters, the runtime's triggers."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from runtime_support import engine, make_home, run

from fleet_runtime import operators, rules
from fleet_runtime.engine import Runtime
from fleet_runtime.packs import Rule


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    return make_home(tmp_path / "home")


@pytest.fixture()
def rt(home: Path) -> Iterator[Runtime]:
    runtime = engine(home)
    yield runtime
    runtime.close()


def transcript(home: Path) -> List[Dict[str, Any]]:
    path = home / "chat.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "op,value,pattern,expected",
    [
        ("equals", "a", "a", True), ("eq", 1, 1, True), ("equals", "a", None, False),
        ("nequals", "a", "b", True), ("iequals", "ABC", "abc", True),
        ("contains", "hello world", "lo w", True), ("ncontains", "abc", "z", True),
        ("icontains", "HELLO", "ell", True), ("incontains", "HELLO", "ell", False),
        ("startswith", "host-1", "host", True), ("istartswith", "HOST", "ho", True),
        ("endswith", "a.yaml", ".yaml", True), ("iendswith", "A.YAML", ".yaml", True),
        ("lt", 1, 2, True), ("lessthan", 3, 2, False), ("gt", 3, 2, True),
        ("greaterthan", 1, 2, False), ("matchwildcard", "web-01", "web-*", True),
        ("matchregex", "web-01", r"web-\d+", True), ("matchregex", "xweb-01", r"web", False),
        ("regex", "xweb-01", r"web", True), ("iregex", "XWEB", r"web", True),
        ("exists", 0, None, True), ("nexists", None, None, True),
        ("inside", "b", ["a", "b"], True), ("in", "z", "xyz", True),
        ("ninside", "c", ["a", "b"], True), ("nin", "a", ["a"], False),
        ("timediff_lt", "2000-01-01T00:00:00Z", 60, False),
        ("td_gt", "2000-01-01T00:00:00+00:00", 60, True),
    ],
)
def test_operators(op: str, value: Any, pattern: Any, expected: bool) -> None:
    assert operators.OPERATORS[op](value, pattern) is expected


def _rule(criteria: Dict[str, Any]) -> Rule:
    return Rule(ref="t.r", pack="t", name="r", trigger_type="t.x", trigger_parameters={},
                criteria=criteria, action_ref="core.noop", action_parameters={}, enabled=True)


def test_search_operator_conditions() -> None:
    payload = {"hosts": [{"name": "host-1", "state": "ok"}, {"name": "host-2",
                                                           "state": "failed"}]}
    child = {"item.state": {"type": "equals", "pattern": "failed"},
             "item.name": {"type": "startswith", "pattern": "host-"}}
    for condition, expected in (("any", True), ("all", False), ("all2any", True),
                                ("any2any", True)):
        rule = _rule({"trigger.hosts": {"type": "search", "condition": condition,
                                        "pattern": child}})
        assert rules.rule_matches(rule, payload)[0] is expected, condition


def test_criteria_patterns_are_rendered_with_types() -> None:
    rule = _rule({"trigger.count": {"type": "gt", "pattern": "{{ trigger.limit }}"},
                  "trigger.name#1": {"type": "startswith", "pattern": "web"},
                  "trigger.name#2": {"type": "endswith", "pattern": "01"}})
    assert rules.rule_matches(rule, {"count": 5, "limit": 3, "name": "web-01"}) == (True, None)
    assert rules.rule_matches(rule, {"count": 2, "limit": 3, "name": "web-01"})[0] is False
    broken = _rule({"trigger.count": {"type": "gt", "pattern": "{{ trigger.count }}"}})
    matched, reason = rules.rule_matches(broken, {"count": "a"})
    assert matched is False and reason is None
    failing = _rule({"trigger.count": {"type": "lt", "pattern": 3}})
    matched, reason = rules.rule_matches(failing, {"count": "three"})
    assert matched is False and "problem with the criteria" in reason


def test_inquiry_trigger_fires_rule(rt: Runtime, home: Path) -> None:
    ex = run(rt, "rt_test.ask_flow")
    inquiry = rt.store.find_executions("parent_id=?", (ex["id"],))[0]
    messages = [m for m in transcript(home) if m["channel"] == "rt-approvals"]
    assert len(messages) == 1 and inquiry["id"] in messages[0]["message"]
    enforcement = rt.store.conn.execute(
        "SELECT * FROM rule_enforcements WHERE rule='rt_test.inquiry_to_chat'").fetchone()
    assert enforcement["status"] == "succeeded" and enforcement["execution_id"]
    posted = rt.store.get_execution(enforcement["execution_id"])
    assert posted["context"]["rule"] == {"id": "rt_test.inquiry_to_chat", "name": "inquiry_to_chat"}
    assert posted["context"]["user"] == "stanley"
    # another route does not match the criteria
    run(rt, "rt_test.ask_flow", {"route": "elsewhere"})
    assert len([m for m in transcript(home) if m["channel"] == "rt-approvals"]) == 1


def test_actiontrigger_rule_on_failure(rt: Runtime, home: Path) -> None:
    ok = run(rt, "rt_test.greet", {"name": "x"})
    bad = run(rt, "rt_test.fail")
    rt.run(until=lambda: any(m["channel"] == "alerts" for m in transcript(home)), timeout=10)
    alerts = [m["message"] for m in transcript(home) if m["channel"] == "alerts"]
    assert alerts == [f"rt_test.fail failed in {bad['id']}"]
    assert ok["id"] not in " ".join(alerts)


def test_pack_trigger_with_search_inside_and_typed_pattern(rt: Runtime, home: Path) -> None:
    def emit(payload: Dict[str, Any]) -> None:
        ex = run(rt, "core.inject_trigger", {"trigger": "rt_test.batch_done",
                                             "payload": payload})
        assert ex["status"] == "succeeded"
        rt.run(timeout=5)

    hosts = [{"name": "host-1", "state": "ok"}, {"name": "host-2", "state": "failed"},
             {"name": "host-3", "state": "failed"}]
    emit({"batch": 1, "verdict": "PASS", "failed": 2, "hosts": hosts})
    emit({"batch": 2, "verdict": "FAIL", "failed": 0, "hosts": hosts})
    emit({"batch": 3, "verdict": "FAIL", "failed": 2, "hosts": hosts[:1]})
    emit({"batch": 4, "verdict": "FAIL", "failed": 2, "hosts": hosts})
    messages = [m["message"] for m in transcript(home) if m["channel"] == "rollout"]
    assert messages == ["batch 4 FAIL: host-2,host-3"]
    # the disabled rule listens to the same trigger and never fires
    assert not [m for m in transcript(home) if m["channel"] == "never"]
    unknown = run(rt, "core.inject_trigger", {"trigger": "rt_test.nope", "payload": {}})
    assert unknown["status"] == "failed" and "unknown trigger type" in unknown["result"]["error"]
