"""One list of host steps and one set of state names (fleet_rollout.states): the host_step
action's enum, the host_change workflow's task chain, the HostRun step registry, the estimate,
the report and the finish action all name the same things in the same order."""
from __future__ import annotations

from typing import Any, Dict, List

import locations
import pytest
import yaml

from fleet_rollout import estimate, hoststeps, states, timeouts
from fleet_rollout.profile import load_profile
from fleet_rollout.report import style
from fleet_rollout.report.batches import batch_section

ROOT = locations.ROOT


def _yaml(path: str) -> Dict[str, Any]:
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def _success_chain(tasks: Dict[str, Any], first: str) -> List[str]:
    """The host_step tasks in the order the workflow runs them when every step succeeds."""
    order, name = [], first
    while name is not None and tasks[name].get("action") == "fleet_rollout.host_step":
        order.append(tasks[name]["input"]["step"])
        nxt = [t.get("do") for t in tasks[name].get("next") or []
               if str(t.get("when", "")).replace(" ", "") == "<%succeeded()%>"]
        name = nxt[0] if nxt else None
    return order


def _wave_chain() -> List[str]:
    """The steps wave_change runs in order when every task succeeds: a host_change part stands
    for its steps, a wave_step for its step."""
    tasks = _yaml("actions/workflows/wave_change.yaml")["tasks"]
    order, name = [], "precheck"
    while name is not None:
        task = tasks[name]
        if task["action"] == "fleet_rollout.host_change":
            part = task["input"]["part"]
            order.extend(states.PREPARE_STEPS if part == "prepare" else states.CHANGE_STEPS)
        else:
            assert task["action"] == "fleet_rollout.wave_step"
            order.append(task["input"]["step"])
        nxt = [t["do"] for t in task.get("next") or []
               if "restore" not in t["do"] and "not succeeded" not in str(t.get("when", ""))]
        name = nxt[0] if nxt else None
    return order


def test_the_action_enum_the_workflow_chain_and_the_registry_name_the_same_steps() -> None:
    enum = _yaml("actions/host_step.yaml")["parameters"]["step"]["enum"]
    assert tuple(enum) == states.ACTION_STEPS == states.HOST_STEPS + (states.RESTORE_STEP,)
    tasks = _yaml("actions/workflows/host_change.yaml")["tasks"]
    assert tuple(_success_chain(tasks, "prepare")) == states.PREPARE_STEPS
    assert tuple(_success_chain(tasks, "stage")) == states.CHANGE_STEPS
    assert states.WORKFLOW_STEPS == states.PREPARE_STEPS + states.CHANGE_STEPS
    wave_enum = _yaml("actions/wave_step.yaml")["parameters"]["step"]["enum"]
    assert tuple(wave_enum) == states.WAVE_STEPS
    # the wave's chain covers every step once, in order; a wave step is no host's own part
    assert tuple(_wave_chain()) == states.HOST_STEPS
    assert not set(states.WAVE_STEPS) & set(states.WORKFLOW_STEPS)
    assert hoststeps.steps.missing() == ()
    assert tuple(hoststeps.steps.functions) == states.HOST_STEPS  # registered in order
    runs = estimate.host_steps(load_profile("home-snoop").data, estimate.Assumptions())
    assert tuple(runs) == states.HOST_STEPS
    limits = timeouts.action_timeouts(load_profile("home-snoop").data)
    assert set(states.ACTION_STEPS) <= set(limits)


def test_the_registry_takes_known_steps_once() -> None:
    registry = states.StepRegistry()
    with pytest.raises(ValueError, match="unknown step 'reflash'"):
        registry.step("reflash")
    registry.step("drain")(lambda run, state: {})
    with pytest.raises(ValueError, match="registered twice"):
        registry.step("drain")(lambda run, state: {})
    with pytest.raises(ValueError, match="step 'stage' has no function"):
        registry.function("stage")
    assert registry.missing() == tuple(s for s in states.HOST_STEPS if s != "drain")


def test_end_states_host_states_and_their_words_agree() -> None:
    finish = _yaml("actions/finish.yaml")["parameters"]["status"]["enum"]
    assert set(finish) == set(states.END_RANK) and set(finish) <= set(states.ROLLOUT_STATES)
    published = set()
    for task in _yaml("actions/workflows/rollout.yaml")["tasks"].values():
        for transition in task.get("next") or []:
            for item in transition.get("publish") or []:
                if "status" in item:
                    published.add(item["status"])
    assert published and published <= set(states.ROLLOUT_STATES)
    assert set(style.HOST_STATUS) == set(states.HOST_STATES)
    assert set(states.RESTORE_STATES) < set(states.HOST_STATES)


def test_batch_one_is_index_zero_everywhere_people_read_it() -> None:
    assert [states.batch_label(i) for i in range(3)] == [1, 2, 3]
    html = batch_section({"index": 0, "hosts": ["h1"], "canary": True}, {}, {}, None, 0.0,
                         False)
    assert "Batch 1 (canary)" in html and 'id="batch-0"' in html
