"""Import-time fixes that let PyPI's orquesta 1.2.0 run on Python 3.11, plus st2's functions.

Never edits installed files. `apply()` is idempotent and must run before anything imports
`orquesta` (every runtime module imports this module first):

1. networkx 1.11 imports `fractions.gcd` (removed in Python 3.9): alias it to `math.gcd`.
2. orquesta/yaql use `collections.Mapping` & co. (removed in 3.10): alias the ABCs.
3. `orquesta.utils.parameters.REGEX_INLINE_PARAMS` embeds the global inline flag `(?i)true`
   in the middle of a pattern, an error since Python 3.11: rewrite it as the scoped `(?i:true)`.

It then gives orquesta 1.2.0 the behaviour of the orquesta StackStorm 3.9 runs (1.6 and the
commit st2 pins, see docs/runtime.md "Differences from StackStorm"):

4. Jinja expressions are evaluated in a sandboxed environment (orquesta 1.5,
   orquesta/expressions/jinja.py): `{{ "x".__class__ }}` is refused as unsafe.
5. A failed task whose satisfied transition leads to a join task is remediated even when the
   join is not ready yet (orquesta 1.4, machines.py add_context_to_task_event with
   conducting.py has_barrier_next): 1.2.0 failed the workflow there.
6. orquesta's YAQL evaluator parses with one yaql engine per process, whose ply lexer keeps
   the text it is reading on itself; two threads parsing at once corrupt each other ("Parse
   error: unexpected end of statement", `Lexer` without `lexmatch`). st2 runs it under
   eventlet, where a parse is never interrupted; the runtime has real threads (its API
   servers, clients in one process): parses are serialized by a lock.
(with-items `concurrency` below 1 runs one item at a time, orquesta 1.6 conducting.py
_evaluate_task_actions: fleet_runtime.conductor does it; workflow YAML: fleet_runtime.wfyaml.)

It also registers StackStorm's orquesta expression functions (`st2kv`, `task`, the json/yaml/
regex/path helpers) into orquesta's function catalog, the way st2's orquesta runner does through
the `orquesta.expressions.functions` entry point group, but in memory.
"""
from __future__ import annotations

import collections
import collections.abc
import fractions
import importlib.abc
import math
import sys
import threading
from typing import Any, Callable, Dict, Optional

_APPLIED = False
_LOCK = threading.Lock()

_ABC_NAMES = (
    "Mapping",
    "MutableMapping",
    "Sequence",
    "MutableSequence",
    "Iterable",
    "Iterator",
    "Callable",
    "Hashable",
    "Set",
    "MutableSet",
    "Sized",
    "Container",
)


def _fix_stdlib() -> None:
    if not hasattr(fractions, "gcd"):
        fractions.gcd = math.gcd  # type: ignore[attr-defined]
    for name in _ABC_NAMES:
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


