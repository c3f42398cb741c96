"""Drops per dropping step: the test's second measure where the input gives per-step drops.

Counting bursts (bursts.py) measures how often a host drops and leaves out how much each time:
a step's drops are read as about one burst whatever their number once a host's steps drop in
clumps of the fleet's burst size. A change can act on either. A slower drain or a smaller ring
can leave how often a ring overflows nearly as it was and raise what each overflow loses; a
host that drops in on/off episodes keeps its episodes and drops more during them. So where the
input gives per-step drops, each host also brings its change of drops per dropping step,
relative to its packets per step:

    e_size = ln(D_post / n_post / p_post) - ln(D_pre / n_pre / p_pre)

with D a window's drops, n its steps with drops and p its packets per step, where the fleet's
dropping steps are alike (their median cv^2 at most REGULAR_CV2). Its noise is the
spread of the host's dropping steps: ``cv^2 (1/n_pre + 1/n_post)``, with cv^2 the variance over
the squared mean of the drops of its dropping steps (each window about its own mean, so the
change itself is not counted as spread; the two windows pooled), shrunk towards the fleet's
median by ``CV_PRIOR_STEPS`` steps' worth (two or three dropping steps say little about their
spread) and at least the Poisson 1/mean. A host with no dropping step in a window has no
e_size. Everything is computed from each host's own data, canary or not, so the test's
relabellings keep their level (weighted.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

CV_PRIOR_STEPS = 3.0  # the fleet's cv^2 weighs as this many dropping steps in a host's cv^2
MIN_SIZE_HOSTS = 6  # hosts with e_size needed for the measure to say anything
# The measure is used only when the fleet's dropping steps are alike: a median cv^2 of at most
# this. Bursts of random size (geometric: cv^2 = 1 - 1/s, 0.75 at a mean of 4) bury a change of
# their size under their spread, and the burst count already rises with bigger steps there;
# steps that each lose about the same (an on/off episode, a ring flushed whole) are where the
# count cannot see a change of how much, and where this measure is sharp.
REGULAR_CV2 = 0.25


@dataclass
class StepSizes:
    """One host's dropping steps: drops per dropping step and packets per step per window."""
    e: float  # the change of ln(drops per dropping step per packet per step)
    v: float  # its noise variance before the hosts' spread (cv^2 (1/n_pre + 1/n_post))


def _dropping(steps: Optional[Sequence[float]]) -> Optional[np.ndarray]:
    if steps is None:
        return None
    values = np.asarray(steps, dtype=float)
    return values[values > 0]


def _spread(pre: np.ndarray, post: np.ndarray) -> Tuple[float, int]:
    """The squared deviations of a host's dropping steps from their window's mean, relative to
    it, summed over both windows, and their degrees of freedom: each window about its own
    mean, so a change between the windows does not count as spread."""
    total, free = 0.0, 0
    for values in (pre, post):
        if values.size >= 2:
            total += float(((values / values.mean() - 1.0) ** 2).sum())
            free += values.size - 1
    return total, free


def step_sizes(steps_pre: Sequence[Optional[Sequence[float]]],
               steps_post: Sequence[Optional[Sequence[float]]],
               traffic: Sequence[float]) -> List[Optional[StepSizes]]:
    """Per host its StepSizes, or None where a window has no per-step drops or no dropping
    step; every host None when the fleet's dropping steps are not alike (REGULAR_CV2) or too
    few hosts say how alike they are. ``traffic``: the host's ln(packets per step post /
    packets per step pre)."""
    pre = [_dropping(x) for x in steps_pre]
    post = [_dropping(x) for x in steps_post]
    spreads = [None if a is None or b is None else _spread(a, b) for a, b in zip(pre, post)]
    known = [total / free for total, free in (x for x in spreads if x is not None) if free >= 2]
    if len(known) < MIN_SIZE_HOSTS:
        return [None] * len(pre)
    fleet = float(np.median(known))
    if fleet > REGULAR_CV2:
        return [None] * len(pre)
    out: List[Optional[StepSizes]] = []
    for a, b, spread, shift in zip(pre, post, spreads, traffic):
        if a is None or b is None or spread is None or a.size == 0 or b.size == 0:
            out.append(None)
            continue
        total, free = spread
        cv2 = (total + CV_PRIOR_STEPS * fleet) / (free + CV_PRIOR_STEPS)
        cv2 = max(cv2, 1.0 / float(np.concatenate([a, b]).mean()))
        e = math.log(float(b.mean()) / float(a.mean())) - shift
        out.append(StepSizes(e, cv2 * (1.0 / a.size + 1.0 / b.size)))
    return out

