"""st2's Jinja environment: filters, `st2kv.system.x` lookups, render_values.

Used for action parameter defaults, rule criteria and action parameters, alias ack/result
formats, notify messages and dynamic pack config values.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional

import jinja2
import jinja2.sandbox

from fleet_runtime import functions

JINJA_START_MARKERS = ("{{", "{%")
MATCH_CRITERIA = r"({{)\s*(.*)\s*(}})"

_DATASTORE: Any = None


def set_datastore(datastore: Any) -> None:
    """The datastore `st2kv.*` lookups and `decrypt_kv` read (one per process)."""
    global _DATASTORE
    _DATASTORE = datastore


def is_jinja_expression(value: Any) -> bool:
    if not value or not isinstance(value, str):
        return False
    return any(marker in value for marker in JINJA_START_MARKERS)


def decrypt_kv(value: Any) -> str:
    if isinstance(value, KeyValueLookup):
        value = str(value)
    if not value:
        return value
    if _DATASTORE is None:
        raise ValueError("decrypt_kv: no datastore is open")
    return _DATASTORE.crypto.decrypt(str(value))


class KeyValueLookup:
    """`{{ st2kv.system.a.b }}` reads key `a.b`; a missing key renders as an empty string."""

    def __init__(
        self,
        scope: str,
        user: Optional[str] = None,
        key_prefix: str = "",
        cache: Optional[Dict[str, str]] = None,
    ) -> None:
        self._scope = scope
        self._user = user
        self._key_prefix = key_prefix
        self._cache = cache if cache is not None else {}

    def __str__(self) -> str:
        return self._cache.get(self._key_prefix, "")

    def __int__(self) -> int:
        return int(float(str(self)))

    def __float__(self) -> float:
        return float(str(self))

    def __bool__(self) -> bool:
        return bool(str(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyValueLookup):
            return str(self) == str(other)
        return str(self) == other

    def __hash__(self) -> int:
        return hash(str(self))

    def __getitem__(self, key: str) -> KeyValueLookup:
        return self._get(key)

    def __getattr__(self, name: str) -> KeyValueLookup:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._get(name)

    def _get(self, name: str) -> KeyValueLookup:
        key = f"{self._key_prefix}.{name}" if self._key_prefix else name
        value = None
        if _DATASTORE is not None:
            try:
                value = _DATASTORE.get(key, scope=self._scope, user=self._user)
            except Exception:
                value = None
        self._cache[key] = value if value is not None else ""
        return KeyValueLookup(self._scope, self._user, key, self._cache)


def kv_context(user: Optional[str]) -> Dict[str, Any]:
    return {"system": KeyValueLookup("system"), "user": KeyValueLookup("user", user)}


def get_environment(allow_undefined: bool = False) -> jinja2.Environment:
    undefined = jinja2.Undefined if allow_undefined else jinja2.StrictUndefined
    env = jinja2.sandbox.SandboxedEnvironment(
        undefined=undefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters.update(functions.jinja_filters())
    env.filters["decrypt_kv"] = decrypt_kv
    env.tests["in"] = lambda item, seq: item in seq
    return env


_ENV = get_environment()
_ENV_LOOSE = get_environment(allow_undefined=True)


def render(template: str, context: Dict[str, Any], allow_undefined: bool = False) -> str:
    env = _ENV_LOOSE if allow_undefined else _ENV
    return env.from_string(template).render(context)


def render_values(mapping: Any, context: Dict[str, Any], allow_undefined: bool = False) -> Any:
    """st2's render_values: strings rendered, lists/dicts rendered through their JSON text."""
    if not context or not mapping:
        return mapping
    super_context = dict(context)
    super_context["__context"] = context
    result = {}
    for key, value in mapping.items():
        reverse_json = False
        if isinstance(value, (dict, list)):
            text = json.dumps(value)
            reverse_json = True
        else:
            text = value if isinstance(value, str) else str(value)
        rendered = render(text, super_context, allow_undefined=allow_undefined)
        if rendered == text:
            result[key] = mapping[key]
            continue
        result[key] = json.loads(rendered) if reverse_json else rendered
    return result


def render_criteria_pattern(pattern: Any, context: Dict[str, Any]) -> Any:
    """A rule criteria pattern: `{{ x }}` alone keeps its type (st2's to_complex trick)."""
    if pattern is None or not isinstance(pattern, str):
        return pattern
    if re.findall(MATCH_CRITERIA, pattern):
        complex_pattern = re.sub(MATCH_CRITERIA, r"\1\2 | to_complex\3", pattern)
        try:
            return json.loads(render(complex_pattern, context))
        except ValueError:
            pass
    return render(pattern, context)
