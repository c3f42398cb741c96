"""The real Orquesta 1.2.0 WorkflowConductor, with lazy rendering of with-items actions.

`WorkflowConductor.get_task()` renders every item of a with-items task (and deep-copies the
whole workflow state into each item's context) every time the engine asks for the next tasks,
which is O(items^2) per task. This subclass changes only how the same data is computed:

- the items list is evaluated once per task attempt (task, route, contexts, retry tally);
- only the items the concurrency window lets start are rendered, each in the task context plus
  `__current_item` (the same context orquesta builds, without copying it per item);
- `__state` (the serialized workflow state orquesta puts into every task context) is passed as
  a read-only `StateView` of the task table (tasks, sequence, routes, status) that the workflow
  functions (task_status, succeeded, failed, task, ...) read. YAQL deep-converts every mapping
  in its data on each evaluation; a view object is passed through as is, so evaluating
  `<% succeeded() %>` does not cost O(tasks so far);
- pure spec/graph queries (`is_split_task`, `get_prev_tasks`, `in_cycle`, ...) are memoized:
  orquesta recomputes them over the whole workflow on every transition (networkx
  simple_cycles per task), which makes a 1,000-task workflow take minutes.

It also replaces `TaskStateMachine.add_context_to_task_item_event` (which deep-copies the item
list and filters it five times per item event, O(items^2) per task) by `_item_event_name`: the
same event names from status counts (tests/runtime/test_runtime_compat.py checks both agree
on random item states). Everything else (state machines, transitions, retry, join, publish) is
orquesta's own code.
"""
from __future__ import annotations

import operator
import types
from collections import Counter
from typing import Any, Dict, List, Tuple

import ujson

from fleet_runtime import compat  # noqa: F401  (must precede orquesta imports)

# isort: split
from orquesta import conducting, machines, statuses
from orquesta import exceptions as orquesta_exc
from orquesta.expressions import base as expr_base
from orquesta.utils import context as ctx_util
from orquesta.utils import jsonify as json_util

_ITEM_EVENT_REQUIREMENTS = frozenset(
    [
        statuses.RESUMING,
        statuses.PENDING,
        statuses.PAUSED,
        statuses.SUCCEEDED,
        statuses.FAILED,
        statuses.EXPIRED,
        statuses.ABANDONED,
        statuses.CANCELED,
    ]
)

ORIGINAL_ADD_CONTEXT_TO_TASK_ITEM_EVENT = machines.TaskStateMachine.add_context_to_task_item_event


_STATUS = operator.itemgetter("status")


def _statuses(items: List[Dict[str, Any]]) -> List[str]:
    try:
        return list(map(_STATUS, items))
    except KeyError:
        return [item.get("status", statuses.UNSET) for item in items]


def _count(counts: Counter, wanted: Any) -> int:
    return sum(counts.get(s, 0) for s in wanted)


def _item_event_name(
    cls: Any, workflow_state: Any, task_id: str, task_route: int, event: Any
) -> str:
    """Same result as orquesta's add_context_to_task_item_event, from status counts."""
    action_event = event.name
    if event.status not in _ITEM_EVENT_REQUIREMENTS:
        return action_event
    staged_task = workflow_state.get_staged_task(task_id, task_route)
    items = staged_task["items"]
    counts = Counter(_statuses(items))
    counts[items[event.item_id].get("status", statuses.UNSET)] -= 1
    active = _count(counts, statuses.ACTIVE_STATUSES)
    incomplete = len(items) - 1 - _count(counts, statuses.COMPLETED_STATUSES)
    paused = _count(counts, (statuses.PENDING, statuses.PAUSED))
    canceled = counts.get(statuses.CANCELED, 0)
    failed = _count(counts, statuses.ABENDED_STATUSES)
    action_event += "_task_active" if active else "_task_dormant"
    if not active and paused:
        return action_event + "_items_paused"
    if not active and canceled:
        return action_event + "_items_canceled"
    if not active and failed:
        return action_event + "_items_failed"
    return action_event + ("_items_incomplete" if incomplete else "_items_completed")


