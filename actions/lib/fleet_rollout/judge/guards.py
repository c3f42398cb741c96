"""Per-host eligibility and the guards that turn a verdict into INCONCLUSIVE (never PASS).

A host is used by the test only if both its windows are present, have no problem (reboot,
counter reset), cover at least ``min_coverage`` of the window and carry at least ``min_packets``.
The guards then ask whether what is left is enough to decide:

* ``canary_hosts`` / ``control_hosts``: at least ``min_canary_hosts`` / ``min_control_hosts``
  usable hosts;
* ``canary_data`` / ``control_data``: at most ``max_missing_share`` of the listed hosts lack
  usable data (a canary that went silent may be a canary that broke);
* ``canary_traffic`` / ``control_traffic``: at most ``max_low_traffic_share`` of the listed hosts
  are below ``min_packets``;
* ``traffic_shift``: the canaries' traffic changed like the controls' (ratio of the median
  per-host post/pre traffic ratios within ``max_traffic_shift`` either way); drop rates depend
  on load, so a canary group that lost or gained traffic cannot be compared. Traffic is packets
  per second when both windows carry their own length (``seconds``, from the hosts' clocks),
  so a window that lasted longer on some hosts than on others (a collection that reached them
  later) is not a shift; reduced windows without it count packets per nominal window.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from fleet_rollout.judge.inputs import HostWindows, JudgeInput
from fleet_rollout.judge.policy import Policy

LOW_TRAFFIC = "low_traffic"
NO_DATA = "no_data"


@dataclass
class HostResult:
    host: str
    group: str
    usable: bool
    exclusion: Optional[str] = None  # LOW_TRAFFIC | NO_DATA
    reason: Optional[str] = None
    drops_pre: Optional[float] = None
    packets_pre: Optional[float] = None
    drops_post: Optional[float] = None
    packets_post: Optional[float] = None
    rate_pre: Optional[float] = None
    rate_post: Optional[float] = None
    e: Optional[float] = None  # ln((d_post+.5)/p_post) - ln((d_pre+.5)/p_pre)
    traffic_ratio: Optional[float] = None  # post / pre packets per second (traffic_ratio())
    site: Optional[str] = None
    model: Optional[str] = None
    weight: Optional[float] = None  # its weight in the test (weighted.py), when used

    def to_dict(self) -> Dict[str, Any]:
        return {key: value for key, value in self.__dict__.items()}


@dataclass
class GuardResult:
    name: str
    ok: bool
    value: Any
    limit: Any
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def log_rate_change(drops_pre: float, packets_pre: float, drops_post: float,
                    packets_post: float, pre_windows: float = 1.0) -> float:
    """The per-host statistic e of the method (docs/judge.md, Method). A pre window
    `pre_windows` times as long as the post window gets as much more of the half drop that
    keeps a silent window's log finite, so a host without any change has e about 0 either way."""
    return (math.log((drops_post + 0.5) / packets_post)
            - math.log((drops_pre + 0.5 * pre_windows) / packets_pre))


def _window_problem(window: Any, name: str, policy: Policy) -> Optional[str]:
    if window is None:
        return f"no {name} window"
    if window.problem:
        return f"{name} window unusable: {window.problem}"
    if window.drops is None or window.packets is None:
        return f"no {name} counts"
    if window.coverage < policy.min_coverage:
        return (f"{name} window data covers {window.coverage:.0%} "
                f"(need {policy.min_coverage:.0%})")
    return None


