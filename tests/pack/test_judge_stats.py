"""Rank statistics: exact U distribution, Hodges-Lehmann estimate and interval coverage."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fleet_rollout.judge.stats import _u_cdf, ci_rank, hodges_lehmann, mann_whitney_greater


@pytest.mark.parametrize("m, n", [(1, 1), (2, 3), (3, 4), (4, 4)])
def test_exact_u_distribution_by_enumeration(m: int, n: int) -> None:
    counts = np.zeros(m * n + 1)
    for xs in itertools.combinations(range(m + n), m):
        ys = [v for v in range(m + n) if v not in xs]
        counts[sum(1 for x in xs for y in ys if x > y)] += 1
    assert np.allclose(_u_cdf(m, n), np.cumsum(counts) / counts.sum())


def test_ci_rank_exact_and_normal_agree_near_the_switch() -> None:
    assert ci_rank(3, 6, 0.95) == 2  # P(U<=1) = 2/84 <= 0.025 < P(U<=2) = 4/84
    assert ci_rank(2, 2, 0.95) == 0  # too few: unbounded
    exact = ci_rank(40, 100, 0.95)  # m*n = 4000: exact
    import fleet_rollout.judge.stats as module
    limit = module.EXACT_LIMIT
    module.EXACT_LIMIT = 0
    try:
        normal = ci_rank(40, 100, 0.95)
    finally:
        module.EXACT_LIMIT = limit
    assert abs(exact - normal) <= 2


def test_hodges_lehmann_estimate() -> None:
    estimate, low, high = hodges_lehmann([3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 1.0, 1.5, 0.5], 0.95)
    diffs = np.subtract.outer([3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 1.0, 1.5, 0.5]).ravel()
    assert estimate == np.median(diffs)
    assert low == np.sort(diffs)[1] and high == np.sort(diffs)[-2]


def test_hodges_lehmann_interval_covers_the_true_shift() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    reps = 400
    for _ in range(reps):
        x = rng.standard_t(3, 8) + 0.7
        y = rng.standard_t(3, 32)
        _, low, high = hodges_lehmann(x, y, 0.90)
        hits += low <= 0.7 <= high
    assert 0.86 <= hits / reps <= 0.95


def test_mann_whitney_is_scipys_one_sided_test() -> None:
    x, y = [3.1, 2.2, 5.0, 4.4], [1.0, 2.0, 0.5, 1.5, 2.5, 0.1]
    u, p = mann_whitney_greater(x, y)
    ref = stats.mannwhitneyu(x, y, alternative="greater")
    assert (u, p) == (ref.statistic, ref.pvalue)
    assert mann_whitney_greater(y, x)[1] > 0.9
