"""Rank statistics of the judge: one-sided Mann-Whitney U and the Hodges-Lehmann shift with CI."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence, Tuple

import numpy as np
from scipy import stats as _stats

EXACT_LIMIT = 4000  # m*n up to which the exact null distribution of U is used for the CI


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> Tuple[float, float]:
    """U statistic of x and the one-sided p-value for "x tends to be larger than y".

    scipy picks the exact distribution for small samples without ties and the normal
    approximation with tie and continuity correction otherwise.
    """
    result = _stats.mannwhitneyu(np.asarray(x, float), np.asarray(y, float),
                                 alternative="greater")
    return float(result.statistic), float(result.pvalue)


@lru_cache(maxsize=256)
def _u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n under H0 (no ties), by the usual counting recurrence."""
    # counts[j] = number of arrangements of i x's and j y's with U = u, for the current i
    rows = [np.ones(1) for _ in range(n + 1)]  # i = 0: U is 0 for any j
    for i in range(1, m + 1):
        new_rows = [np.ones(1)]  # j = 0: U is 0
        for j in range(1, n + 1):
            size = i * j + 1
            counts = np.zeros(size)
            from_x = rows[j]  # last element is an x (i-1 x's, j y's): U grows by j
            counts[j:j + from_x.size] += from_x
            from_y = new_rows[j - 1]  # last element is a y (i x's, j-1 y's): U unchanged
            counts[:from_y.size] += from_y
            new_rows.append(counts)
        rows = new_rows
    counts = rows[n]
    return np.cumsum(counts) / counts.sum()


def ci_rank(m: int, n: int, level: float) -> int:
    """k such that [D_(k), D_(mn+1-k)] of the sorted pairwise differences covers ``level``.

    Returns 0 when the samples are too small for that level (the interval is unbounded).
    """
    beta = (1.0 - level) / 2.0
    if m * n <= EXACT_LIMIT:
        cdf = _u_cdf(m, n)
        # largest k with P(U <= k-1) <= beta
        return int(np.searchsorted(cdf, beta, side="right"))
    sigma = np.sqrt(m * n * (m + n + 1) / 12.0)
    z = _stats.norm.ppf(1.0 - beta)
    return max(0, int(np.floor(m * n / 2.0 - 0.5 - z * sigma)) + 1)


def hodges_lehmann(x: Sequence[float], y: Sequence[float],
                   level: float) -> Tuple[float, float, float]:
    """Shift estimate (median of x_i - y_j) and its two-sided ``level`` confidence interval."""
    xa = np.asarray(x, float)
    ya = np.asarray(y, float)
    diffs = np.sort((xa[:, None] - ya[None, :]).ravel())
    estimate = float(np.median(diffs))
    k = ci_rank(xa.size, ya.size, level)
    if k < 1:
        return estimate, float("-inf"), float("inf")
    return estimate, float(diffs[k - 1]), float(diffs[diffs.size - k])
