"""Change profiles (profiles/*.yaml): what to roll out and how carefully.

Validated with a JSON Schema (Draft 4: it runs on the jsonschema that st2 and orquesta ship) plus
the knob, metric and judge-policy checks of their own modules. Errors name the file and the field.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import yaml

from fleet_rollout import host_script
from fleet_rollout.errors import ConfigError
from fleet_rollout.paths import PROFILES_DIR
from fleet_rollout.redfish.personalities import KNOBS, validate_desired

PROFILE_NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,63}\\Z"  # \Z: no final newline
# Kernel command-line words: `key` or `key=value`; nothing a shell, GRUB's sh-sourced defaults
# file or Jinja could read as syntax (no quotes, $, backticks, ;, |, &, <, >, braces, spaces).
CMDLINE_TOKEN_PATTERN = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(=[A-Za-z0-9_.,:/+=-]{1,190})?$"
# sysctl names in dotted form (net.core.rmem_max): no "/", no "..", no leading dot.
SYSCTL_KEY_PATTERN = "^[a-z0-9_]+(\\.[A-Za-z0-9_-]+){1,7}$"
SYSCTL_VALUE_PATTERN = "^[A-Za-z0-9 _.,:/-]{1,256}$"
NIC_NAME_PATTERN = "^[A-Za-z0-9_.:-]{1,15}$"
# Tuning knobs only, by allow list (docs/kernel-settings.md): the host script's own lists, so
# the check at plan time and the one on the host are one and the same.
SYSCTL_ALLOWED: Tuple[str, ...] = host_script.load().SYSCTL_ALLOWED
CMDLINE_ALLOWED: Tuple[str, ...] = host_script.load().CMDLINE_ALLOWED

BIOS_ATTRIBUTE_PATTERN = "^[A-Za-z][A-Za-z0-9_]{0,63}$"
BIOS_VALUE_PATTERN = "^[A-Za-z0-9_.:-]{1,64}$"
TEXT_PATTERN = "^[^\\x00-\\x1f\\x7f{}]*$"  # one line, no Jinja markers
DAY = 86400
MAX_COUNT = 100000  # hosts in a batch, failures allowed, ...
MAX_SYSCTLS = 64
MAX_CMDLINE_TOKENS = 32
MAX_INTERFACES = 64
MAX_WINDOW_STEPS = 12  # canary.window_steps (collect_counters.yaml's label pattern: k < 12)
MAX_PRE_WINDOWS = 4  # canary.pre_windows; the judge input's pre_windows (the same bound)
_CONTROL = re.compile("[\\x00-\\x1f\\x7f]")


def _int(low: int, high: int) -> Dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


def _num(low: float, high: float) -> Dict[str, Any]:
    return {"type": "number", "minimum": low, "maximum": high}


def _text(max_length: int) -> Dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "pattern": TEXT_PATTERN}


def _tokens() -> Dict[str, Any]:
    return {"type": "array", "maxItems": MAX_CMDLINE_TOKENS,
            "items": {"type": "string", "pattern": CMDLINE_TOKEN_PATTERN}}


_NAME = {"type": "string", "pattern": PROFILE_NAME_PATTERN}
_COUNT = _int(1, MAX_COUNT)
_SECONDS = _num(0, DAY)
# a share of a site's or rack's hosts in the inventory ("5%", "12.5%"; capacity.py), or a count
SHARE_PATTERN = "^(100|[1-9]?[0-9](\\.[0-9]{1,2})?)%\\Z"
_LIMIT = {"type": ["integer", "string"], "minimum": 1, "maximum": MAX_COUNT,
          "pattern": SHARE_PATTERN}
_OPTIONAL_COUNT = {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_COUNT}
HOURS_PATTERN = "^[0-9]{2}:[0-9]{2}-[0-9]{2}:[0-9]{2}\\Z"
DATE_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}\\Z"
MAX_WINDOWS = 8  # maintenance.hours entries
MAX_AVOID_DATES = 366

SCHEMA: Dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "bios"],
    "properties": {
        "name": _NAME,
        "description": _text(200),
        "reverse_of": _NAME,
        "bios": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {k: {"enum": list(v)} for k, v in KNOBS.items()},
        },
        "bios_extra": {  # raw attributes for one vendor (lab: LabReceiveSlowdown)
            "type": "object", "maxProperties": 32,
            "additionalProperties": {"type": "string", "pattern": BIOS_VALUE_PATTERN},
        },
        "kernel": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "sysctl": {"type": "object", "maxProperties": MAX_SYSCTLS,
                           "additionalProperties": {
                               "type": ["string", "integer", "number"],
                               "pattern": SYSCTL_VALUE_PATTERN,
                               "minimum": -2 ** 63, "maximum": 2 ** 64 - 1}},
                "cmdline": {"type": "object", "additionalProperties": False, "properties": {
                    "add": _tokens(), "remove": _tokens()}},
                "nic": {"type": "object", "additionalProperties": False, "properties": {
                    "interfaces": {"type": "array", "maxItems": MAX_INTERFACES, "items": {
                        "type": "string", "pattern": NIC_NAME_PATTERN}},
                    "rx": _int(1, 65536), "tx": _int(1, 65536), "combined": _int(1, 1024),
                    "best_effort": {"type": "boolean"}}},
                "irq_affinity": {"enum": ["numa-local", "unchanged"]},
            },
        },
        "probe": {"type": "object", "additionalProperties": False, "properties": {
            "budget_ms": _int(200, 60000),
            "min_remote_local_ratio": _num(1, 1000)}},
        "canary": {"type": "object", "additionalProperties": False, "properties": {
            "window_seconds": _num(1, DAY),
            "window_steps": _int(1, MAX_WINDOW_STEPS),
            "pre_windows": _int(1, MAX_PRE_WINDOWS),
            "soak_seconds": _SECONDS,
            "metric": {"type": "object"},
            "policy": {"type": "object"}}},
        "batches": {"type": "object", "additionalProperties": False, "properties": {
            "canary_size": _COUNT, "growth": _num(1, 10),
            "max_batch": _COUNT, "max_unavailable_per_site": _LIMIT,
            "max_unavailable_per_rack": _LIMIT, "max_sites": _int(0, MAX_COUNT),
            "parallel": _int(1, 1000), "control_ratio": _num(2, 1000)}},
        "failure_budget": {"type": "object", "additionalProperties": False, "properties": {
            "per_batch": _int(0, MAX_COUNT), "total": _int(0, MAX_COUNT),
            "on_host_failure": {"enum": ["restore", "leave_drained"]}}},
        "approval": {"type": "object", "additionalProperties": False, "properties": {
            "required": {"type": "boolean"}, "auto_approve_canary": {"type": "boolean"},
            "manual_batches": _OPTIONAL_COUNT, "manual_above_hosts": _OPTIONAL_COUNT,
            "ttl_minutes": _int(1, DAY // 60)}},
        "maintenance": {"type": "object", "additionalProperties": False, "properties": {
            "hours": {"type": "array", "maxItems": MAX_WINDOWS,
                      "items": {"type": "string", "pattern": HOURS_PATTERN}},
            "avoid_dates": {"type": "array", "maxItems": MAX_AVOID_DATES,
                            "items": {"type": "string", "pattern": DATE_PATTERN}},
            "timezone": {"type": "string", "maxLength": 64}}},
        "redfish": {"type": "object", "additionalProperties": False, "properties": {
            "clear_foreign": {"type": "boolean"}, "graceful_timeout": _SECONDS,
            "force_timeout": _SECONDS, "boot_timeout": _SECONDS, "poll": _num(0.05, 60)}},
        "drain": {"type": "object", "additionalProperties": False, "properties": {
            "timeout": _SECONDS, "threshold": _int(0, 1000000)}},
    },
}

DEFAULTS: Dict[str, Any] = {
    "kernel": {},
    "bios_extra": {},
    "probe": {"budget_ms": 3000},
    "canary": {"window_seconds": 60, "window_steps": 4, "pre_windows": 3, "soak_seconds": 30,
               "metric": {}, "policy": {}},
    "batches": {"canary_size": 1, "growth": 2.0, "max_batch": 50,
                "max_unavailable_per_site": 2, "max_unavailable_per_rack": 1, "max_sites": 0,
                "parallel": 10, "control_ratio": 2},
    "failure_budget": {"per_batch": 0, "total": 0, "on_host_failure": "restore"},
    "approval": {"required": True, "auto_approve_canary": False, "manual_batches": None,
                 "manual_above_hosts": None, "ttl_minutes": 240},
    "maintenance": {"hours": [], "avoid_dates": [], "timezone": "UTC"},
    "redfish": {"clear_foreign": False, "graceful_timeout": 300, "force_timeout": 120,
                "boot_timeout": 900, "poll": 2},
    "drain": {"timeout": 300, "threshold": 0},
}


def _field(error: Any) -> str:
    parts = [_path_part(p) for p in error.path]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        parts.append(_path_part(extra[0]) if extra else "?")
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
    text = str(error.message)
    return text if len(text) <= 300 else text[:300] + "..."


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


_PLAIN = (str, int, float, bool, type(None))


def _path_part(part: Any) -> str:
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", text) else repr(text[:80])


def _path_text(parts: List[Any]) -> str:
    return ".".join(_path_part(p) for p in parts) or "(top level)"


def _check_plain(value: Any, parts: List[Any], where: str) -> None:
    """Only what YAML's plain types give: string keys, one-line strings, finite numbers."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{where}: field {_path_text(parts + [key])}: "
                                  f"names must be strings, not {type(key).__name__}")
            _check_plain(key, parts + [key], where)
            _check_plain(item, parts + [key], where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_plain(item, parts + [index], where)
    elif not isinstance(value, _PLAIN):
        raise ConfigError(f"{where}: field {_path_text(parts)}: unsupported YAML type "
                          f"{type(value).__name__}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: field {_path_text(parts)}: not a finite number")
    elif isinstance(value, str) and _CONTROL.search(value):
        raise ConfigError(f"{where}: field {_path_text(parts)}: control characters "
                          "(newline, tab, ...) are not allowed")


def allowed(name: str, names: Tuple[str, ...]) -> bool:
    """`name` is one of `names`, or begins with one ending in "." or "_"."""
    return any(name == a or (a[-1:] in "._" and name.startswith(a)) for a in names)


def _check_names(mapping: Any, pattern: str, parts: List[str], where: str, what: str) -> None:
    for key in mapping or {}:
        if not re.fullmatch(pattern, key):
            raise ConfigError(f"{where}: field {_path_text(parts + [key])}: {key!r} is not a "
                              f"valid {what} (allowed: {pattern})")


def _check_kernel_words(kernel: Dict[str, Any], where: str) -> None:
    """Second look at what reaches a host, with full matches (a schema `pattern` is a search:
    `$` there also matches before a final newline)."""
    _check_names(kernel.get("sysctl"), SYSCTL_KEY_PATTERN, ["kernel", "sysctl"], where,
                 "sysctl name")
    for key, value in (kernel.get("sysctl") or {}).items():
        if not allowed(key, SYSCTL_ALLOWED):
            raise ConfigError(f"{where}: field kernel.sysctl.{key}: {key} is not a tuning "
                              "setting profiles may change (the allowed ones: "
                              "docs/kernel-settings.md)")
        if isinstance(value, str) and not re.fullmatch(SYSCTL_VALUE_PATTERN, value):
            raise ConfigError(f"{where}: field kernel.sysctl.{key}: {value!r} is not a valid "
                              f"sysctl value (allowed: {SYSCTL_VALUE_PATTERN})")
    for group in ("add", "remove"):
        for index, token in enumerate((kernel.get("cmdline") or {}).get(group) or []):
            if not re.fullmatch(CMDLINE_TOKEN_PATTERN, token):
                raise ConfigError(f"{where}: field kernel.cmdline.{group}.{index}: {token!r} "
                                  f"is not a valid kernel command-line word")
            if not allowed(token.split("=", 1)[0], CMDLINE_ALLOWED):
                raise ConfigError(f"{where}: field kernel.cmdline.{group}.{index}: "
                                  f"{token.split('=', 1)[0]} is not a tuning word profiles may "
                                  "add or remove (the allowed ones: docs/kernel-settings.md)")
    for index, name in enumerate((kernel.get("nic") or {}).get("interfaces") or []):
        if not re.fullmatch(NIC_NAME_PATTERN, name) or name in (".", ".."):
            raise ConfigError(f"{where}: field kernel.nic.interfaces.{index}: {name!r} is not "
                              "a valid interface name")


def _check_schema(data: Dict[str, Any], where: str) -> None:
    from jsonschema import Draft4Validator

    errors = sorted(Draft4Validator(SCHEMA).iter_errors(data),
                    key=lambda e: [str(p) for p in e.path])
    if errors:
        first = errors[0]
        raise ConfigError(f"{where}: field {_field(first)}: {_message(first)}")


MIN_STEP_SECONDS = 5  # a collection of the batch and its controls must fit in a step


def pre_windows(canary: Dict[str, Any]) -> int:
    """How many windows the pre window lasts (a plan stored before pre_windows existed: 1)."""
    return int(canary.get("pre_windows", 1))


def window_steps(canary: Dict[str, Any]) -> Tuple[int, int]:
    """(steps of the pre window, steps of the post window): the post window has window_steps
    steps, the pre window pre_windows() times as many of the same length."""
    steps = int(canary.get("window_steps", 1))
    return steps * pre_windows(canary), steps


def step_seconds(canary: Dict[str, Any]) -> float:
    """Seconds from one collection's start to the next inside a window: window_seconds /
    window_steps (the pre window's steps have the same length)."""
    return float(canary["window_seconds"]) / window_steps(canary)[1]


READ_LEAD = 2.0  # seconds a window's read starts before its end (at most half a step)


def read_lead(step: float) -> float:
    """Seconds a window's read starts before the window ends: READ_LEAD, at most half a
    step. Its hosts wait for their last sample, so the run's start and its first forks happen
    while the window still runs."""
    return min(READ_LEAD, step / 2.0)


DEFAULT_FORKS = 20  # the pack config's ansible_forks when it gives none (config.PackConfig)
SAMPLE_FORKS = 100  # hosts a window's start and read work on at once (the configured forks if more)


def window_forks(forks: int, hosts: int) -> int:
    """Hosts a counter window's start or read run works on at once: up to SAMPLE_FORKS (or the
    configured `forks` if more), so that the hosts' windows start close together, and a host
    waiting for its window's end holds no other."""
    return max(int(forks), min(int(hosts), SAMPLE_FORKS))


def _check_canary(canary: Dict[str, Any], where: str) -> None:
    steps = int(canary["window_steps"])
    if steps > 1 and canary["window_seconds"] / steps < MIN_STEP_SECONDS:
        raise ConfigError(
            f"{where}: field canary.window_steps: {steps} steps of a {canary['window_seconds']:g} "
            f"s window are shorter than {MIN_STEP_SECONDS} s each; use at most "
            f"{max(1, int(canary['window_seconds'] // MIN_STEP_SECONDS))} steps (1: no steps)")
    try:
        from fleet_rollout.counters.metric import metric_from_dict
        from fleet_rollout.judge.policy import policy_from_dict

        metric_from_dict(canary.get("metric") or None, where=f"{where}: field canary.metric")
        policy_from_dict(canary.get("policy") or None, where=f"{where}: field canary.policy")
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{where}: field canary: {err}") from None


def validate_profile(data: Any, where: str) -> Dict[str, Any]:
    """The profile with defaults filled in; ConfigError naming `where` and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: field (top level): a profile is a YAML mapping")
    data = _dates_as_text(data)
    _check_plain(data, [], where)
    _check_schema(data, where)
    _check_names(data.get("bios_extra"), BIOS_ATTRIBUTE_PATTERN, ["bios_extra"], where,
                 "BIOS attribute name")
    for key, value in (data.get("bios_extra") or {}).items():
        if not re.fullmatch(BIOS_VALUE_PATTERN, value):
            raise ConfigError(f"{where}: field bios_extra.{key}: {value!r} is not a valid "
                              f"BIOS attribute value (allowed: {BIOS_VALUE_PATTERN})")
    _check_kernel_words(data.get("kernel") or {}, where)
    validate_desired(data["bios"], where=f"{where}: field bios")
    merged = _merge(DEFAULTS, data)
    _check_canary(merged["canary"], where)
    _check_limits(merged["batches"], where)
    _check_maintenance(merged["maintenance"], where)
    return merged


def _dates_as_text(data: Dict[str, Any]) -> Dict[str, Any]:
    """maintenance.avoid_dates as YAML reads an unquoted 2026-12-24 (a date): ISO text."""
    import datetime

    section = data.get("maintenance")
    if not isinstance(section, dict) or not isinstance(section.get("avoid_dates"), list):
        return data
    dates = [d.isoformat() if isinstance(d, datetime.date) else d
             for d in section["avoid_dates"]]
    return dict(data, maintenance=dict(section, avoid_dates=dates))


def _check_limits(batches: Dict[str, Any], where: str) -> None:
    for key in ("max_unavailable_per_site", "max_unavailable_per_rack"):
        value = batches[key]
        if isinstance(value, str) and float(value[:-1]) <= 0:
            raise ConfigError(f"{where}: field batches.{key}: {value!r} is no share of hosts "
                              "(more than 0%, at most 100%, or a count)")


def _check_maintenance(maintenance: Dict[str, Any], where: str) -> None:
    from fleet_rollout import maintenance as windows

    windows.parse_hours(maintenance["hours"], f"{where}: field maintenance.hours")
    windows.parse_dates(maintenance["avoid_dates"], f"{where}: field maintenance.avoid_dates")
    windows.load_zone(maintenance["timezone"], f"{where}: field maintenance.timezone")


def _profiles_dir() -> str:
    return PROFILES_DIR


def _read_yaml(path: str) -> Any:
    try:
        with open(path) as handle:
            return yaml.safe_load(handle)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err.__class__.__name__}") from None


def _profile_from_file(path: str, expected_name: Optional[str]) -> Profile:
    merged = validate_profile(_read_yaml(path), path)
    if expected_name is not None and merged["name"] != expected_name:
        raise ConfigError(f"{path}: field name: {merged['name']!r} must equal the file's name "
                          f"{expected_name!r}")
    return Profile(merged["name"], os.path.abspath(path), merged)


def load_profile(name: str, profiles_dir: Optional[str] = None) -> Profile:
    """A profile by name from the pack's profiles/ (`home-snoop` -> profiles/home-snoop.yaml).

    Names only (PROFILE_NAME_PATTERN): never a path, so an action parameter cannot point the pack
    at another file. `profiles_dir` is for the pack's own code, never for caller input."""
    if not isinstance(name, str) or not re.fullmatch(PROFILE_NAME_PATTERN, name):
        raise ConfigError(f"profile {str(name)[:80]!r}: a profile is named by its file in "
                          f"profiles/ (letters a-z, digits and '-', at most 64; no paths)")
    base = profiles_dir or _profiles_dir()
    path = os.path.join(base, f"{name}.yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(base) if f.endswith(".yaml")) if \
            os.path.isdir(base) else []
        raise ConfigError(f"profile {name!r} not found (profiles: {', '.join(known) or 'none'})")
    return _profile_from_file(path, name)


def load_profile_file(path: str) -> Profile:
    """A profile from any file, for trusted operator-side tools (the lab, benchmarks, tests).
    Never reachable from action parameters: actions use load_profile (names only)."""
    if not os.path.isfile(path):
        raise ConfigError(f"profile file {path} not found")
    return _profile_from_file(path, None)
