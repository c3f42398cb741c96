"""orquesta 1.2.0 on Python 3.11: the compat fixes, st2's expression functions, the conductor."""
from __future__ import annotations

import collections
import fractions
import math
import random
import re
import sys

import pytest

from fleet_runtime import compat, conductor

# isort: split
from orquesta import events, machines, statuses
from orquesta.expressions import base as expr_base
from orquesta.specs import native
from orquesta.utils import parameters


def test_stdlib_aliases_installed() -> None:
    assert fractions.gcd is math.gcd
    assert collections.Mapping is collections.abc.Mapping
    assert collections.MutableSequence is collections.abc.MutableSequence


def test_inline_params_regex_compiles_and_parses_booleans() -> None:
    assert "(?i)true" not in parameters.REGEX_INLINE_PARAMS
    re.compile(parameters.REGEX_INLINE_PARAMS)
    parsed = parameters.parse_inline_params('a=TRUE b=false c=1 d="x y" e=<% ctx(x) %>')
    assert parsed == [{"a": True}, {"b": False}, {"c": 1}, {"d": "x y"}, {"e": "<% ctx(x) %>"}]


def test_site_packages_untouched() -> None:
    """The fixes are applied in memory: the installed module text still has the 3.11 bug."""
    import inspect

    source = inspect.getsource(sys.modules["orquesta.utils.parameters"])
    assert 'REGEX_TRUE = r"(?i)true"' in source


def test_apply_is_idempotent() -> None:
    compat.apply()
    compat.apply()
    assert "st2kv" in expr_base.get_evaluators()["yaql"]._custom_functions


@pytest.mark.parametrize(
    "expr,expected",
    [
        ("<% json_dump({a => 1}) %>", '{"a": 1}'),
        ("<% from_json_string('[1, 2]') %>", [1, 2]),
        ("<% regex_match('host-7', 'host-\\d') %>", True),
        ("<% regex_substring('v1.2.3', '(\\d+)', 1) %>", "2"),
        ("{{ to_yaml_string({'a': 1}) }}", "a: 1\n"),
        ("{{ use_none(None) }}", "%*****__%NONE%__*****%"),
        ("<% to_human_time_from_seconds(3725) %>", "1h2m5s"),
        ("<% basename('/a/b/c.txt') %>", "c.txt"),
    ],
)
def test_st2_expression_functions(expr: str, expected: object) -> None:
    assert expr_base.evaluate(expr, {}) == expected


def _random_items(rng: random.Random, n: int) -> list:
    choices = statuses.ALL_STATUSES
    return [{"status": rng.choice(choices)} for _ in range(n)]


class _State:
    def __init__(self, items: list) -> None:
        self.staged = {"items": items}

    def get_staged_task(self, task_id: str, route: int) -> dict:
        return self.staged


def test_item_event_name_matches_orquesta_on_random_states() -> None:
    """The O(1)-per-status replacement of add_context_to_task_item_event gives the same
    event names as orquesta's original on 3,000 random item-status lists."""
    rng = random.Random(20240611)
    original = conductor.ORIGINAL_ADD_CONTEXT_TO_TASK_ITEM_EVENT.__func__
    for _ in range(3000):
        n = rng.randint(1, 8)
        items = _random_items(rng, n)
        item_id = rng.randrange(n)
        event = events.TaskItemActionExecutionEvent(item_id, rng.choice(statuses.ALL_STATUSES))
        state = _State(items)
        expected = original(machines.TaskStateMachine, state, "t", 0, event)
        got = conductor._item_event_name(machines.TaskStateMachine, state, "t", 0, event)
        assert got == expected, (items, item_id, event.status)


def test_state_view_serves_workflow_functions() -> None:
    spec = native.WorkflowSpec(
        """
version: 1.0
tasks:
  a:
    action: core.noop
    next:
      - when: <% succeeded() and task_status(a) = 'succeeded' %>
        publish:
          - seen: "{{ task_status('a') }}"
        do: b
  b:
    action: core.noop
output:
  - seen: <% ctx(seen) %>
"""
    )
    c = conductor.RuntimeConductor(spec)
    c.request_workflow_status(statuses.RUNNING)
    while True:
        tasks = c.get_next_tasks()
        if not tasks:
            break
        for task in tasks:
            c.update_task_state(task["id"], task["route"],
                                events.ActionExecutionEvent(statuses.RUNNING))
            c.update_task_state(task["id"], task["route"],
                                events.ActionExecutionEvent(statuses.SUCCEEDED))
    c.render_workflow_output()
    assert c.get_workflow_status() == statuses.SUCCEEDED
    assert c.get_workflow_output() == {"seen": "succeeded"}


def test_memoized_graph_agrees_with_networkx_cycles() -> None:
    spec = native.WorkflowSpec(
        """
version: 1.0
tasks:
  init:
    action: core.noop
    next:
      - do: loop
  loop:
    action: core.noop
    next:
      - when: <% succeeded() %>
        do: check
  check:
    action: core.noop
    next:
      - when: <% false %>
        do: loop
      - do: end
  end:
    action: core.noop
"""
    )
    c = conductor.RuntimeConductor(spec)
    graph = c.graph
    from orquesta import graphing

    for task in ("init", "loop", "check", "end"):
        assert bool(graph.in_cycle(task)) == bool(graphing.WorkflowGraph.in_cycle(graph, task))
    assert spec.tasks.in_cycle("loop") and not spec.tasks.in_cycle("init")


def test_yaql_parses_from_many_threads_at_once() -> None:
    """The runtime evaluates YAQL in its engine thread while its API threads (and clients in
    the same process) inspect workflows: orquesta's one yaql parser must not be shared by two
    parses at once. Without the lock, 6 threads x 300 expressions failed with parse errors
    ("unexpected end of statement", a Lexer without `lexmatch`)."""
    import threading

    from orquesta.expressions import yql

    exprs = [f"<% 1 + {i} * (2 - {i}) %>" for i in range(300)]
    ctx: dict = {}
    errors = []

    def work(seed: int) -> None:
        order = random.Random(seed).sample(range(len(exprs)), len(exprs))
        try:
            for i in order:
                assert yql.YAQLEvaluator.evaluate(exprs[i], ctx) == 1 + i * (2 - i)
        except Exception as err:  # collected: the assertion below names them
            errors.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
