"""Import-time fixes that let PyPI's orquesta 1.2.0 run on Python 3.11, plus st2's functions.

Never edits installed files. `apply()` is idempotent and must run before anything imports
`orquesta` (every runtime module imports this module first):

1. networkx 1.11 imports `fractions.gcd` (removed in Python 3.9): alias it to `math.gcd`.
2. orquesta/yaql use `collections.Mapping` & co. (removed in 3.10): alias the ABCs.
3. `orquesta.utils.parameters.REGEX_INLINE_PARAMS` embeds the global inline flag `(?i)true`
   in the middle of a pattern, an error since Python 3.11: rewrite it as the scoped `(?i:true)`.

It also registers StackStorm's orquesta expression functions (`st2kv`, `task`, the json/yaml/
regex/path helpers) into orquesta's function catalog, the way st2's orquesta runner does through
the `orquesta.expressions.functions` entry point group, but in memory.
"""
from __future__ import annotations

import collections
import collections.abc
import fractions
import math
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


def apply() -> None:
    """Apply every fix once per process."""
    global _APPLIED
    with _LOCK:
        if _APPLIED:
            return
        _fix_stdlib()
        # The function catalog must be complete before the evaluators are imported: they copy
        # it into their Jinja environment / YAQL root context at class creation.
        from fleet_runtime import functions

        _register_functions(functions.orquesta_functions())
        _fix_inline_params_regex()
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
