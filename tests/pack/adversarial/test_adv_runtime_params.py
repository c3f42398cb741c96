"""Adversarial: what a caller passes is a literal (never Jinja) and an undeclared parameter is
refused, on every entry point of the embedded runtime (in-process engine, the CLI, workflow
children, rules, re-runs)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
import runtime_support as testing
import yaml
from adv_support import write, write_pack_yaml

from fleet_runtime.runtime_errors import MetadataError, ParameterError

SECRET = "adv-Secret-Pa55word"  # the pack config's secret: true value



def make_pack(root: Path) -> Path:
    pack = root / "adv_pack"
    write_pack_yaml(pack, "adv", "adversarial fixture pack")
    write(pack / "config.schema.yaml", """
        password:
          type: string
          secret: true
          required: true
        greeting:
          type: string
          default: hi
        """)
    write(pack / "actions" / "echo.yaml", """
        name: echo
        runner_type: python-script
        entry_point: echo.py
        parameters:
          text:
            type: string
            required: true
          suffix:
            type: string
            default: "{{ text }}!"
        """)
    write(pack / "actions" / "echo.py", """
        from st2common.runners.base_action import Action


        class Echo(Action):
            def run(self, text, suffix):
                return {"text": text, "suffix": suffix}
        """)
    write(pack / "actions" / "flow.yaml", """
        name: flow
        runner_type: orquesta
        entry_point: workflows/flow.yaml
        parameters:
          text:
            type: string
            required: true
        """)
    write(pack / "actions" / "workflows" / "flow.yaml", """
        version: 1.0
        input:
          - text
        tasks:
          call:
            action: adv.echo
            input:
              text: <% ctx(text) %>
        output:
          - echoed: <% task(call).result.result.text %>
        """)
    write(pack / "rules" / "on_echo.yaml", """
        name: on_echo
        pack: adv
        enabled: true
        trigger:
          type: core.st2.generic.actiontrigger
        criteria:
          trigger.action_ref:
            type: equals
            pattern: adv.flow
        action:
          ref: adv.echo
          parameters:
            text: "rule saw {{ trigger.action_ref }} with {{ config_context.greeting }}"
        """)
    return pack


def make_home(root: Path, monkeypatch: Any) -> Path:
    home = testing.fixture_home(root / "home", monkeypatch)
    (home / "configs" / "adv.yaml").write_text(yaml.safe_dump({"password": SECRET}))
    return home


@pytest.fixture()
def adv(tmp_path: Path, monkeypatch: Any) -> Dict[str, Any]:
    pack = make_pack(tmp_path)
    home = make_home(tmp_path, monkeypatch)
    rt = testing.engine(home, [str(pack)])
    try:
        yield {"rt": rt, "home": home, "pack": pack}
    finally:
        rt.close()


def dump(record: Dict[str, Any]) -> str:
    return json.dumps(record, default=str)


ATTACK = "{{ config_context.password }}"


def test_caller_value_is_a_literal_not_a_template(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    record = testing.run(rt, "adv.echo", {"text": ATTACK})
    assert record["status"] == "succeeded", record["result"]
    assert record["parameters"]["text"] == ATTACK
    assert record["result"]["result"]["text"] == ATTACK
    # a pack default that uses the caller's value gets the literal, not its rendering
    assert record["result"]["result"]["suffix"] == ATTACK + "!"
    assert SECRET not in dump(rt.store.get_execution(record["id"]))


def test_caller_value_in_st2kv_syntax_is_a_literal(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    rt.datastore.set("k", "from-the-datastore")
    record = testing.run(rt, "adv.echo", {"text": "{{ st2kv.system.k }}"})
    assert record["result"]["result"]["text"] == "{{ st2kv.system.k }}"


def test_value_through_a_workflow_stays_literal(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    record = testing.run(rt, "adv.flow", {"text": ATTACK})
    assert record["status"] == "succeeded", record["result"]
    assert record["result"]["output"]["echoed"] == ATTACK
    child = testing.children(rt, record["id"])[0]
    assert child["parameters"]["text"] == ATTACK
    for row in rt.store.find_executions("1=1", ()):
        assert SECRET not in dump(row)


def test_rule_parameters_written_by_the_pack_are_still_rendered(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    testing.run(rt, "adv.flow", {"text": "x"})
    rt.run(timeout=20)
    by_rule = [r for r in rt.store.find_executions("action=?", ("adv.echo",))
               if (r["context"].get("rule") or {}).get("id") == "adv.on_echo"]
    assert by_rule, "the rule did not run"
    assert by_rule[0]["parameters"]["text"] == "rule saw adv.flow with hi"


def test_retry_and_rerun_do_not_render_recorded_values(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    first = testing.run(rt, "adv.echo", {"text": ATTACK})
    again = testing.run(rt, "adv.echo", dict(first["parameters"]))
    assert again["result"]["result"]["text"] == ATTACK


def test_undeclared_parameter_is_refused_with_its_name(adv: Dict[str, Any]) -> None:
    rt = adv["rt"]
    with pytest.raises(ParameterError, match=r"'bogus' was unexpected.*no parameter bogus"):
        rt.request("adv.echo", {"text": "x", "bogus": 1})


def add_bad_flow(pack: Path) -> None:
    write(pack / "actions" / "bad_flow.yaml", """
        name: bad_flow
        runner_type: orquesta
        entry_point: workflows/bad_flow.yaml
        """)
    write(pack / "actions" / "workflows" / "bad_flow.yaml", """
        version: 1.0
        tasks:
          call:
            action: adv.echo
            input:
              text: x
              bogus: y
        """)


def test_undeclared_parameter_of_a_workflow_task_is_refused(tmp_path: Path, monkeypatch: Any
                                                           ) -> None:
    pack = make_pack(tmp_path)
    add_bad_flow(pack)
    home = make_home(tmp_path, monkeypatch)
    with pytest.raises(MetadataError, match=r"tasks.call.input.bogus"):
        testing.engine(home, [str(pack)])


def test_cli_run_keeps_the_literal_and_refuses_undeclared(tmp_path: Path, monkeypatch: Any
                                                          ) -> None:
    pack = make_pack(tmp_path)
    home = make_home(tmp_path, monkeypatch)
    proc = testing.cli(home, "run", "adv.echo", f"text={ATTACK}", "--json", packs=[str(pack)])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"]["result"]["text"] == ATTACK
    assert SECRET not in proc.stdout + proc.stderr
    proc = testing.cli(home, "run", "adv.echo", "text=x", "bogus=1", packs=[str(pack)])
    assert proc.returncode != 0
    assert "no parameter bogus" in proc.stderr
