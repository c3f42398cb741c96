"""dead_runner: an st2 action runner killed while it runs an action (SIGKILL: no graceful
shutdown abandons its executions). The action's work is done and its result written, but its
execution stays `running` for good: no runner is left to report it, time it out or cancel it,
and nothing in st2 reconciles it after a restart. Its workflow waits, a cancel stays
`canceling`.

The fixture's steps workflow (a with-items of python steps) on the real Orquesta conductor."""
from __future__ import annotations

from pathlib import Path

import pytest
from runtime_support import children, engine, fixture_home, journal

from fleet_runtime.home import RuntimeHome
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.statuses import CANCELING, RUNNING, SUCCEEDED


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
        assert (home / "dead-runner").read_text() == dead["id"]
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


def test_a_dead_runner_setting_names_an_action_and_its_parameters(tmp_path: Path,
                                                                  monkeypatch) -> None:
    home = fixture_home(tmp_path / "bad", monkeypatch, settings={"dead_runner": "rt_test.step x"})
    with pytest.raises(MetadataError, match=r"dead_runner: .*`<action ref> \[param=value"):
        assert RuntimeHome(str(home)).dead_runner is None
    monkeypatch.setenv("FLEET_ROLLOUT_DEAD_RUNNER", "fleet_rollout.host_step step=reboot")
    assert RuntimeHome(str(home)).dead_runner == ("fleet_rollout.host_step", {"step": "reboot"})
