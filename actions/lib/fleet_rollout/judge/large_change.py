"""Small batches: a large change decided with one or two canaries.

A batch with fewer usable canaries than ``min_canary_hosts`` cannot carry the permutation test
(one canary among 5 controls is the largest by chance one time in six). A change of
``policy.large_change`` times or more (drops x5, or down to a fifth) is another matter; it is
decided when every usable canary shows it on three counts:

* against the control group: its e less the weighted median e of the controls (of its site,
  when the site has at least 5 of them) is at least ln(large_change) (at most -ln(large_change)
  for an improvement);
* against the noise of this fleet: that difference is at least ``Z_LARGE`` standard deviations
  of a host of its drop level (phi and tau^2 fitted on the controls, weighted.py's model);
* against its own history: the window that shows the change carries at least ``MIN_DROPS``
  drops (the post window for a rise, the pre window per post window's length for a fall: a
  quiet host's 3 drops that became none are no evidence), and when the input has its per-step
  drops, the median step of its post window is at least sqrt(large_change) times the mean step
  of its pre window (at most 1/sqrt for an improvement), so one burst cannot make the change.

A large regression FAILs. A large improvement PASSes only when every listed canary has usable
data (a canary that went silent may be one that broke). Anything else stays INCONCLUSIVE.
bench/bench_judge.py measures the false alarms of this path (over up to three windows) and how
many windows a decision takes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from fleet_rollout.judge.guards import HostResult
from fleet_rollout.judge.inputs import JudgeInput
from fleet_rollout.judge.policy import Policy
from fleet_rollout.judge.weighted import (
    dispersion,
    host_variance,
    information,
    noise_model,
    site_peers,
    weighted_median,
)

Z_LARGE = 2.5
MIN_DROPS = 20  # drops the window that shows the change must carry (post: a rise, pre: a fall,
#                 per post window's length)
REGRESSION = "large_regression"
IMPROVEMENT = "large_improvement"


@dataclass
class LargeChange:
    reason: str  # REGRESSION | IMPROVEMENT
    ratio: float  # the canaries' geometric mean drop-rate change relative to the controls
    threshold: float  # policy.large_change
    hosts: List[Dict[str, Any]] = field(default_factory=list)  # host, ratio, z, step_ratio

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _step_ratio(inp: JudgeInput, host: str) -> Optional[float]:
    item = inp.hosts[host]
    if not item.steps_pre or not item.steps_post:
        return None
    pre = float(np.mean(item.steps_pre))
    return (float(np.median(item.steps_post)) + 0.5 / len(item.steps_post)) / (
        pre + 0.5 / len(item.steps_pre))


def _noise(inp: JudgeInput, control: List[HostResult]) -> tuple:
    """(phi, tau^2, the controls' e, their weights) of the controls (weighted.py's model)."""
    e = np.array([h.e for h in control], dtype=float)
    lam, sens, v = information(np.array([h.drops_pre for h in control], dtype=float),
                               np.array([h.drops_post for h in control], dtype=float),
                               inp.pre_windows)
    disp = np.array([np.nan if d is None else d for d in (
        dispersion(inp.hosts[h.host].steps_pre, inp.hosts[h.host].steps_post)
        for h in control)], dtype=float)
    phi, tau2 = noise_model(e - weighted_median(e, sens / v), v, lam, disp)
    return phi, tau2, e, sens / (phi * v + tau2)


def _centre(host: HostResult, control: List[HostResult], e: np.ndarray,
            weights: np.ndarray) -> tuple:
    """The controls' weighted median e, within the host's site when it has enough controls
    there (a burst at one site moves them all), and the sd of that centre."""
    peers = site_peers(host.site, [h.site for h in control])
    if peers is not None:
        e, weights = e[peers], weights[peers]
    spread = float(np.sqrt(1.0 / weights.sum())) if weights.sum() > 0 else math.inf
    return weighted_median(e, weights), spread


def large_change(inp: JudgeInput, canary: List[HostResult], control: List[HostResult],
                 policy: Policy, all_canaries_usable: bool) -> Optional[LargeChange]:
    """The large change 1..min_canary_hosts-1 usable canaries show, or None."""
    if not 1 <= len(canary) < policy.min_canary_hosts or len(control) < policy.min_control_hosts:
        return None
    phi, tau2, control_e, weights = _noise(inp, control)
    bound = math.log(policy.large_change)
    rows = []
    for host in canary:
        centre, centre_sd = _centre(host, control, control_e, weights)
        sd = math.sqrt(host_variance(host.drops_pre, host.drops_post, phi, tau2, inp.pre_windows)
                       + centre_sd ** 2)
        diff = float(host.e) - centre
        rows.append({"host": host.host, "ratio": math.exp(diff), "z": diff / sd,
                     "step_ratio": _step_ratio(inp, host.host), "diff": diff,
                     "drops": {REGRESSION: host.drops_post,
                               IMPROVEMENT: host.drops_pre / inp.pre_windows}})
    for reason, sign in ((REGRESSION, 1.0), (IMPROVEMENT, -1.0)):
        if reason == IMPROVEMENT and not all_canaries_usable:
            continue
        if all(sign * r["diff"] >= bound and sign * r["z"] >= Z_LARGE
               and r["drops"][reason] >= MIN_DROPS
               and (r["step_ratio"] is None
                    or sign * math.log(r["step_ratio"]) >= bound / 2.0) for r in rows):
            mean = float(np.mean([r["diff"] for r in rows]))
            for r in rows:
                del r["diff"], r["drops"]
            return LargeChange(reason, math.exp(mean), policy.large_change, rows)
    return None
