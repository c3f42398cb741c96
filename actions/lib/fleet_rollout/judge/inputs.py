"""The judge's input: per-host counter windows of canary and control hosts, pre and post.

Format (JSON; docs/judge.md has the full description and an example)::

    {
      "schema_version": 1,
      "rollout": "snoop-2024-05", "batch": 3,                    (optional, shown in reports)
      "windows": {"pre":  {"start": "2024-05-01T10:00:00Z", "end": "2024-05-01T11:00:00Z"},
                  "post": {"start": "2024-05-01T12:00:00Z", "end": "2024-05-01T13:00:00Z"}},
      "canary":  ["web-001", "web-002", ...],
      "control": ["web-101", ...],
      "hosts": {
        "web-001": {"pre":  {"drops": 12, "packets": 3400000},
                    "post": {"drops": 30, "packets": 3500000, "coverage": 0.98},
                    "site": "fra1", "model": "r640"},                  (optional)
        "web-002": {"pre": {"start": SNAPSHOT, "end": SNAPSHOT}, "post": null,
                    "note": "reboot inside post window"}
      }
    }

A window is either reduced (``drops``, ``packets``, optional ``coverage`` 0..1, ``seconds``,
``steps``: the drops per equal step of the window, adding up to ``drops``) or
two raw collector snapshots (``start``/``end``, and optionally ``between``: the snapshots taken
at the steps inside the window, in order) that are reduced here with the policy's metric; the
drops between consecutive snapshots are the window's steps.
``pre_windows`` (optional, 1 to 4, default 1): the pre window lasts that many post windows (the
hosts' longer history before the change measures their rate before more precisely); its steps
are as long as the post window's.
``null`` (or no key) means the host has no usable data for that window. A host listed in
``canary``/``control`` without an entry in ``hosts`` has no data either; the guards count it.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from fleet_rollout.counters.deltas import WindowCounts, window_from_snapshots
from fleet_rollout.counters.metric import DEFAULT_METRIC, MetricDefinition
from fleet_rollout.errors import ConfigError
from fleet_rollout.profile import MAX_PRE_WINDOWS  # the pre window: up to this many post windows

SCHEMA_VERSION = 1
TOP_KEYS = ("schema_version", "rollout", "batch", "comment", "windows", "pre_windows", "canary",
            "control", "hosts")
HOST_KEYS = ("pre", "post", "note", "site", "model")
WINDOW_KEYS = ("drops", "packets", "coverage", "seconds", "problem", "wraps", "resets", "detail",
               "steps")
MAX_STEPS = 10000
EQUAL_WINDOW_TOLERANCE = 0.02
_HOST_KEY_SET = frozenset(HOST_KEYS)
_WINDOW_KEY_SET = frozenset(WINDOW_KEYS)


@dataclass
class HostWindows:
    host: str
    group: str  # "canary" | "control"
    pre: Optional[WindowCounts] = None
    post: Optional[WindowCounts] = None
    note: Optional[str] = None
    listed_only: bool = False  # named in canary/control but no entry in hosts
    site: Optional[str] = None  # compared within its site and hardware model (weighted.py)
    model: Optional[str] = None
    steps_pre: Optional[List[float]] = None  # per-step drops of a window, when given
    steps_post: Optional[List[float]] = None


@dataclass
class JudgeInput:
    canary: List[str]
    control: List[str]
    hosts: Dict[str, HostWindows]
    pre_window: Optional[Tuple[float, float]] = None
    post_window: Optional[Tuple[float, float]] = None
    rollout: Optional[str] = None
    batch: Optional[Any] = None
    pre_windows: float = 1.0  # how many post windows long the pre window is (its steps too)

    def group(self, name: str) -> List[HostWindows]:
        return [self.hosts[host] for host in (self.canary if name == "canary" else self.control)]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid number here")


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # dict first: the ABC is slow


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_time(value: Any, where: str) -> float:
    """Unix seconds or an ISO 8601 time with a zone ('Z' or +hh:mm) -> unix seconds."""
    if _is_number(value):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: not a finite time")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not an ISO 8601 time "
                              "(e.g. 2024-05-01T10:00:00Z) or unix seconds") from None
        if parsed.tzinfo is None:
            raise ConfigError(f"{where}: {value!r} has no time zone; add Z or +hh:mm")
        return parsed.timestamp()
    raise ConfigError(f"{where}: must be unix seconds or an ISO 8601 time, got {value!r}")


def _count(value: Any, where: str) -> float:
    if not _is_number(value):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: must be finite, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: {value!r} is negative; a counter delta cannot be (was a "
                          "counter reset or reboot inside the window differenced by hand?)")
    return value


def _window(value: Any, where: str, metric: MetricDefinition,
            expected_seconds: Optional[float]) -> Optional[WindowCounts]:
    if value is None:
        return None
    if not _is_mapping(value):
        raise ConfigError(f"{where}: must be an object (drops/packets or start/end snapshots) "
                          "or null")
    if "start" in value or "end" in value:
        if set(value) - {"start", "end", "between"}:
            raise ConfigError(f"{where}: a snapshot window has only start, end and between")
        if "start" not in value or "end" not in value:
            raise ConfigError(f"{where}: a snapshot window needs both start and end")
        return window_from_snapshots(value["start"], value["end"], metric, expected_seconds,
                                     where)
    unknown = sorted(set(value) - _WINDOW_KEY_SET)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                          f"(allowed: {', '.join(WINDOW_KEYS)}, or start/end snapshots)")
    for key in ("drops", "packets"):
        if key not in value:
            raise ConfigError(f"{where}: {key} missing")
    counts = WindowCounts(
        drops=_count(value["drops"], f"{where}.drops"),
        packets=_count(value["packets"], f"{where}.packets"),
    )
    if "coverage" in value:
        coverage = _count(value["coverage"], f"{where}.coverage")
        if coverage > 1:
            raise ConfigError(f"{where}.coverage: {coverage!r} is above 1 (a share of the window)")
        counts.coverage = float(coverage)
    if "seconds" in value:
        counts.seconds = float(_count(value["seconds"], f"{where}.seconds"))
    if value.get("problem") is not None:
        if not isinstance(value["problem"], str):
            raise ConfigError(f"{where}.problem: must be a string")
        counts.problem = value["problem"]
    return counts


def _steps(value: Any, where: str, metric: MetricDefinition,
           window: Optional[WindowCounts]) -> Optional[List[float]]:
    """A window's per-step drops (equal steps, in order); they must add up to its drops."""
    if _is_mapping(value) and value.get("between") is not None:
        return _snapshot_steps(value, where, metric, window)
    if not _is_mapping(value) or value.get("steps") is None:
        return None
    steps = value["steps"]
    if not isinstance(steps, list) or not 2 <= len(steps) <= MAX_STEPS:
        raise ConfigError(f"{where}.steps: must be a list of 2 to {MAX_STEPS} per-step drop "
                          "counts")
    out = [float(_count(item, f"{where}.steps[{i}]")) for i, item in enumerate(steps)]
    total = sum(out)
    drops = value.get("drops")
    if _is_number(drops) and abs(total - drops) > 1e-6 * max(1.0, abs(drops)) + 1e-9:
        raise ConfigError(f"{where}.steps: add up to {total:g}, but drops is {drops:g}")
    return out