class _WithoutNumericStack(importlib.abc.MetaPathFinder):
    """numpy and scipy as if they were not installed: only while networkx is imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in ("numpy", "scipy"):
            raise ImportError(f"{name}: not imported with networkx (fleet_runtime.compat)")
        return None


def _import_networkx_lean() -> None:
    """networkx 1.11 (orquesta 1.2.0's) imports numpy and scipy's linear algebra when they are
    installed (the pack's judge needs scipy) for algorithms orquesta never calls: it uses the
    graph classes, json_graph and the cycle functions, all pure Python. That import was 0.3
    CPU-s of every process that opens the runtime (each CLI command, the engine, the API).
    networkx imports them inside `try: ... except ImportError`, so it is imported here with
    the two refused; they import as usual afterwards (the judge's scipy in the same process)."""
    if "networkx" in sys.modules:
        return
    refuse = _WithoutNumericStack()
    sys.meta_path.insert(0, refuse)
    try:
        import networkx  # noqa: F401
    finally:
        sys.meta_path.remove(refuse)


def _fix_inline_params_regex() -> None:
    from orquesta.utils import parameters

    parameters.REGEX_TRUE = r"(?i:true)"
    parameters.REGEX_FALSE = r"(?i:false)"
    variations = [
        parameters.REGEX_TRUE if v == r"(?i)true" else v
        for v in parameters.REGEX_INLINE_PARAM_VARIATIONS
    ]
    variations = [parameters.REGEX_FALSE if v == r"(?i)false" else v for v in variations]
    parameters.REGEX_INLINE_PARAM_VARIATIONS = variations
    parameters.REGEX_INLINE_PARAMS = r"([\w]+)=(" + "|".join(variations) + ")"


def _register_functions(functions: Dict[str, Callable[..., Any]]) -> None:
    """Add functions to orquesta's catalog and to evaluators that already built theirs."""
    import sys

    from orquesta.expressions.functions import base as func_base

    catalog = func_base.load()
    catalog.update(functions)
    jinja_mod = sys.modules.get("orquesta.expressions.jinja")
    if jinja_mod is not None:
        env = jinja_mod.JinjaEvaluator._jinja_env
        for name, func in functions.items():
            env.filters[name] = func
        jinja_mod.JinjaEvaluator._custom_functions.update(functions)
    yql_mod = sys.modules.get("orquesta.expressions.yql")
    if yql_mod is not None:
        for name, func in functions.items():
            yql_mod.YAQLEvaluator._root_ctx.register_function(func, name=name)


def _sandbox_jinja() -> None:
    import jinja2.sandbox
    from orquesta.expressions import jinja as orquesta_jinja

    evaluator = orquesta_jinja.JinjaEvaluator
    if isinstance(evaluator._jinja_env, jinja2.sandbox.SandboxedEnvironment):
        return
    old = evaluator._jinja_env
    env = jinja2.sandbox.SandboxedEnvironment(
        undefined=old.undefined, trim_blocks=old.trim_blocks, lstrip_blocks=old.lstrip_blocks)
    env.filters.update({k: v for k, v in old.filters.items() if k not in env.filters})
    evaluator._jinja_env = env


def _has_satisfied_transition(conductor: Any, task_id: str, route: Any) -> bool:
    """orquesta 1.6's has_next_tasks(...) or has_barrier_next(...): the completed task has a
    transition whose criteria held, to a task (a join counts whether it is ready or not)."""
    entry = conductor.get_task_state_entry(task_id, route)
    if not entry or entry.get("status") not in _statuses().COMPLETED_STATUSES:
        return False
    from orquesta import constants

    for next_seq in conductor.graph.get_next_transitions(task_id):
        next_task_id, seq_key = next_seq[1], next_seq[2]
        transition = constants.TASK_STATE_TRANSITION_FORMAT % (next_task_id, str(seq_key))
        if next_task_id != "continue" and entry["next"].get(transition):
            return True
    return False


def _statuses() -> Any:
    from orquesta import statuses

    return statuses


def _remediate_failures_into_joins() -> None:
    from orquesta import events, machines

    machine = machines.WorkflowStateMachine
    if getattr(machine, "_rt_join_fix", False):
        return
    original = machine.add_context_to_task_event.__func__

    def add_context_to_task_event(cls: Any, workflow_state: Any, tk_ex_event: Any) -> str:
        event = original(cls, workflow_state, tk_ex_event)
        task_id = getattr(tk_ex_event, "task_id", None)
        route = getattr(tk_ex_event, "route", None)
        if (tk_ex_event.status not in _statuses().ABENDED_STATUSES
                or event.startswith(events.TASK_REMEDIATED)
                or not _has_satisfied_transition(workflow_state.conductor, task_id, route)):
            return event
        # 1.2.0 saw no next task (the join is not ready): remediated, as orquesta 1.6 decides,
        # with the suffix 1.6 gives a remediated task (no next task is ready yet)
        active = "_workflow_active" if workflow_state.has_active_tasks else "_workflow_dormant"
        event = events.TASK_REMEDIATED + active
        if workflow_state.has_canceling_tasks or workflow_state.has_canceled_tasks:
            return event + "_canceled"
        if workflow_state.has_pausing_tasks or workflow_state.has_paused_tasks:
            return event + "_paused"
        return event + ("_incomplete" if workflow_state.has_staged_tasks else "_completed")

    machine.add_context_to_task_event = classmethod(add_context_to_task_event)
    machine._rt_join_fix = True


class _SerializedParser:
    """A yaql engine whose parses run one at a time (evaluating a parsed expression is
    thread-safe: it keeps its state in the context it is given)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return self.engine(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def _serialize_yaql_parsing() -> None:
    from orquesta.expressions import yql

    if not isinstance(yql.YAQLEvaluator._engine, _SerializedParser):
        yql.YAQLEvaluator._engine = _SerializedParser(yql.YAQLEvaluator._engine)


def apply() -> None:
    """Apply every fix once per process."""
    global _APPLIED
    with _LOCK:
        if _APPLIED:
            return
        _fix_stdlib()
        _import_networkx_lean()
        # The function catalog must be complete before the evaluators are imported: they copy
        # it into their Jinja environment / YAQL root context at class creation.
        from fleet_runtime import functions

        _register_functions(functions.orquesta_functions())
        _fix_inline_params_regex()
        _sandbox_jinja()
        _remediate_failures_into_joins()
        _serialize_yaql_parsing()
        _APPLIED = True


# What st2kv() and task() read: the runtime installs its services object when it opens its store
# (methods `expression_kv_get(user, key, decrypt)` and `task_execution(wf_ex_id, task_id, route)`).
_SERVICES: Optional[Any] = None


def set_services(services: Optional[Any]) -> None:
    global _SERVICES
    _SERVICES = services


def get_services() -> Optional[Any]:
    return _SERVICES


apply()