def evaluate_host(item: HostWindows, policy: Policy, pre_windows: float = 1.0) -> HostResult:
    """One host's data checked and its e (pre_windows: how many post windows long the pre
    window is; its traffic is counted per post window's length)."""
    result = HostResult(item.host, item.group, usable=False, site=item.site, model=item.model)
    for name in ("pre", "post"):
        window = getattr(item, name)
        if window is not None and window.problem is None and window.drops is not None:
            setattr(result, f"drops_{name}", window.drops)
            setattr(result, f"packets_{name}", window.packets)
            if window.packets:
                setattr(result, f"rate_{name}", window.drops / window.packets)
    if item.listed_only:
        result.exclusion, result.reason = NO_DATA, "no data for this host"
        return result
    for name in ("pre", "post"):
        problem = _window_problem(getattr(item, name), name, policy)
        if problem:
            if item.note:
                problem = f"{problem} ({item.note})"
            result.exclusion, result.reason = NO_DATA, problem
            return result
    for name, length in (("pre", pre_windows), ("post", 1.0)):
        packets = getattr(result, f"packets_{name}") / length
        if packets < policy.min_packets:
            result.exclusion = LOW_TRAFFIC
            per = "" if length == 1.0 else " per post window's length"
            result.reason = (f"too little traffic: {packets:.0f} packets{per} in the {name} "
                             f"window (need {policy.min_packets})")
            return result
    result.usable = True
    result.e = log_rate_change(result.drops_pre, result.packets_pre, result.drops_post,
                               result.packets_post, pre_windows)
    result.traffic_ratio = traffic_ratio(item, pre_windows)
    return result


def traffic_ratio(item: HostWindows, pre_windows: float = 1.0) -> float:
    """How one host's traffic changed, post window over pre window: packets per second when
    both windows know their length, else packets per nominal window (the pre window
    `pre_windows` post windows long). Only for a host whose windows both have packets."""
    pre, post = item.pre, item.post
    assert pre is not None and post is not None and pre.packets and post.packets is not None
    if pre.seconds and post.seconds and pre.seconds > 0 and post.seconds > 0:
        return (post.packets / post.seconds) / (pre.packets / pre.seconds)
    return post.packets * pre_windows / pre.packets


def _names(results: List[HostResult], limit: int = 4) -> str:
    names = [r.host for r in results]
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def evaluate_guards(inp: JudgeInput, hosts: List[HostResult], policy: Policy,
                    ) -> List[GuardResult]:
    guards: List[GuardResult] = []
    by_group = {g: [h for h in hosts if h.group == g] for g in ("canary", "control")}
    minimum = {"canary": policy.min_canary_hosts, "control": policy.min_control_hosts}
    for group in ("canary", "control"):
        members = by_group[group]
        usable = [h for h in members if h.usable]
        missing = [h for h in members if h.exclusion == NO_DATA]
        low = [h for h in members if h.exclusion == LOW_TRAFFIC]
        ok = len(usable) >= minimum[group]
        guards.append(GuardResult(
            f"{group}_hosts", ok, len(usable), minimum[group],
            f"{len(usable)} of {len(members)} {group} hosts usable "
            f"(need at least {minimum[group]})",
        ))
        share = len(missing) / len(members) if members else 1.0
        guards.append(GuardResult(
            f"{group}_data", share <= policy.max_missing_share + 1e-12, round(share, 4),
            policy.max_missing_share,
            (f"{len(missing)} of {len(members)} {group} hosts lack usable data"
             + (f": {_names(missing)}" if missing else "")
             + f" (allowed {policy.max_missing_share:.0%})"),
        ))
        share = len(low) / len(members) if members else 1.0
        guards.append(GuardResult(
            f"{group}_traffic", share <= policy.max_low_traffic_share + 1e-12, round(share, 4),
            policy.max_low_traffic_share,
            (f"{len(low)} of {len(members)} {group} hosts below {policy.min_packets} packets "
             "per window" + (f": {_names(low)}" if low else "")
             + f" (allowed {policy.max_low_traffic_share:.0%})"),
        ))
    canary = [h.traffic_ratio for h in by_group["canary"] if h.usable]
    control = [h.traffic_ratio for h in by_group["control"] if h.usable]
    if canary and control:
        shift = float(np.exp(np.median(np.log(canary)) - np.median(np.log(control))))
        ok = 1.0 / policy.max_traffic_shift <= shift <= policy.max_traffic_shift
        guards.append(GuardResult(
            "traffic_shift", ok, round(shift, 4), policy.max_traffic_shift,
            (f"canary traffic changed {shift:.2f}x relative to control "
             f"(allowed {1 / policy.max_traffic_shift:.2f}x to {policy.max_traffic_shift:.2f}x)"),
        ))
    else:
        guards.append(GuardResult("traffic_shift", False, None, policy.max_traffic_shift,
                                  "traffic shift unknown: no usable canary or control host"))
    return guards
