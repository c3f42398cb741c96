"""StackStorm's expression functions, for Orquesta (YAQL/Jinja) and for Jinja templates.

Same names, arguments and results as st2's `st2common.expressions.functions.*` and the orquesta
runner's `st2kv` / `task` functions (written here from their documented behaviour).
"""
from __future__ import annotations

import datetime
import json
import os
import re
from typing import Any, Callable, Dict, List, Optional

import yaml

# The magic string `use_none` turns None into, so rendered strings can carry a None.
NONE_MAGIC_VALUE = "%*****__%NONE%__*****%"


class _ExpressionError(Exception):
    """Raised as orquesta's ExpressionEvaluationException (imported lazily: compat order)."""


def _expr_exc(message: str) -> Exception:
    try:
        from orquesta import exceptions as exc

        return exc.ExpressionEvaluationException(message)
    except Exception:  # pragma: no cover - orquesta always importable after compat
        return _ExpressionError(message)


def _plain(value: Any) -> Any:
    """YAQL hands FrozenDict / tuples to functions: turn them back into JSON types."""
    try:
        from yaql.language import utils as yaql_utils

        return yaql_utils.convert_output_data(value, limit_func=lambda x: x, engine=None)
    except Exception:
        return value


# ---------------------------------------------------------------- data
def from_json_string(value: Any) -> Any:
    return json.loads(str(value))


def from_yaml_string(value: Any) -> Any:
    return yaml.safe_load(str(value))


def to_json_string(
    value: Any, indent: Optional[int] = None, sort_keys: bool = False, separators: Any = (",", ": ")
) -> str:
    options: Dict[str, Any] = {}
    if indent is not None:
        options["indent"] = indent
    if sort_keys is not None:
        options["sort_keys"] = sort_keys
    if separators is not None:
        options["separators"] = tuple(separators)
    return json.dumps(_plain(value), **options)


def to_yaml_string(value: Any, indent: Optional[int] = None, allow_unicode: bool = True) -> str:
    options: Dict[str, Any] = {"default_flow_style": False}
    if indent is not None:
        options["indent"] = indent
    if allow_unicode is not None:
        options["allow_unicode"] = allow_unicode
    return yaml.safe_dump(_plain(value), **options)


def json_escape(value: Any) -> str:
    return json.dumps(value).strip('"')


def to_complex(value: Any) -> str:
    return json.dumps(_plain(value))


def use_none(value: Any) -> Any:
    return NONE_MAGIC_VALUE if value is None else value


def jsonpath_query(value: Any, query: str) -> Any:
    """A subset of JSONPath: `$.a.b[0].c`, `a.b[*].c`."""
    from fleet_runtime.payload import lookup

    matches = lookup(_plain(value), query.lstrip("$").lstrip("."))
    return matches or None


# ---------------------------------------------------------------- regex
def _flags(ignorecase: bool) -> int:
    return re.I if ignorecase else 0


def regex_match(value: Any, pattern: str, ignorecase: bool = False) -> bool:
    return bool(re.match(pattern, str(value), _flags(ignorecase)))


def regex_replace(value: Any, pattern: str, replacement: str, ignorecase: bool = False) -> str:
    return re.compile(pattern, _flags(ignorecase)).sub(replacement, str(value))


def regex_search(value: Any, pattern: str, ignorecase: bool = False) -> bool:
    return bool(re.search(pattern, str(value), _flags(ignorecase)))


def regex_substring(
    value: Any, pattern: str, result_index: int = 0, ignorecase: bool = False
) -> str:
    return re.findall(pattern, str(value), _flags(ignorecase))[result_index]


# ---------------------------------------------------------------- path / time
def basename(path: str) -> str:
    return os.path.basename(path)


def dirname(path: str) -> str:
    return os.path.dirname(path)


def to_human_time_from_seconds(seconds: Any) -> Optional[str]:
    if seconds is None:
        return None
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds}\u03bcs"
    seconds = int(round(seconds))
    offset = datetime.datetime(1, 1, 1) + datetime.timedelta(seconds=seconds)
    parts = [offset.year - 1, offset.day - 1, offset.hour, offset.minute, offset.second]
    first = next((i for i, x in enumerate(parts) if x), None)
    if first is None:
        return "0s"
    parts = parts[first:]
    units = ["y", "d", "h", "m", "s"][-len(parts) :]
    return "".join(f"{p}{u}" for p, u in zip(parts, units))