def _snapshot_steps(value: Mapping[str, Any], where: str, metric: MetricDefinition,
                    window: Optional[WindowCounts]) -> Optional[List[float]]:
    """The drops between consecutive snapshots of a window (start, between..., end); None when
    the window or one of its steps has a problem (a reboot or reset shows in the window) or a
    stepped clock (its steps are not equal)."""
    between = value["between"]
    if not isinstance(between, list) or not 1 <= len(between) < MAX_STEPS:
        raise ConfigError(f"{where}.between: must be a list of 1 to {MAX_STEPS - 1} snapshots "
                          "taken inside the window, in order")
    if window is None or window.problem or window.drops is None or window.clock_step is not None:
        return None  # a stepped clock also made its host's sample times (the steps) unequal
    chain = [value["start"], *between, value["end"]]
    steps = []
    for i in range(len(chain) - 1):
        # named by the snapshot that ends the step
        name = f"{where}.between[{i}]" if i < len(between) else f"{where}.end"
        step = window_from_snapshots(chain[i], chain[i + 1], metric, None, name)
        if step.problem or step.drops is None or step.clock_step is not None:
            return None
        steps.append(float(step.drops))
    return steps


def _label(value: Any, where: str) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ConfigError(f"{where}: must be a non-empty string (at most 200 characters)")
    return value


