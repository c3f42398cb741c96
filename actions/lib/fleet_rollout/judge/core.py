"""The canary judge: PASS / FAIL / INCONCLUSIVE from per-host pre/post drop windows.

Method (docs/judge.md, "Method"):

1. Per usable host, e = ln((drops_post+0.5)/packets_post) - ln((drops_pre+0.5k)/packets_pre),
   k the pre window's length in post windows (inputs.py, pre_windows): each host is compared
   with itself, so hosts that always drop a lot or never drop anything weigh alike, and a
   traffic change common to the fleet cancels out.
2. Ceiling: a canary host whose post-window drop rate is above ``max_drop_rate`` (and above
   its own pre-window rate changed as the dropping controls' of its site changed, by more than
   CEILING_Z sd of its own noise) FAILS the batch, whatever else the data say; when the
   comparison FAILs it too, the ceiling is the verdict's second reason.
3. Guards (guards.py): too few hosts, too little traffic, missing data or a canary traffic shift
   give INCONCLUSIVE, never PASS; a regression shown by enough usable hosts still FAILs when
   only the share guards (missing data, low traffic) failed.
4. A stratified, information-weighted permutation test of canary e against control e
   (weighted.py: within site and hardware model, silent hosts weigh little, incidents are
   clipped); the weighted difference with its CI. FAIL when p < alpha and the estimated rise
   is at least ``min_regression_ratio``; else PASS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from fleet_rollout.judge.guards import (
    GuardResult,
    HostResult,
    evaluate_guards,
    evaluate_host,
)
from fleet_rollout.judge.inputs import JudgeInput
from fleet_rollout.judge.large_change import IMPROVEMENT as LARGE_IMPROVEMENT
from fleet_rollout.judge.large_change import REGRESSION as LARGE_REGRESSION
from fleet_rollout.judge.large_change import LargeChange, large_change
from fleet_rollout.judge.policy import Policy
from fleet_rollout.judge.weighted import (
    INFORMATIVE,
    HostData,
    host_variance,
    site_peers,
    weighted_test,
)

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}


@dataclass
class TestResult:
    n_canary: int
    n_control: int
    u: float  # the test statistic T (weighted.py); the name is kept for report readers
    p_value: float
    shift: float  # weighted canary - control difference of e (natural log of a rate ratio)
    ci_low: float
    ci_high: float
    ci_level: float
    canary_median_e: float
    control_median_e: float
    canary_above_control_median: int
    method: str = "weighted permutation"
    strata: str = "none"  # site+model | site | model | none
    n_strata: int = 1
    tau: float = 0.0  # between-host sd of e with no change (fitted)
    phi: float = 1.0  # over-dispersion of what the test counts (fitted)
    burst_size: float = 1.0  # the fleet's mean burst size: the test counts bursts when > 1
    measure: str = "count"  # what the estimate is of: "count" (bursts or drops) or "size"
    permutations: int = 0  # Monte Carlo relabellings; 0: normal approximation
    pre_windows: float = 1.0  # the pre window's length in post windows

    @property
    def ratio(self) -> float:
        return math.exp(self.shift)

    @property
    def ci_ratio(self) -> List[float]:
        return [math.exp(self.ci_low), math.exp(self.ci_high)]

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.__dict__)
        out["ratio"] = self.ratio
        out["ci_ratio"] = [None if math.isinf(v) else v for v in self.ci_ratio]
        for key in ("ci_low", "ci_high"):
            if math.isinf(out[key]):
                out[key] = None
        return out


@dataclass
class Verdict:
    verdict: str
    reason: str  # ceiling | regression | no_regression | small_regression | guards |
    #              large_regression | large_improvement (large_change.py)
    explanation: str = ""
    test: Optional[TestResult] = None
    guards: List[GuardResult] = field(default_factory=list)
    ceiling_breaches: List[HostResult] = field(default_factory=list)
    hosts: List[HostResult] = field(default_factory=list)
    policy: Policy = field(default_factory=Policy)
    rollout: Optional[str] = None
    batch: Optional[Any] = None
    summary: Dict[str, Any] = field(default_factory=dict)
    large: Optional[LargeChange] = None  # what decided a small batch

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def failed_guards(self) -> List[GuardResult]:
        return [g for g in self.guards if not g.ok]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "explanation": self.explanation,
            "rollout": self.rollout,
            "batch": self.batch,
            "test": self.test.to_dict() if self.test else None,
            "summary": self.summary,
            "guards": [g.to_dict() for g in self.guards],
            "ceiling": {
                "max_drop_rate": self.policy.max_drop_rate,
                "breaches": [h.to_dict() for h in self.ceiling_breaches],
            },
            "policy": self.policy.to_dict(),
            "large_change": self.large.to_dict() if self.large else None,
            "hosts": [h.to_dict() for h in self.hosts],
        }


CEILING_Z = 2.0  # how many of its own noise's sd a canary's rise must be to break the ceiling


def _common_change(host: HostResult, control: List[HostResult], pre_windows: float) -> float:
    """How the drop rate of the controls changed (median e, as a factor): those of the host's
    site when it has enough of them (a site-wide burst), else all; only controls that drop
    (a silent host's e cannot show a burst) when there are any; 1 without controls."""
    dropping = [h for h in control
                if (h.drops_pre + h.drops_post) / (1.0 + pre_windows) >= INFORMATIVE]
    control = dropping or control
    if not control:
        return 1.0
    values = np.array([h.e for h in control], dtype=float)
    peers = site_peers(host.site, [h.site for h in control])
    return math.exp(float(np.median(values if peers is None else values[peers])))


def _within_noise(host: HostResult, expected: float, test: Optional[TestResult],
                  pre_windows: float) -> bool:
    """Whether the canary's rise over its expected rate is within its own noise (the test's
    phi and tau^2 at its drop level): less than CEILING_Z of its sd."""
    if test is None or host.drops_pre is None or host.drops_post is None:
        return False
    sd = math.sqrt(host_variance(host.drops_pre, host.drops_post, test.phi, test.tau ** 2,
                                 pre_windows))
    return math.log(float(host.rate_post) / expected) < CEILING_Z * sd


def _ceiling_breaches(hosts: List[HostResult], policy: Policy, test: Optional[TestResult],
                      pre_windows: float) -> List[HostResult]:
    control = [h for h in hosts if h.group == "control" and h.usable]
    breaches = []
    for host in hosts:
        if host.group != "canary" or host.rate_post is None:
            continue
        if host.packets_post is None or host.packets_post < policy.min_packets:
            continue
        if host.rate_post <= policy.max_drop_rate:
            continue
        # what its pre rate would be now had it changed like the controls (of its site)
        expected = None if host.rate_pre is None else host.rate_pre * _common_change(
            host, control, pre_windows)
        if expected is not None and host.rate_post <= expected:
            continue  # it was this bad before the change, or its site got this bad: not the change
        if expected is not None and expected > policy.max_drop_rate and (
                host.rate_post <= 2.0 * expected):
            continue  # above the ceiling already: only a doubling is the change's doing
        if expected is not None and expected > 0 and _within_noise(host, expected, test,
                                                                   pre_windows):
            continue  # a host near the ceiling crossed it by no more than its noise
        breaches.append(host)
    return sorted(breaches, key=lambda h: -(h.rate_post or 0.0))


def _test(inp: JudgeInput, canary: List[HostResult], control: List[HostResult],
          policy: Policy) -> TestResult:
    data = []
    for host in canary + control:
        item = inp.hosts[host.host]
        data.append(HostData(host.host, host.group == "canary", float(host.e),
                             float(host.drops_pre), float(host.drops_post), host.site,
                             host.model, item.steps_pre, item.steps_post))
    result = weighted_test(data, policy.ci_level, pre_windows=inp.pre_windows)
    for host, weight in zip(canary + control, result.weights):
        host.weight = round(float(weight), 6)
    x = [h.e for h in canary]
    y = [h.e for h in control]
    control_median = float(np.median(y))
    return TestResult(
        n_canary=len(x), n_control=len(y), u=result.statistic, p_value=result.p_value,
        shift=result.shift, ci_low=result.ci_low, ci_high=result.ci_high,
        ci_level=policy.ci_level, canary_median_e=float(np.median(x)),
        control_median_e=control_median,
        canary_above_control_median=int(sum(1 for v in x if v > control_median)),
        strata=result.strata, n_strata=result.n_strata, tau=result.tau, phi=result.phi,
        burst_size=result.burst_size, measure=result.measure,
        permutations=result.permutations, pre_windows=inp.pre_windows,
    )


def _median(values: List[float]) -> Optional[float]:
    return float(np.median(values)) if values else None


def _summary(hosts: List[HostResult]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for group in ("canary", "control"):
        members = [h for h in hosts if h.group == group]
        usable = [h for h in members if h.usable]
        out[group] = {
            "listed": len(members),
            "usable": len(usable),
            "median_rate_pre": _median([h.rate_pre for h in usable if h.rate_pre is not None]),
            "median_rate_post": _median([h.rate_post for h in usable if h.rate_post is not None]),
            "drops_pre": float(sum(h.drops_pre for h in usable)),
            "drops_post": float(sum(h.drops_post for h in usable)),
            "packets_pre": float(sum(h.packets_pre for h in usable)),
            "packets_post": float(sum(h.packets_post for h in usable)),
        }
    return out


# guards on the share of hosts without usable data or traffic: they keep a verdict from PASS,
# not a regression the usable hosts (at least the minimum of each group) show from FAIL
SHARE_GUARDS = frozenset({"canary_data", "control_data", "canary_traffic", "control_traffic"})


# a batch with too few usable canaries (and perhaps some without data) may still show a large
# change (large_change.py); never when controls are thin or traffic shifted
SMALL_BATCH_GUARDS = frozenset({"canary_hosts", "canary_data", "canary_traffic"})


def _regression(test: Optional[TestResult], policy: Policy) -> bool:
    return (test is not None and test.p_value < policy.alpha
            and test.ratio >= policy.min_regression_ratio)


def _compared(test: Optional[TestResult], large: Optional[LargeChange], failed: Set[str],
              policy: Policy) -> Tuple[str, str]:
    """(verdict, reason) of the guards and the comparison with the controls, ceiling aside."""
    if failed and failed <= SHARE_GUARDS and _regression(test, policy):
        # thin data never PASS, but enough usable hosts that show a regression still FAIL
        return FAIL, "regression"
    if failed and failed <= SMALL_BATCH_GUARDS and large is not None:
        return (FAIL if large.reason == LARGE_REGRESSION else PASS), large.reason
    if failed:
        return INCONCLUSIVE, "guards"
    if test is not None and test.p_value < policy.alpha:
        if test.ratio >= policy.min_regression_ratio:
            return FAIL, "regression"
        return PASS, "small_regression"
    return PASS, "no_regression"


def judge(inp: JudgeInput, policy: Optional[Policy] = None) -> Verdict:
    """Decide one batch. Never raises on data; bad input is refused earlier (inputs.py)."""
    from fleet_rollout.judge.explain import explain  # local: explain imports this module

    policy = policy or Policy()
    hosts = [evaluate_host(inp.hosts[name], policy, inp.pre_windows)
             for name in inp.canary + inp.control]
    guards = evaluate_guards(inp, hosts, policy)
    canary = [h for h in hosts if h.group == "canary" and h.usable]
    control = [h for h in hosts if h.group == "control" and h.usable]
    test = _test(inp, canary, control, policy) if canary and control else None
    breaches = _ceiling_breaches(hosts, policy, test, inp.pre_windows)

    failed = {g.name for g in guards if not g.ok}
    large = None
    if "canary_hosts" in failed and failed <= SMALL_BATCH_GUARDS:
        listed = [h for h in hosts if h.group == "canary"]
        large = large_change(inp, canary, control, policy, len(canary) == len(listed))
    verdict, reason = _compared(test, large, failed, policy)
    if breaches and verdict != FAIL:
        # the comparison alone would not FAIL: the ceiling does (when the comparison FAILs, a
        # breached ceiling is the verdict's second reason)
        verdict, reason = FAIL, "ceiling"

    result = Verdict(verdict, reason, test=test, guards=guards, ceiling_breaches=breaches,
                     hosts=hosts, policy=policy, rollout=inp.rollout, batch=inp.batch,
                     summary=_summary(hosts),
                     large=large if reason in (LARGE_REGRESSION, LARGE_IMPROVEMENT) else None)
    result.explanation = explain(result)
    return result