# ---------------------------------------------------------------- st2 runtime functions
def st2kv_(context: Any, key: Any, **kwargs: Any) -> Any:
    """st2kv('system.name') / st2kv('name') (user scope), decrypt=false, default=<value>."""
    if not isinstance(key, str):
        raise TypeError("Given key is not typeof string.")
    decrypt = kwargs.get("decrypt", False)
    if not isinstance(decrypt, bool):
        raise TypeError("Decrypt parameter is not typeof bool.")
    try:
        username = context["__vars"]["st2"]["user"]
    except (KeyError, TypeError) as e:
        raise KeyError("Could not get user from context.") from e
    from fleet_runtime import compat

    services = compat.get_services()
    if services is None:
        raise _expr_exc("st2kv() is not available: no datastore is open.")
    try:
        return services.expression_kv_get(username, key, decrypt)
    except KeyError as e:
        if "default" in kwargs:
            return kwargs["default"]
        raise _expr_exc(str(e.args[0] if e.args else e)) from e


def task_(context: Any, task_id: Optional[str] = None, route: Optional[int] = None) -> Any:
    """st2's task(): the latest task execution record of a task (result, status, timestamps)."""
    from orquesta.expressions.functions import workflow as workflow_functions

    try:
        current_task = workflow_functions._get_current_task(context)
    except Exception:
        current_task = {}
    if task_id is None:
        task_id = current_task["id"]
    if route is None:
        route = current_task.get("route", 0)
    try:
        workflow_state = context["__state"] or {}
    except KeyError:
        workflow_state = {}
    pointers = workflow_state.get("tasks") or {}
    idx = pointers.get(f"{task_id}__r{route}")
    if idx is None:
        if route and route > 0:
            current = workflow_state["routes"][route]
            for i, prev in enumerate(reversed(workflow_state["routes"][:route])):
                if len(set(prev) - set(current)) == 0:
                    return task_(context, task_id=task_id, route=route - i - 1)
        raise _expr_exc(f'Unable to find task execution for "{task_id}".')
    entry = (workflow_state.get("sequence") or [])[idx]
    wf_ex_id = context["__vars"]["st2"]["workflow_execution_id"]
    from fleet_runtime import compat

    services = compat.get_services()
    record = services.task_execution(wf_ex_id, task_id, entry["route"]) if services else None
    if not record:
        raise _expr_exc(f'Unable to find task execution for "{task_id}".')
    return record


# ---------------------------------------------------------------- catalogs
_DATA_FUNCTIONS: Dict[str, Callable[..., Any]] = {
    "basename": basename,
    "dirname": dirname,
    "from_json_string": from_json_string,
    "from_yaml_string": from_yaml_string,
    "json_dump": to_json_string,
    "json_parse": from_json_string,
    "json_escape": json_escape,
    "jsonpath_query": jsonpath_query,
    "regex_match": regex_match,
    "regex_replace": regex_replace,
    "regex_search": regex_search,
    "regex_substring": regex_substring,
    "to_human_time_from_seconds": to_human_time_from_seconds,
    "to_json_string": to_json_string,
    "to_yaml_string": to_yaml_string,
    "use_none": use_none,
    "yaml_dump": to_yaml_string,
    "yaml_parse": from_yaml_string,
}


def orquesta_functions() -> Dict[str, Callable[..., Any]]:
    """What st2's orquesta runner registers under `orquesta.expressions.functions`."""
    result = dict(_DATA_FUNCTIONS)
    result["st2kv"] = st2kv_
    result["task"] = task_
    return result


def jinja_filters() -> Dict[str, Callable[..., Any]]:
    """Filters of st2's Jinja environment (rules, parameters, alias formats, notify)."""
    result = dict(_DATA_FUNCTIONS)
    result["to_complex"] = to_complex
    return result


__all__: List[str] = ["NONE_MAGIC_VALUE", "jinja_filters", "orquesta_functions"]