def judge_input_from_dict(data: Any, metric: MetricDefinition = DEFAULT_METRIC,
                          where: str = "input") -> JudgeInput:
    """Validate and load a judge input document; ConfigError names the field."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must be a JSON object with canary, control and hosts")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                          f"(allowed: {', '.join(TOP_KEYS)})")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(f"{where}: schema_version {version!r} is not supported "
                          f"(this judge reads {SCHEMA_VERSION})")

    groups: Dict[str, List[str]] = {}
    for name in ("canary", "control"):
        if name not in data:
            raise ConfigError(f"{where}: {name} missing (the list of {name} host names)")
        hosts = data[name]
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            raise ConfigError(f"{where}: {name} must be a list of host names")
        if not hosts:
            raise ConfigError(f"{where}: {name} is empty; the judge needs {name} hosts")
        duplicates = sorted(h for h, times in Counter(hosts).items() if times > 1)
        if duplicates:
            raise ConfigError(f"{where}: {name} lists {', '.join(duplicates)} more than once")
        groups[name] = list(hosts)
    both = sorted(set(groups["canary"]) & set(groups["control"]))
    if both:
        raise ConfigError(f"{where}: {', '.join(both)} listed as both canary and control")

    pre_windows = _pre_windows(data.get("pre_windows", 1), f"{where}.pre_windows")
    pre_window = post_window = None
    expected: Dict[str, Optional[float]] = {"pre": None, "post": None}
    if data.get("windows") is not None:
        windows = data["windows"]
        if not isinstance(windows, Mapping) or set(windows) != {"pre", "post"}:
            raise ConfigError(f"{where}.windows: must have exactly pre and post")
        bounds = {}
        for name in ("pre", "post"):
            window = windows[name]
            if not isinstance(window, Mapping) or set(window) != {"start", "end"}:
                raise ConfigError(f"{where}.windows.{name}: must have start and end")
            start = parse_time(window["start"], f"{where}.windows.{name}.start")
            end = parse_time(window["end"], f"{where}.windows.{name}.end")
            if end <= start:
                raise ConfigError(f"{where}.windows.{name}: end is not after start")
            bounds[name] = (start, end)
            expected[name] = end - start
        pre_window, post_window = bounds["pre"], bounds["post"]
        if post_window[0] < pre_window[1]:
            raise ConfigError(f"{where}.windows: post starts before pre ends")
        pre_len, post_len = expected["pre"] or 0.0, expected["post"] or 0.0
        if abs(pre_len - pre_windows * post_len) > EQUAL_WINDOW_TOLERANCE * pre_len:
            raise ConfigError(
                f"{where}.windows: pre lasts {pre_len:g} s and post {post_len:g} s; the method "
                f"needs a pre window {pre_windows:g} times as long as the post window "
                "(pre_windows; same length when it is not given)"
            )

    hosts_data = data.get("hosts")
    if not isinstance(hosts_data, Mapping):
        raise ConfigError(f"{where}: hosts missing or not an object (host name -> windows)")
    group_of = {host: name for name, hosts in groups.items() for host in hosts}
    strays = sorted(set(hosts_data) - set(group_of))
    if strays:
        raise ConfigError(f"{where}.hosts: {', '.join(strays[:5])} "
                          f"{'is' if len(strays) == 1 else 'are'} in neither canary nor control")

    result: Dict[str, HostWindows] = {}
    for host, group in group_of.items():
        entry = hosts_data.get(host)
        item = HostWindows(host, group)
        if entry is None:
            item.listed_only = True
            result[host] = item
            continue
        path = f"{where}.hosts.{host}"
        if not _is_mapping(entry):
            raise ConfigError(f"{path}: must be an object with pre and post windows")
        unknown = sorted(set(entry) - _HOST_KEY_SET)
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} "
                              f"(allowed: {', '.join(HOST_KEYS)})")
        item.pre = _window(entry.get("pre"), f"{path}.pre", metric, expected["pre"])
        item.post = _window(entry.get("post"), f"{path}.post", metric, expected["post"])
        item.steps_pre = _steps(entry.get("pre"), f"{path}.pre", metric, item.pre)
        item.steps_post = _steps(entry.get("post"), f"{path}.post", metric, item.post)
        item.site = _label(entry.get("site"), f"{path}.site")
        item.model = _label(entry.get("model"), f"{path}.model")
        note = entry.get("note")
        if note is not None and not isinstance(note, str):
            raise ConfigError(f"{path}.note: must be a string")
        item.note = note
        result[host] = item
    rollout = data.get("rollout")
    return JudgeInput(groups["canary"], groups["control"], result, pre_window, post_window,
                      None if rollout is None else str(rollout), data.get("batch"), pre_windows)


def _pre_windows(value: Any, where: str) -> float:
    if not _is_number(value) or not 1 <= value <= MAX_PRE_WINDOWS:
        raise ConfigError(f"{where}: must be a number from 1 to {MAX_PRE_WINDOWS} (how many post "
                          f"windows long the pre window is), got {value!r}")
    return float(value)


def load_judge_input(path: str, metric: MetricDefinition = DEFAULT_METRIC) -> JudgeInput:
    """Read a judge input JSON file; ConfigError names the file and the field."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read judge input: {exc.strerror}") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    return judge_input_from_dict(data, metric, path)
