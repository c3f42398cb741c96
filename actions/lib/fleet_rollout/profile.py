"""Change profiles (profiles/*.yaml): what to roll out and how carefully.

Validated with a JSON Schema (Draft 4: it runs on the jsonschema that st2 and orquesta ship) plus
the knob, metric and judge-policy checks of their own modules. Errors name the file and the field.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

import yaml

from fleet_rollout.errors import ConfigError
from fleet_rollout.redfish.personalities import KNOBS, validate_desired

_INT = {"type": "integer", "minimum": 0}
_POS = {"type": "integer", "minimum": 1}
_NUM = {"type": "number", "minimum": 0}

SCHEMA: Dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "bios"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
        "description": {"type": "string"},
        "reverse_of": {"type": "string"},
        "bios": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {k: {"enum": list(v)} for k, v in KNOBS.items()},
        },
        "bios_extra": {  # raw attributes for one vendor (lab: LabReceiveSlowdown)
            "type": "object", "additionalProperties": {"type": "string"},
        },
        "kernel": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "sysctl": {"type": "object", "additionalProperties": {
                    "type": ["string", "integer", "number"]}},
                "cmdline": {"type": "object", "additionalProperties": False, "properties": {
                    "add": {"type": "array", "items": {"type": "string",
                                                       "pattern": "^[^\\s\"']+$"}},
                    "remove": {"type": "array", "items": {"type": "string",
                                                          "pattern": "^[^\\s\"']+$"}}}},
                "nic": {"type": "object", "additionalProperties": False, "properties": {
                    "interfaces": {"type": "array", "items": {"type": "string"}},
                    "rx": _POS, "tx": _POS, "combined": _POS,
                    "best_effort": {"type": "boolean"}}},
                "irq_affinity": {"enum": ["numa-local", "unchanged"]},
            },
        },
        "probe": {"type": "object", "additionalProperties": False, "properties": {
            "budget_ms": {"type": "integer", "minimum": 200, "maximum": 60000},
            "min_remote_local_ratio": {"type": "number", "minimum": 1}}},
        "canary": {"type": "object", "additionalProperties": False, "properties": {
            "window_seconds": {"type": "number", "minimum": 1},
            "soak_seconds": _NUM,
            "metric": {"type": "object"},
            "policy": {"type": "object"}}},
        "batches": {"type": "object", "additionalProperties": False, "properties": {
            "canary_size": _POS, "growth": {"type": "number", "minimum": 1},
            "max_batch": _POS, "max_unavailable_per_site": _POS,
            "max_unavailable_per_rack": _POS, "parallel": _POS,
            "control_ratio": {"type": "number", "minimum": 2}}},
        "failure_budget": {"type": "object", "additionalProperties": False, "properties": {
            "per_batch": _INT, "total": _INT,
            "on_host_failure": {"enum": ["restore", "leave_drained"]}}},
        "approval": {"type": "object", "additionalProperties": False, "properties": {
            "required": {"type": "boolean"}, "auto_approve_canary": {"type": "boolean"},
            "ttl_minutes": _POS}},
        "redfish": {"type": "object", "additionalProperties": False, "properties": {
            "clear_foreign": {"type": "boolean"}, "graceful_timeout": _NUM,
            "force_timeout": _NUM, "boot_timeout": _NUM, "poll": _NUM}},
        "drain": {"type": "object", "additionalProperties": False, "properties": {
            "timeout": _NUM, "threshold": _INT}},
    },
}

DEFAULTS: Dict[str, Any] = {
    "kernel": {},
    "bios_extra": {},
    "probe": {"budget_ms": 3000},
    "canary": {"window_seconds": 60, "soak_seconds": 30, "metric": {}, "policy": {}},
    "batches": {"canary_size": 1, "growth": 2.0, "max_batch": 50,
                "max_unavailable_per_site": 2, "max_unavailable_per_rack": 1, "parallel": 10,
                "control_ratio": 2},
    "failure_budget": {"per_batch": 0, "total": 0, "on_host_failure": "restore"},
    "approval": {"required": True, "auto_approve_canary": False, "ttl_minutes": 240},
    "redfish": {"clear_foreign": False, "graceful_timeout": 300, "force_timeout": 120,
                "boot_timeout": 900, "poll": 2},
    "drain": {"timeout": 300, "threshold": 0},
}


def _field(error: Any) -> str:
    parts = [str(p) for p in error.path]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        parts.append(extra[0] if extra else "?")
    if error.validator == "required":
        missing = str(error.message).split("'")
        if len(missing) > 1:
            parts.append(missing[1])
    return ".".join(parts) or "(top level)"


def _message(error: Any) -> str:
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"unknown field (allowed: {allowed})"
    if error.validator == "required":
        return "required field missing"
    return str(error.message)


@dataclass
class Profile:
    name: str
    path: str
    data: Dict[str, Any]

    @property
    def bios(self) -> Dict[str, str]:
        return dict(self.data["bios"])

    def section(self, key: str) -> Dict[str, Any]:
        return dict(self.data.get(key) or {})

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, **self.data}


def _merge(defaults: Dict[str, Any], data: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(data)
    for key, value in defaults.items():
        if isinstance(value, dict):
            merged = dict(value)
            merged.update(data.get(key) or {})
            out[key] = merged
        else:
            out.setdefault(key, value)
    return out


def validate_profile(data: Any, where: str) -> Dict[str, Any]:
    from jsonschema import Draft4Validator

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a profile is a YAML mapping")
    errors = sorted(Draft4Validator(SCHEMA).iter_errors(data), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        raise ConfigError(f"{where}: field {_field(first)}: {_message(first)}")
    validate_desired(data["bios"], where=f"{where}: bios")
    merged = _merge(DEFAULTS, data)
    canary = merged["canary"]
    try:
        from fleet_rollout.counters.metric import metric_from_dict
        from fleet_rollout.judge.policy import policy_from_dict

        metric_from_dict(canary.get("metric") or None, where=f"{where}: canary.metric")
        policy_from_dict(canary.get("policy") or None, where=f"{where}: canary.policy")
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{where}: canary: {err}") from None
    return merged


def load_profile(name_or_path: str, profiles_dir: Optional[str] = None) -> Profile:
    """A profile by path, or by name from profiles/ (`home-snoop` -> profiles/home-snoop.yaml)."""
    path = name_or_path
    if not os.path.exists(path):
        base = profiles_dir or os.path.join(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "profiles")
        path = os.path.join(base, f"{name_or_path}.yaml")
        if not os.path.exists(path):
            known = sorted(f[:-5] for f in os.listdir(base) if f.endswith(".yaml")) if \
                os.path.isdir(base) else []
            raise ConfigError(f"profile {name_or_path!r} not found (profiles: "
                              f"{', '.join(known) or 'none'})")
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    merged = validate_profile(data, path)
    return Profile(merged["name"], os.path.abspath(path), merged)
