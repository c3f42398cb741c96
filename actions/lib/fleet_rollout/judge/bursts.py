"""Bursts instead of drops: what the test counts where the input gives per-step drops.

NIC drops come in bursts: a ring or a buffer overflows and a few to dozens of packets go at
once. A window's drop count is then a sum of bursts of random size, and most of its noise is
the bursts' sizes; the rate of a host is in how many bursts it had. Per-step drops show that
count in part: drops spread over many steps are many bursts, the same drops in one step are
one or two.

Model: in each step of a window, bursts ~ Poisson(beta) (the host's burst rate in that
window), each burst geometric on 1, 2, ... with mean `s`, the fleet's burst size. For each host
and window, beta by maximum likelihood (EM over the steps' unknown burst counts), then each
step's expected burst count given its drops at that beta; their sum is the window's burst
count, and the test uses it where it would use drops (e, the noise model, the weights, the site
profile). Nothing else changes: the ceiling, the guards and the explanation's rates use drops.

`s` comes from all hosts alike, canary or not, so the test's level holds (weighted.py): per
host and window, mean drops per step over -ln(share of steps without drops) (Poisson zeros:
e^-beta), the median over the windows that have both kinds of step. The variance-to-mean of
the steps (2s - 1 for this model) would say the same if beta were constant, but ramps and site
bursts inflate it well above the true burst size, while the share of zero steps does not.

Counting bursts raises the judge's power in `make bench-judge`'s harsh scenarios and leaves
its false alarms within their target (docs/judge.md).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np

MIN_WINDOWS = 4  # windows with and without drop-free steps needed to estimate s
MIN_SIZE = 1.05  # below this bursts are single drops: drops are counted as they are
MAX_STEP = 256  # steps with more drops than this: the host is counted as drops / s
EM_ROUNDS = 60
EM_TOLERANCE = 1e-7


def burst_size(windows: Sequence[Optional[Sequence[float]]]) -> float:
    """The fleet's mean burst size s from windows of per-step drops (1.0: cannot say)."""
    sizes = []
    for steps in windows:
        if steps is None or len(steps) < 3:
            continue
        values = np.asarray(steps, dtype=float)
        share_zero = float(np.mean(values <= 0))
        if 0.0 < share_zero < 1.0 and values.sum() >= 3:
            sizes.append(float(values.mean()) / -math.log(share_zero))
    if len(sizes) < MIN_WINDOWS:
        return 1.0
    return max(1.0, float(np.median(sizes)))


def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))))


def _posterior_table(dmax: int) -> np.ndarray:
    """[d, k-1] = ln C(d-1, k-1) - ln k! for 1 <= k <= d (the k-dependent part of the
    posterior of k bursts given d drops); -inf elsewhere."""
    lf = _log_factorials(2 * dmax + 1)
    d = np.arange(dmax + 1)[:, None]
    k = np.arange(1, dmax + 1)[None, :]
    valid = (k <= d) & (d > 0)
    dm1 = np.maximum(d - 1, 0)
    km1 = k - 1
    rest = np.maximum(d - k, 0)
    table = lf[dm1] - lf[km1] - lf[rest] - lf[k]
    return np.where(valid, table, -np.inf)


def count_bursts(windows: Sequence[Sequence[float]], size: float) -> List[np.ndarray]:
    """Each window's per-step expected burst counts at its maximum-likelihood burst rate,
    bursts of geometric size with mean `size`. A window with a step above MAX_STEP drops is
    counted as drops / size."""
    out: List[np.ndarray] = [np.asarray(w, dtype=float) for w in windows]
    if size < MIN_SIZE:
        return out
    rows_window: List[int] = []
    rows_drops: List[int] = []
    rows_count: List[int] = []
    em_windows: List[int] = []
    for index, values in enumerate(out):
        if values.size == 0 or values.sum() <= 0:
            continue
        if values.max() > MAX_STEP:
            out[index] = values / size
            continue
        drops, counts = np.unique(np.rint(values[values > 0]).astype(np.int64),
                                  return_counts=True)
        drops = np.maximum(drops, 1)
        rows_window += [len(em_windows)] * drops.size
        rows_drops += drops.tolist()
        rows_count += counts.tolist()
        em_windows.append(index)
    if not em_windows:
        return out
    window_of = np.array(rows_window, dtype=np.int64)
    drops = np.array(rows_drops, dtype=np.int64)
    counts = np.array(rows_count, dtype=float)
    dmax = int(drops.max())
    logc = _posterior_table(dmax)[drops]  # (rows, dmax)
    k = np.arange(1, dmax + 1, dtype=float)
    steps = np.array([out[i].size for i in em_windows], dtype=float)
    totals = np.bincount(window_of, weights=drops * counts, minlength=len(em_windows))
    odds = 1.0 / (size - 1.0)  # p / (1 - p) of a burst's geometric size, p = 1 / size
    beta = np.maximum(totals / steps / size, 1e-9)
    expected = np.ones_like(counts)
    for _ in range(EM_ROUNDS):
        log_r = np.log(beta * odds)[window_of]
        lw = logc + k[None, :] * log_r[:, None]
        lw -= lw.max(axis=1, keepdims=True)
        weights = np.exp(lw)
        expected = (weights * k[None, :]).sum(axis=1) / weights.sum(axis=1)
        new = np.maximum(np.bincount(window_of, weights=expected * counts,
                                     minlength=len(em_windows)) / steps, 1e-9)
        done = bool(np.all(np.abs(new - beta) <= EM_TOLERANCE * beta))
        beta = new
        if done:
            break
    for slot, index in enumerate(em_windows):
        rows = window_of == slot
        lookup = dict(zip(drops[rows].tolist(), expected[rows].tolist()))
        values = out[index]
        out[index] = np.array([lookup[max(1, int(round(x)))] if x > 0 else 0.0
                               for x in values])
    return out
