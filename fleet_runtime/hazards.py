"""Workflow shapes that run here but are known hazards on StackStorm (reported by
`fleet-rollout pack validate` as errors naming the file and the task).

An inquiry (a task whose action uses the inquirer runner, e.g. core.ask) after which the
workflow can end: when it is the last task of a sub-workflow, the answer completes the
sub-workflow while st2's inquiry service is still resuming its parent (services/inquiry.py
respond resumes the parent first), and the parent can stay paused or resuming for good
(StackStorm/st2#4865 "Orquesta: Potential Race Condition in Nested Inquiries", open; for
a timed out inquiry, StackStorm/orquesta#155). The rule checked is the simple one: every
inquiry task has a transition to a task (not only `noop` / `fail`) for succeeded() and one for
failed(). A transition without `when`, or with `completed()`, counts for both; `not
succeeded()` counts as failed() and `not failed()` as succeeded().
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Set

from fleet_runtime.runtime_errors import RuntimeErrorBase
from fleet_runtime.wfyaml import load_definition

ENGINE_COMMANDS = {"noop", "fail", "continue", "retry"}  # orquesta's ENGINE_EVENT_MAP
OUTCOMES = ("succeeded", "failed")


@dataclass(frozen=True)
class Hazard:
    file: str
    task: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: tasks.{self.task}: {self.message}"


def outcomes(when: Any) -> Set[str]:
    """The task outcomes a transition condition is written for."""
    text = str(when or "")
    if not text.strip() or "completed()" in text:
        return set(OUTCOMES)
    found = set()
    if re.search(r"(?<!not )succeeded\(\)", text) or re.search(r"not\s+failed\(\)", text):
        found.add("succeeded")
    if re.search(r"(?<!not )failed\(\)", text) or re.search(r"not\s+succeeded\(\)", text):
        found.add("failed")
    return found


def _targets(do: Any) -> List[str]:
    if isinstance(do, str):
        return [t.strip() for t in do.split(",") if t.strip()]
    if isinstance(do, list):
        return [str(t).strip() for t in do]
    return []


def uncovered_outcomes(task: Any) -> List[str]:
    """Outcomes of the task after which no transition leads to a task."""
    covered: Set[str] = set()
    for transition in (task.get("next") or []) if isinstance(task, dict) else []:
        if not isinstance(transition, dict):
            continue
        if any(t not in ENGINE_COMMANDS for t in _targets(transition.get("do"))):
            covered |= outcomes(transition.get("when"))
    return [o for o in OUTCOMES if o not in covered]


def inquiry_hazards(registry: Any) -> List[Hazard]:
    """Every inquiry task of the loaded packs' workflows that the workflow can end after."""
    from fleet_runtime.packs import workflow_shown

    inquirers = {ref for ref, a in registry.actions.items() if a.runner_type == "inquirer"}
    found: List[Hazard] = []
    for action in sorted(registry.actions.values(), key=lambda a: a.ref):
        if action.runner_type != "orquesta" or not action.entry_point:
            continue
        try:
            with open(action.entry_point) as fh:
                definition = load_definition(fh.read())
        except (OSError, ValueError, RuntimeErrorBase):
            continue  # reported as a load error
        tasks = definition.get("tasks") if isinstance(definition, dict) else None
        found.extend(_check_tasks(workflow_shown(action), tasks or {}, inquirers))
    return found


def _check_tasks(shown: str, tasks: Any, inquirers: Iterable[str]) -> List[Hazard]:
    found = []
    for name, task in (tasks.items() if isinstance(tasks, dict) else []):
        if not isinstance(task, dict) or task.get("action") not in inquirers:
            continue
        missing = uncovered_outcomes(task)
        if missing:
            found.append(Hazard(shown, str(name), (
                f"the inquiry ({task['action']}) can end the workflow when it "
                f"{' or '.join(missing)}: on StackStorm an inquiry that ends a sub-workflow"
                " races its parent's resume (StackStorm/st2#4865) and the parent can stay paused;"
                " add a transition to a task (`do:`) for succeeded() and for failed()")))
    return found
