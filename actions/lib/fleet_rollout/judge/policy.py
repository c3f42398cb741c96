"""The judge's policy: thresholds and guards, with defaults, validated with a clear error.

A policy file is YAML; every key is optional::

    alpha: 0.03               # one-sided level of the permutation test for FAIL
    ci_level: 0.94            # two-sided level of the ratio's interval (matches alpha)
    min_regression_ratio: 1.1 # a significant rise smaller than this (weighted ratio) still passes
    min_canary_hosts: 3       # usable canary hosts needed, else INCONCLUSIVE
    min_control_hosts: 5      # usable control hosts needed, else INCONCLUSIVE
    min_packets: 10000        # packets a host must receive in each window to be used
    min_coverage: 0.9         # share of each window a host's data must cover
    max_missing_share: 0.2    # hosts of a group without usable data (missing, reboot, reset, gaps)
    max_low_traffic_share: 0.34  # hosts of a group below min_packets
    max_traffic_shift: 1.5    # canary vs control change of traffic (ratio of medians), either way
    max_drop_rate: 0.01       # per canary host, post window: above it (and above its own pre
                              # rate changed as its site's controls changed; twice that if it
                              # was above the ceiling already) FAILS at once
    large_change: 5.0         # with fewer canaries than min_canary_hosts, a change this large
                              # (either way) is still decided (large_change.py)
    metric: {...}             # the drop metric (fleet_rollout.counters.metric), default if absent

In a profile the same keys go under ``canary:``; :func:`policy_from_dict` takes either mapping.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional

import yaml
from jsonschema import Draft4Validator

from fleet_rollout.counters.metric import DEFAULT_METRIC, MetricDefinition, metric_from_dict
from fleet_rollout.errors import ConfigError


@dataclass(frozen=True)
class Policy:
    alpha: float = 0.03
    ci_level: float = 0.94
    min_regression_ratio: float = 1.1
    min_canary_hosts: int = 3
    min_control_hosts: int = 5
    min_packets: int = 10000
    min_coverage: float = 0.9
    max_missing_share: float = 0.2
    max_low_traffic_share: float = 0.34
    max_traffic_shift: float = 1.5
    max_drop_rate: float = 0.01
    large_change: float = 5.0
    metric: MetricDefinition = field(default=DEFAULT_METRIC)

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["metric"] = self.metric.to_dict()
        return out


_NUMBER = {"type": "number"}
_INTEGER = {"type": "integer"}
SCHEMA: Dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "alpha": dict(_NUMBER, minimum=0, exclusiveMinimum=True, maximum=0.5),
        "ci_level": dict(_NUMBER, minimum=0.5, maximum=1, exclusiveMaximum=True),
        "min_regression_ratio": dict(_NUMBER, minimum=1),
        "min_canary_hosts": dict(_INTEGER, minimum=2),
        "min_control_hosts": dict(_INTEGER, minimum=2),
        "min_packets": dict(_INTEGER, minimum=1),
        "min_coverage": dict(_NUMBER, minimum=0, maximum=1),
        "max_missing_share": dict(_NUMBER, minimum=0, maximum=1),
        "max_low_traffic_share": dict(_NUMBER, minimum=0, maximum=1),
        "max_traffic_shift": dict(_NUMBER, minimum=1),
        "max_drop_rate": dict(_NUMBER, minimum=0, exclusiveMinimum=True, maximum=1),
        "large_change": dict(_NUMBER, minimum=2),
        "metric": {"type": "object"},
    },
}
_KEYS = sorted(SCHEMA["properties"])


def _path(error: Any) -> str:
    return ".".join(str(part) for part in error.path) or "(top level)"


def policy_from_dict(data: Optional[Mapping[str, Any]], where: str = "policy") -> Policy:
    """Validate a policy mapping (None = all defaults); ConfigError names ``where`` and field."""
    if data is None:
        return Policy()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must be a mapping of policy keys ({', '.join(_KEYS)})")
    for key, value in data.items():  # YAML booleans are ints to jsonschema 2.6; refuse them
        if isinstance(value, bool):
            raise ConfigError(f"{where}: {key}: must be a number, got {value!r}")
    errors = sorted(Draft4Validator(SCHEMA).iter_errors(dict(data)), key=lambda e: list(e.path))
    if errors:
        error = errors[0]
        message = error.message
        if error.validator == "additionalProperties":
            unknown = sorted(set(data) - set(_KEYS))
            message = f"unknown key(s) {', '.join(map(str, unknown))} (allowed: {', '.join(_KEYS)})"
        raise ConfigError(f"{where}: {_path(error)}: {message}")
    values = {key: value for key, value in data.items() if key != "metric"}
    metric = metric_from_dict(data.get("metric"), f"{where}: metric")
    policy = Policy(metric=metric, **values)
    smallest_p = 1.0 / math.comb(policy.min_canary_hosts + policy.min_control_hosts,
                                 policy.min_canary_hosts)
    if smallest_p >= policy.alpha:
        raise ConfigError(
            f"{where}: min_canary_hosts={policy.min_canary_hosts} and min_control_hosts="
            f"{policy.min_control_hosts} can never reach alpha {policy.alpha:g} (the smallest "
            f"possible p-value is {smallest_p:.3g}); raise the host minimums"
        )
    return policy


def load_policy(path: Optional[str]) -> Policy:
    """Read a policy YAML file (None = defaults)."""
    if path is None:
        return Policy()
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read policy file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return policy_from_dict(data, path)
