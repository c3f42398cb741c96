"""Baselines for the evaluation only (bench/bench_judge.py): what common canary tools do.

None is used to decide a rollout.

* :func:`kayenta_mann_whitney` - Kayenta-style (NetflixACAJudge MannWhitneyClassifier) on raw
  values: the canary and the baseline (control) metric series of the post window only are
  compared with a two-sided Mann-Whitney test; the metric is "High" (FAIL) when the
  Hodges-Lehmann interval of canary - control lies above zero and the canary mean is at least
  ``allowed_increase`` times the control mean. With sparse drops most values are zero, the
  estimate and the interval collapse on 0 and a canary that drops while the control drops
  nothing passes.
* :func:`pooled_poisson_rate_ratio` - sum drops and packets of each group over the post window
  and test the rate ratio with the exact conditional (binomial) test. It treats every drop as
  an independent event of one common rate, so host heterogeneity and bursts make it cry wolf.
* :func:`rank_test` - a plain rank test: one-sided Mann-Whitney U of the canaries' e
  against the controls' e, FAIL when p < alpha and the Hodges-Lehmann ratio is at least
  ``min_ratio``. Every host weighs alike (a silent host as much as a busy one) and a burst at
  one site counts as noise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as _stats

from fleet_rollout.judge.stats import hodges_lehmann, mann_whitney_greater


@dataclass
class BaselineResult:
    verdict: str  # PASS | FAIL | NODATA
    p_value: Optional[float] = None
    estimate: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None


def kayenta_mann_whitney(canary: Sequence[float], control: Sequence[float], alpha: float = 0.05,
                         allowed_increase: float = 1.0) -> BaselineResult:
    x = np.asarray(canary, float)
    y = np.asarray(control, float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size == 0 or y.size == 0:
        return BaselineResult("NODATA")
    if np.all(x == x[0]) and np.all(y == x[0]):
        return BaselineResult("PASS", 1.0, 0.0, 0.0, 0.0)
    p = float(_stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    estimate, low, high = hodges_lehmann(x, y, 1.0 - alpha)
    control_mean, canary_mean = float(y.mean()), float(x.mean())
    big_enough = control_mean <= 0 or canary_mean >= allowed_increase * control_mean
    verdict = "FAIL" if (low > 0 and big_enough) else "PASS"
    return BaselineResult(verdict, p, estimate, low, high)


def pooled_poisson_rate_ratio(canary_drops: float, canary_packets: float, control_drops: float,
                              control_packets: float, alpha: float = 0.05) -> BaselineResult:
    if canary_packets <= 0 or control_packets <= 0:
        return BaselineResult("NODATA")
    d1, d2 = int(round(canary_drops)), int(round(control_drops))
    total = d1 + d2
    if total == 0:
        return BaselineResult("PASS", 1.0, 1.0)
    share = canary_packets / (canary_packets + control_packets)
    p = float(_stats.binom.sf(d1 - 1, total, share))  # P(X >= d1), one-sided "canary higher"
    ratio = (d1 / canary_packets) / (d2 / control_packets) if d2 else float("inf")
    return BaselineResult("FAIL" if p < alpha else "PASS", p, ratio)


def rank_test(canary_e: Sequence[float], control_e: Sequence[float], alpha: float = 0.025,
              min_ratio: float = 1.1, ci_level: float = 0.95) -> BaselineResult:
    x = np.asarray(canary_e, float)
    y = np.asarray(control_e, float)
    if x.size == 0 or y.size == 0:
        return BaselineResult("NODATA")
    _u, p = mann_whitney_greater(x, y)
    shift, low, high = hodges_lehmann(x, y, ci_level)
    verdict = "FAIL" if p < alpha and np.exp(shift) >= min_ratio else "PASS"
    return BaselineResult(verdict, p, float(np.exp(shift)), low, high)