machines.TaskStateMachine.add_context_to_task_item_event = classmethod(_item_event_name)


class StateView:
    """Read-only view of the live workflow state, in place of orquesta's serialized `__state`.

    Exposes the keys the workflow functions read (tasks, sequence, routes, status). Expressions
    are evaluated right after the view is made, on the engine thread, while the state does not
    change, so the view shows what a serialized copy would.
    """

    __slots__ = ("_state",)
    _KEYS = ("routes", "sequence", "status", "tasks")

    def __init__(self, state: Any) -> None:
        self._state = state

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._KEYS:
            return getattr(self._state, key)
        return default

    def __getitem__(self, key: str) -> Any:
        if key in self._KEYS:
            return getattr(self._state, key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._KEYS

    def keys(self) -> Any:
        return list(self._KEYS)

    def __deepcopy__(self, memo: Any) -> StateView:
        return self

    def __copy__(self) -> StateView:
        return self

    def __repr__(self) -> str:
        return f"StateView({len(self._state.sequence)} task entries)"


def _memoize_spec(spec: Any) -> None:
    """Cache the pure queries of the workflow's task mapping (instance attributes)."""
    tasks = spec.tasks
    if getattr(tasks, "_rt_memoized", False):
        return
    cls = type(tasks)
    next_cache: Dict[str, List[Any]] = {}
    prev_index: Dict[str, List[Any]] = {}
    cycle_cache: Dict[str, bool] = {}
    split_cache: Dict[str, bool] = {}

    def get_next_tasks(task_name: str, *args: Any, **kwargs: Any) -> List[Any]:
        if task_name not in next_cache:
            next_cache[task_name] = cls.get_next_tasks(tasks, task_name)
        return list(next_cache[task_name])

    def get_prev_tasks(task_name: str, *args: Any, **kwargs: Any) -> List[Any]:
        if not prev_index and len(tasks):
            for name in tasks.keys():
                for nxt in get_next_tasks(name):
                    prev_index.setdefault(nxt[0], []).append((name, nxt[1], nxt[2]))
            for key in prev_index:
                prev_index[key] = sorted(prev_index[key], key=lambda x: x[0])
            prev_index.setdefault("\0built", [])
        return list(prev_index.get(task_name, []))

    def in_cycle(task_name: str) -> bool:
        if task_name not in cycle_cache:
            cycle_cache[task_name] = cls.in_cycle(tasks, task_name)
        return cycle_cache[task_name]

    def is_split_task(task_name: str) -> bool:
        if task_name not in split_cache:
            split_cache[task_name] = cls.is_split_task(tasks, task_name)
        return split_cache[task_name]

    tasks.get_next_tasks = get_next_tasks
    tasks.get_prev_tasks = get_prev_tasks
    tasks.in_cycle = in_cycle
    tasks.is_split_task = is_split_task
    tasks._rt_memoized = True


def _memoize_graph(graph: Any) -> None:
    """graph.in_cycle() runs networkx simple_cycles over the whole graph on every call."""
    if getattr(graph, "_rt_memoized", False):
        return
    import networkx as nx

    g = graph._graph
    cyclic = set()
    for comp in nx.strongly_connected_components(g):
        if len(comp) > 1:
            cyclic |= set(comp)
    for node in g.nodes():
        if g.has_edge(node, node):
            cyclic.add(node)
    original = type(graph).in_cycle
    cache: Dict[str, List[Any]] = {}

    def in_cycle(task_id: str) -> List[Any]:
        if task_id not in cyclic:
            return []
        if task_id not in cache:
            cache[task_id] = original(graph, task_id)
        return list(cache[task_id])

    graph.in_cycle = in_cycle
    graph._rt_memoized = True


def render_input_literally(spec: Any, runtime_inputs: Dict[str, Any], in_ctx: Any = None
                           ) -> Tuple[Dict[str, Any], List[Any]]:
    """WorkflowSpec.render_input, stricter than orquesta: a value the workflow was given (the
    caller's parameters, or a parent task's input orquesta already rendered) is data and is
    not evaluated again; only the workflow's own defaults are expressions."""
    rolling_ctx = json_util.deepcopy(in_ctx) if in_ctx else {}
    errors: List[Any] = []
    for input_spec in spec.input or []:
        if isinstance(input_spec, dict):
            name, default = next(iter(input_spec.items()))
        else:
            name, default = input_spec, None
        if name in runtime_inputs:
            rolling_ctx[name] = json_util.deepcopy(runtime_inputs[name])
            continue
        try:
            rolling_ctx[name] = expr_base.evaluate(default, rolling_ctx)
        except orquesta_exc.ExpressionEvaluationException as e:
            errors.append(e)
    return rolling_ctx, errors


class RuntimeConductor(conducting.WorkflowConductor):
    """WorkflowConductor with lazy with-items rendering and memoized static queries."""

    def __init__(self, spec: Any, *args: Any, **kwargs: Any) -> None:
        if spec is not None and hasattr(spec, "tasks"):
            _memoize_spec(spec)
        if spec is not None and hasattr(spec, "render_input"):
            spec.render_input = types.MethodType(render_input_literally, spec)
        super().__init__(spec, *args, **kwargs)
        self._items_cache: Dict[Tuple[Any, ...], Tuple[Any, Any, Any]] = {}

    @property
    def graph(self) -> Any:
        graph = conducting.WorkflowConductor.graph.fget(self)
        _memoize_graph(graph)
        return graph

    def _state_view(self) -> StateView:
        return StateView(self.workflow_state)

    def state_json(self) -> str:
        """The workflow state as JSON, without orquesta's intermediate deep copies."""
        state = self.workflow_state
        data = {
            "contexts": state.contexts,
            "routes": state.routes,
            "sequence": state.sequence,
            "staged": state.staged,
            "status": state.status,
            "tasks": state.tasks,
        }
        if state.reruns:
            data["reruns"] = state.reruns
        try:
            return str(ujson.dumps(data))
        except (OverflowError, TypeError, ValueError):
            import json

            return json.dumps(json_util.deepcopy(data), default=str)

    def make_task_context(self, task_state_entry: Dict[str, Any], task_result: Any = None) -> Any:
        in_ctx_val = self.get_task_context(task_state_entry["ctxs"]["in"])
        current_task = {
            "id": task_state_entry["id"],
            "route": task_state_entry["route"],
            "result": task_result,
        }
        current_ctx = ctx_util.set_current_task(in_ctx_val, current_task)
        current_ctx["__state"] = self._state_view()
        return current_ctx

    @classmethod
    def deserialize(cls, data: Dict[str, Any]) -> RuntimeConductor:
        instance = super().deserialize(data)
        instance._items_cache = {}
        return instance  # type: ignore[return-value]

    def get_task(self, task_id: str, route: int) -> Dict[str, Any]:
        task_spec = self.spec.tasks.get_task(task_id)
        try:
            task_ctx = self.get_task_initial_context(task_id, route)
        except ValueError:
            task_ctx = self.get_workflow_initial_context()
        task_ctx = ctx_util.set_current_task(task_ctx, {"id": task_id, "route": route})
        task_ctx["__state"] = self._state_view()

        if not task_spec.has_items():
            # orquesta renders a copy of the spec (a full re-validation, ~2 ms); rendering
            # does not modify the spec, so the shared one is rendered directly.
            task_spec, action_specs = task_spec.render(task_ctx)
            task: Dict[str, Any] = {
                "id": task_id,
                "route": route,
                "ctx": task_ctx,
                "spec": task_spec,
                "actions": action_specs,
            }
            if getattr(task_spec, "delay", None):
                delay = task_spec.delay
                if isinstance(delay, str):
                    delay = expr_base.evaluate(delay, task_ctx)
                if not isinstance(delay, int):
                    raise TypeError("The value of task delay is not type of integer.")
                task["delay"] = delay
            return task

        staged = self.workflow_state.get_staged_task(task_id, route) or {}
        key = (
            task_id,
            route,
            tuple(staged.get("ctxs", {}).get("in", [])),
            (staged.get("retry") or {}).get("tally"),
            self.workflow_state.tasks.get(f"{task_id}__r{route}"),
        )
        cached = self._items_cache.get(key)
        if cached is None:
            # Items, delay and concurrency are evaluated once per task attempt.
            items = self._evaluate_items(task_spec, task_ctx)
            delay = None
            if getattr(task_spec, "delay", None):
                delay = task_spec.delay
                if isinstance(delay, str):
                    delay = expr_base.evaluate(delay, task_ctx)
                if not isinstance(delay, int):
                    raise TypeError("The value of task delay is not type of integer.")
            concurrency = getattr(getattr(task_spec, "with"), "concurrency", None)
            concurrency = expr_base.evaluate(concurrency, task_ctx)
            cached = (items, delay, concurrency)
            self._items_cache = {k: v for k, v in self._items_cache.items() if k[:2] != key[:2]}
            self._items_cache[key] = cached
        items, delay, concurrency = cached
        task = {
            "id": task_id,
            "route": route,
            "ctx": task_ctx,
            "spec": task_spec,
            "actions": None,
            "items_count": len(items),
            "concurrency": concurrency,
            "_items": items,
        }
        if delay is not None:
            task["delay"] = delay
        return task

    @staticmethod
    def _evaluate_items(task_spec: Any, in_ctx: Dict[str, Any]) -> List[Any]:
        items_spec = task_spec.get_items_spec()
        if " in " not in items_spec.items:
            items_expr = items_spec.items.strip()
            item_keys = None
        else:
            idx = items_spec.items.index(" in ")
            items_expr = items_spec.items[idx + 4 :].strip()
            item_keys = items_spec.items[:idx].replace(" ", "").split(",")
        items = expr_base.evaluate(items_expr, in_ctx)
        if not isinstance(items, list):
            raise TypeError(f'The value of "{items_expr}" is not type of list.')
        result = []
        for item in items:
            if item_keys and isinstance(item, (tuple, list)):
                item = dict(zip(item_keys, list(item)))
            elif item_keys and len(item_keys) == 1:
                item = {item_keys[0]: item}
            result.append(item)
        return result

    def _render_item(self, task: Dict[str, Any], item_id: int) -> Dict[str, Any]:
        task_spec = task["spec"]
        item_ctx = dict(task["ctx"])
        item_ctx["__current_item"] = task["_items"][item_id]
        return {
            "action": expr_base.evaluate(task_spec.action, item_ctx),
            "input": expr_base.evaluate(getattr(task_spec, "input", {}), item_ctx),
            "item_id": item_id,
        }

    def _evaluate_task_actions(self, task: Dict[str, Any]) -> Dict[str, Any]:
        if not task["spec"].has_items():
            return task
        staged_task = self.workflow_state.get_staged_task(task["id"], task["route"])
        if "items" not in staged_task or not staged_task["items"]:
            staged_task["items"] = [{"status": statuses.UNSET}] * task["items_count"]
        sts = _statuses(staged_task["items"])
        if task["concurrency"] is not None:
            # orquesta 1.6 (conducting.py _evaluate_task_actions): below 1 means 1 at a time
            task["concurrency"] = max(task["concurrency"], 1)
            availability = task["concurrency"] - _count(Counter(sts), statuses.ACTIVE_STATUSES)
        else:
            availability = len(sts)
        chosen: List[int] = []
        pos = 0
        while len(chosen) < availability:
            try:
                pos = sts.index(statuses.UNSET, pos)
            except ValueError:
                break
            chosen.append(pos)
            pos += 1
        task["actions"] = [self._render_item(task, i) for i in chosen]
        task.pop("_items", None)
        return task
