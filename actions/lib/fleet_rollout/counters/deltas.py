"""Counter deltas over a window, with reboots, 32-bit wraps and counter resets handled.

Rules (the same for snapshots from the host collector and for Prometheus samples):

* A reboot inside the window (boot_id differs between the window's two snapshots, or
  node_boot_time_seconds changes) makes the window unusable: the drops before the reboot are
  lost, and the judge drops the window holding the reboot rather than guess.
* A counter the kernel keeps in 32 bits (softnet_stat) that goes down has wrapped:
  delta = after + 2**32 - before.
* Any other counter that goes down without a reboot was reset (driver reload, link reset,
  ``ethtool`` queue change). With two snapshots the lost part cannot be known, so the window is
  unusable; with a sampled series (Prometheus) the increase after the reset is counted from zero
  and the reset is reported.
* Deltas are taken per series (interface, CPU) and then summed, so one CPU's wrap is not hidden
  by another CPU's growth.
* A window's length comes from the host's wall clock (``time``), which NTP can step. Within one
  boot the snapshots' ``uptime_seconds`` (/proc/uptime, never stepped) tell how long it really
  was: where the two disagree by more than CLOCK_STEP_TOLERANCE the uptime's length counts
  (and so the window's coverage), the step is reported, and the window's per-step drops are
  not used (its host scheduled its samples by the stepped clock, so its steps are unequal).
"""
from __future__ import annotations

import math
from collections.abc import Mapping  # isinstance on typing's alias costs a call each
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fleet_rollout.counters.collector import SCHEMA
from fleet_rollout.counters.metric import CounterTerm, MetricDefinition, series_values
from fleet_rollout.errors import ConfigError

# Seconds (or this share of the window, if larger) by which the wall clock may disagree with the
# uptime over one window before it counts as stepped: /proc/uptime has 10 ms resolution, and a
# snapshot's time is the middle of its own reading
CLOCK_STEP_TOLERANCE, CLOCK_STEP_SHARE = 1.0, 0.02


class CounterReset(Exception):
    """A counter went down within one boot and cannot have wrapped."""


def counter_delta(before: int, after: int, width_bits: Optional[int] = None) -> Tuple[int, bool]:
    """Increase from ``before`` to ``after``: (delta, wrapped). Raises CounterReset."""
    if after >= before:
        return after - before, False
    if width_bits is not None:
        modulus = 1 << width_bits
        if 0 <= before < modulus and 0 <= after < modulus:
            return after + modulus - before, True
    raise CounterReset(f"went down from {before} to {after}")


@dataclass
class SeriesIncrease:
    increase: int
    resets: int = 0
    wraps: int = 0


def series_increase(values: Sequence[int], width_bits: Optional[int] = None) -> SeriesIncrease:
    """Increase over consecutive samples of one counter within one boot.

    A decrease is a wrap when the counter is narrow, else a reset counted from zero (the
    Prometheus ``increase()`` convention; the part before the reset within that one step is lost).
    """
    total = SeriesIncrease(0)
    for before, after in zip(values, values[1:]):
        try:
            delta, wrapped = counter_delta(before, after, width_bits)
            total.increase += delta
            total.wraps += int(wrapped)
        except CounterReset:
            total.increase += max(after, 0)
            total.resets += 1
    return total


@dataclass
class WindowCounts:
    """Drops and packets of one host over one window, or why the window is unusable."""

    drops: Optional[int] = None
    packets: Optional[int] = None
    seconds: Optional[float] = None
    coverage: float = 1.0
    problem: Optional[str] = None
    clock_step: Optional[float] = None  # wall clock minus uptime over the window, when stepped
    wraps: int = 0
    resets: int = 0
    detail: Dict[str, int] = field(default_factory=dict)
    steps: Optional[List[int]] = None  # drops in each equal step of the window, in order

    @property
    def usable(self) -> bool:
        return self.problem is None and self.drops is not None and self.packets is not None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"drops": self.drops, "packets": self.packets,
                               "coverage": round(self.coverage, 4)}
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
        if self.problem:
            out["problem"] = self.problem
        if self.clock_step is not None:
            out["clock_step"] = round(self.clock_step, 3)
        if self.wraps:
            out["wraps"] = self.wraps
        if self.resets:
            out["resets"] = self.resets
        if self.detail:
            out["detail"] = dict(self.detail)
        if self.steps is not None:
            out["steps"] = list(self.steps)
        return out


