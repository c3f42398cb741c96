"""Rank statistics of the judge: one-sided Mann-Whitney U and the Hodges-Lehmann shift with CI."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence, Tuple

import numpy as np
from scipy import stats as _stats

EXACT_LIMIT = 4000  # m*n up to which the exact null distribution of U is used for the CI
DIRECT_LIMIT = 1 << 16  # candidate pairwise differences few enough to partition outright


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
    """Shift estimate (median of x_i - y_j) and its two-sided ``level`` confidence interval.

    The m*n pairwise differences are never all formed: the few order statistics needed are
    selected from the implicitly sorted matrix of differences (:class:`_PairwiseDifferences`),
    each exactly the element a full sort would put at that rank.
    """
    xa = np.asarray(x, float).ravel()
    ya = np.asarray(y, float).ravel()
    k = ci_rank(xa.size, ya.size, level)
    size = xa.size * ya.size
    if size == 0 or not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        # no data, NaN or inf: the full sort, with numpy's conventions for those
        diffs = np.sort((xa[:, None] - ya[None, :]).ravel())
        estimate = float(np.median(diffs))
        low, high = (diffs[k - 1], diffs[size - k]) if k >= 1 else (-np.inf, np.inf)
        return estimate, float(low), float(high)
    pairs = _PairwiseDifferences(xa, ya)
    middle = [size // 2] if size % 2 else [size // 2 - 1, size // 2]
    # np.median's arithmetic: the mean of the middle element(s)
    estimate = float(np.mean(np.array([pairs.select(r) for r in middle])))
    if k < 1:
        return estimate, float("-inf"), float("inf")
    return estimate, pairs.select(k - 1), pairs.select(size - k)


class _PairwiseDifferences:
    """The differences x_i - y_j of two finite samples as a matrix sorted along its rows.

    Rows are the smaller sample (sorted), columns the larger one (sorted so that every row
    ascends); an element is computed on demand with the same floating-point subtraction as
    ``x[:, None] - y[None, :]``, and rounding is monotone, so the rows ascend exactly.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x_rows = x.size <= y.size
        if self.x_rows:
            self.rows, self.cols = np.sort(x), np.sort(y)[::-1].copy()
        else:
            self.rows, self.cols = np.sort(y), np.sort(x)
        self.size = x.size * y.size

    def value(self, row: np.ndarray, col: np.ndarray) -> np.ndarray:
        if self.x_rows:
            return self.rows[row] - self.cols[col]
        return self.cols[col] - self.rows[row]

    def _count_upto(self, pivot: float, low: np.ndarray, high: np.ndarray,
                    or_equal: bool) -> np.ndarray:
        """Per row, how many differences are < pivot (<= with ``or_equal``), knowing that
        those left of ``low`` are and those from ``high`` on are not: the first column in
        [low, high) that is not, found by one binary search run on all rows at once."""
        low, high = low.copy(), high.copy()
        rows = np.arange(self.rows.size)
        last = self.cols.size - 1
        while True:
            open_ = low < high
            if not open_.any():
                return low
            mid = (low + high) // 2
            values = self.value(rows, np.minimum(mid, last))
            above = values > pivot if or_equal else values >= pivot
            low = np.where(open_ & ~above, mid + 1, low)
            high = np.where(open_ & above, mid, high)

    def select(self, rank: int) -> float:
        """The element at 0-based ``rank`` of all differences in ascending order."""
        if not 0 <= rank < self.size:
            raise IndexError(rank)
        # columns [low[i], high[i]) of row i still hold candidates; all the elements left of
        # them are smaller than every candidate and all those right of them larger
        low = np.zeros(self.rows.size, dtype=np.int64)
        high = np.full(self.rows.size, self.cols.size, dtype=np.int64)
        # a random candidate as pivot (quickselect); any pivot gives the same answer, the seed
        # only makes the amount of work repeatable
        rng = np.random.default_rng(rank)
        while True:
            sizes = high - low
            total = int(sizes.sum())
            target = rank - int(low.sum())
            ends = np.cumsum(sizes)
            if total <= DIRECT_LIMIT:
                row = np.repeat(np.arange(self.rows.size), sizes)
                col = low[row] + np.arange(total) - (ends - sizes)[row]
                return float(np.partition(self.value(row, col), target)[target])
            pick = int(rng.integers(total))
            row_i = int(np.searchsorted(ends, pick, side="right"))
            col_i = int(low[row_i] + pick - (ends[row_i] - sizes[row_i]))
            pivot = float(self.value(np.array([row_i]), np.array([col_i]))[0])
            below = self._count_upto(pivot, low, high, or_equal=False)
            upto = self._count_upto(pivot, low, high, or_equal=True)
            if int(below.sum()) <= rank < int(upto.sum()):
                return pivot
            if rank >= int(upto.sum()):
                low = upto
            else:
                high = below
