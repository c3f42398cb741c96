"""dead_runner: an st2 action runner killed while it runs an action (SIGKILL: no graceful
shutdown abandons its executions). The action's work is done and its result written, but its
execution stays `running` for good: no runner is left to report it, time it out or cancel it,
and nothing in st2 reconciles it after a restart. Its workflow waits, a cancel stays
`canceling`.

The fixture's steps workflow (a with-items of python steps) on the real Orquesta conductor."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from runtime_support import FIXTURE_PACK, api_call, children, engine, fixture_home, journal

from fleet_runtime.home import RuntimeHome
from fleet_runtime.packs import Registry
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.statuses import CANCELING, COMPLETED, RUNNING, SUCCEEDED


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_home(tmp_path / "home", monkeypatch,
                        settings={"dead_runner": "rt_test.step name=i2"})


def _steps(rt, ex_id):
    return {c["parameters"].get("name"): c for c in children(rt, ex_id)
            if c["action"] == "rt_test.step"}


def test_a_dead_runners_execution_stays_running_and_its_workflow_waits(home: Path) -> None:
    rt = engine(home)
    try:
        ex_id = rt.request("rt_test.steps", {"run_id": "d1", "n": 4})

        def others_done() -> bool:
            steps = _steps(rt, ex_id)
            return all(steps.get(n, {}).get("status") == SUCCEEDED for n in ("i0", "i1", "i3"))

        rt.run(until=others_done, forever=True, timeout=60)
        rt.run(forever=True, timeout=3)  # time for anything that would reconcile it
        steps = _steps(rt, ex_id)
        dead = steps["i2"]
        assert dead["status"] == RUNNING
        assert dead["result"]["exit_code"] == 0  # its work was done, its result written
        assert [e["name"] for e in journal(home, "steps-d1.jsonl")
                if e.get("event") == "end"].count("i2") == 1
        assert (home / "dead-runner-0").read_text() == dead["id"]
        assert rt.store.get_execution(ex_id)["status"] == RUNNING
        assert "sub" not in {c["context"].get("orquesta", {}).get("task_name")
                             for c in children(rt, ex_id)}  # the workflow never went on
        rt.cancel(ex_id)
        rt.run(forever=True, timeout=3)
        assert rt.store.get_execution(ex_id)["status"] == CANCELING
        assert rt.store.get_execution(dead["id"])["status"] == RUNNING
    finally:
        rt.close()
    # a restarted engine leaves it as it is (a graceful stop's abandoning never happened)
    rt = engine(home)
    try:
        rt.run(forever=True, timeout=3)
        assert rt.store.get_execution(dead["id"])["status"] == RUNNING
        assert rt.store.get_execution(ex_id)["status"] == CANCELING
    finally:
        rt.close()


def test_only_the_first_matching_execution_dies(home: Path) -> None:
    rt = engine(home)
    try:
        first = rt.request("rt_test.step", {"name": "i2", "run_id": "d2"})
        rt.run(until=lambda: rt.store.get_execution(first)["result"] is not None,
               forever=True, timeout=30)
        second = rt.request("rt_test.step", {"name": "i2", "run_id": "d3"})
        rt.run(until=lambda: rt.store.get_execution(second)["status"] == SUCCEEDED,
               forever=True, timeout=30)
        assert rt.store.get_execution(first)["status"] == RUNNING
    finally:
        rt.close()


def test_a_dead_runner_setting_names_actions_and_their_parameters(tmp_path: Path,
                                                                  monkeypatch) -> None:
    home = fixture_home(tmp_path / "bad", monkeypatch, settings={"dead_runner": "rt_test.step x"})
    with pytest.raises(MetadataError, match=r"dead_runner: .*`<action ref> \[param=value"):
        assert RuntimeHome(str(home)).dead_runners == []
    monkeypatch.setenv("FLEET_ROLLOUT_DEAD_RUNNER",
                       "fleet_rollout.host_step step=reboot; fleet_rollout.host_restore")
    assert RuntimeHome(str(home)).dead_runners == [
        ("fleet_rollout.host_step", {"step": "reboot"}), ("fleet_rollout.host_restore", {})]



def test_the_api_finds_a_dead_runners_execution_refuses_to_complete_it_and_completes_its_parent(
        home: Path) -> None:
    """st2: the dead runner's LiveAction is completed, so PUT /executions on it answers 400;
    its workflow's LiveAction is active, so a completed status PUT there ends the workflow
    (update_status) and its parent hears of it, the stale task left as it is."""
    rt = engine(home)
    try:
        ex_id = rt.request("rt_test.steps_parent", {"run_id": "d4", "n": 3})
        rt.run(until=lambda: bool(rt.dead_runner_executions()), forever=True, timeout=60)
        rt.run(forever=True, timeout=2)
        [dead_id] = rt.dead_runner_executions()
        listed = api_call(rt, "GET", "executions?action=rt_test.step&status=running&limit=10")
        assert listed.status_code == 200
        assert [e["id"] for e in listed.json()] == [dead_id]
        refused = api_call(rt, "PUT", f"executions/{dead_id}", {"status": "succeeded"})
        assert refused.status_code == 400
        assert "already in completed state" in refused.json()["faultstring"]
        workflow_id = rt.store.get_execution(dead_id)["parent_id"]
        assert rt.store.get_execution(workflow_id)["status"] == RUNNING
        done = api_call(rt, "PUT", f"executions/{workflow_id}",
                    {"status": "succeeded", "result": {"output": {"ended_by": "test"}}})
        assert done.status_code == 200, done.text
        rt.run(until=lambda: rt.store.get_execution(ex_id)["status"] in COMPLETED,
               forever=True, timeout=60)
        workflow = rt.store.get_execution(workflow_id)
        assert (workflow["status"], workflow["result"]) == (
            SUCCEEDED, {"output": {"ended_by": "test"}})
        assert rt.store.get_execution(ex_id)["status"] == SUCCEEDED  # the parent went on
        assert rt.store.get_execution(dead_id)["status"] == RUNNING
        again = api_call(rt, "PUT", f"executions/{workflow_id}", {"status": "failed"})
        assert again.status_code == 400
    finally:
        rt.close()


def _timer_pack(root: Path, delta: Any) -> str:
    pack = root / "timer_pack"
    (pack / "rules").mkdir(parents=True)
    (pack / "pack.yaml").write_text(yaml.safe_dump({
        "ref": "timer_test", "name": "timer_test", "description": "an interval timer rule",
        "version": "0.1.0", "author": "fleet_rollout engineers", "email": "eng@example.org"}))
    (pack / "rules" / "tick.yaml").write_text(yaml.safe_dump({
        "name": "tick", "pack": "timer_test", "enabled": True,
        "trigger": {"type": "core.st2.IntervalTimer",
                    "parameters": {"unit": "seconds", "delta": delta}},
        "action": {"ref": "core.noop"}}))
    return str(pack)


def test_an_interval_timer_rule_fires_every_interval_while_the_engine_runs(
        tmp_path: Path, home: Path) -> None:
    rt = engine(home, packs=[str(FIXTURE_PACK), _timer_pack(tmp_path, 1)])
    try:
        rt.run()  # nothing in flight: a timer does not keep run() going
        assert rt.store.find_executions("action='core.noop'") == []
        rt.run(forever=True, timeout=3.6)
        ticks = rt.store.find_executions("action='core.noop'")
        assert 2 <= len(ticks) <= 4
        assert {t["context"]["rule"]["name"] for t in ticks} == {"tick"}
        assert all(t["status"] == SUCCEEDED for t in ticks)
    finally:
        rt.close()


def test_an_interval_timer_rule_needs_a_unit_and_a_positive_delta(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match=r"tick.yaml.*trigger.parameters.delta"):
        Registry([_timer_pack(tmp_path, 0)])


def test_a_dead_runners_execution_holds_no_concurrency_slot(tmp_path: Path,
                                                             monkeypatch) -> None:
    """st2's concurrency policies count scheduled and running LiveActions; a dead runner's is
    completed, so the next execution of a one-at-a-time action runs."""
    home = fixture_home(tmp_path / "home", monkeypatch,
                        settings={"dead_runner": "rt_test.limited"})
    rt = engine(home)
    try:
        first = rt.request("rt_test.limited", {"value": "a"})
        rt.run(until=lambda: bool(rt.dead_runner_executions()), forever=True, timeout=30)
        second = rt.request("rt_test.limited", {"value": "b"})
        rt.run(until=lambda: rt.store.get_execution(second)["status"] in COMPLETED,
               forever=True, timeout=30)
        assert rt.store.get_execution(second)["status"] == SUCCEEDED
        assert rt.store.get_execution(first)["status"] == RUNNING
    finally:
        rt.close()