def check_snapshot(doc: Any, where: str) -> Mapping[str, Any]:
    """A collector document, every section the deltas read type-checked; ConfigError names
    ``where`` and the field."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: a counter snapshot must be a JSON object")
    if doc.get("schema") != SCHEMA:
        raise ConfigError(f"{where}: schema is {str(doc.get('schema'))[:60]!r}, expected "
                          f"{SCHEMA!r}")
    if not isinstance(doc.get("boot_id"), str) or not doc["boot_id"]:
        raise ConfigError(f"{where}: boot_id missing")
    if doc.get("host") is not None and not isinstance(doc.get("host"), str):
        raise ConfigError(f"{where}: host must be a string")
    when = doc.get("time")
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise ConfigError(f"{where}: time must be a number (unix seconds)")
    uptime = doc.get("uptime_seconds")
    if uptime is not None and (isinstance(uptime, bool) or not isinstance(uptime, (int, float))
                               or not math.isfinite(uptime) or uptime < 0):
        raise ConfigError(f"{where}: uptime_seconds must be a non-negative number or null")
    if not isinstance(doc.get("interfaces"), Mapping):
        raise ConfigError(f"{where}: interfaces must be an object")
    for iface, entry in doc["interfaces"].items():
        _check_interface(entry, f"{where}: interfaces.{iface}")
    _check_softnet(doc.get("softnet"), f"{where}: softnet")
    snmp = _optional_mapping(doc.get("snmp"), f"{where}: snmp")
    for proto, fields in snmp.items():
        _check_counters(fields, f"{where}: snmp.{proto}")
    _check_counters(doc.get("snmp6"), f"{where}: snmp6")
    return doc


def _optional_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be an object, not {type(value).__name__}")
    return value


def _check_counters(value: Any, where: str) -> None:
    """An object of counter name -> integer (or null: the section is absent)."""
    for name, number in _optional_mapping(value, where).items():
        if isinstance(number, bool) or not isinstance(number, int):
            raise ConfigError(f"{where}.{name} must be an integer, not "
                              f"{type(number).__name__}")


def _check_interface(entry: Any, where: str) -> None:
    if entry is None:
        return
    entry = _optional_mapping(entry, where)
    _check_counters(entry.get("statistics"), f"{where}.statistics")
    _check_counters(entry.get("ethtool"), f"{where}.ethtool")


def _check_softnet(rows: Any, where: str) -> None:
    if rows is None:
        return
    if not isinstance(rows, list):
        raise ConfigError(f"{where} must be a list of per-CPU rows, not {type(rows).__name__}")
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"{where}[{index}] must be an object")
        _check_counters(row, f"{where}[{index}]")


def _term_delta(term: CounterTerm, start: Mapping[str, Any], end: Mapping[str, Any],
                metric: MetricDefinition, counts: WindowCounts) -> Optional[int]:
    """Sum of per-series deltas; None when no series has the term; sets counts.problem."""
    before = series_values(start, term, metric)
    after = series_values(end, term, metric)
    if term.source in ("netdev", "ethtool"):
        # an interface that exists in only one snapshot (created/removed) is left out
        ifaces_start = {k for k, v in (start.get("interfaces") or {}).items() if v}
        ifaces_end = {k for k, v in (end.get("interfaces") or {}).items() if v}
        common = ifaces_start & ifaces_end
        before = {k: v for k, v in before.items() if k in common}
        after = {k: v for k, v in after.items() if k in common}
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        which = "start" if set(after) - set(before) else "end"
        counts.problem = (f"{term} {', '.join(m or 'value' for m in missing)} "
                          f"missing in the {which} snapshot")
        return None
    if not before:
        return None
    total = 0
    for key in sorted(before):
        try:
            delta, wrapped = counter_delta(int(before[key]), int(after[key]), term.width_bits)
        except CounterReset as exc:
            label = f"{term} {key}".strip()
            counts.problem = f"counter reset without reboot: {label} {exc}"
            return None
        counts.wraps += int(wrapped)
        total += delta
    return total


def _window_seconds(start: Mapping[str, Any], end: Mapping[str, Any], counts: WindowCounts,
                    where: str) -> float:
    """How long the window was: by the wall clock, or by the uptime where the wall clock was
    stepped within the boot (sets counts.clock_step)."""
    wall = float(end["time"]) - float(start["time"])
    up_start, up_end = start.get("uptime_seconds"), end.get("uptime_seconds")
    if start["boot_id"] == end["boot_id"] and up_start is not None and up_end is not None:
        elapsed = float(up_end) - float(up_start)
        # an uptime that stands still says nothing (a fake tree's fixed /proc/uptime, as the
        # lab's sim hosts have): the wall clock alone, as without one
        if elapsed > 0 and abs(wall - elapsed) > max(CLOCK_STEP_TOLERANCE,
                                                     CLOCK_STEP_SHARE * elapsed):
            counts.clock_step = wall - elapsed
            return elapsed
    if wall <= 0:
        raise ConfigError(f"{where}: end snapshot (time {end['time']}) is not later than the "
                          f"start snapshot (time {start['time']})")
    return wall


def window_from_snapshots(start: Any, end: Any, metric: MetricDefinition,
                          expected_seconds: Optional[float] = None,
                          where: str = "window") -> WindowCounts:
    """Drops and packets between two collector snapshots of one host."""
    start = check_snapshot(start, f"{where}.start")
    end = check_snapshot(end, f"{where}.end")
    counts = WindowCounts()
    if start.get("host") and end.get("host") and start["host"] != end["host"]:
        raise ConfigError(f"{where}: start is from host {start['host']!r}, end from "
                          f"{end['host']!r}")
    seconds = _window_seconds(start, end, counts, where)
    counts.seconds = seconds
    if expected_seconds:
        counts.coverage = max(0.0, min(1.0, seconds / expected_seconds))
    if start["boot_id"] != end["boot_id"]:
        counts.problem = "reboot inside the window (boot_id changed)"
        return counts
    sums: Dict[str, List[int]] = {"drops": [], "packets": []}
    for group, terms in (("drops", metric.drops), ("packets", metric.packets)):
        for term in terms:
            delta = _term_delta(term, start, end, metric, counts)
            if counts.problem:
                return counts
            if delta is not None:
                counts.detail[str(term)] = delta
                sums[group].append(delta)
    if not sums["packets"]:
        counts.problem = ("no packet counter of the metric "
                          f"({', '.join(str(t) for t in metric.packets)}) in both snapshots")
        return counts
    if not sums["drops"]:
        counts.problem = ("none of the drop counters of the metric "
                          f"({', '.join(str(t) for t in metric.drops)}) in both snapshots")
        return counts
    counts.drops = sum(sums["drops"])
    counts.packets = sum(sums["packets"])
    return counts
