"""Drops per dropping step, the test's second measure (fleet_rollout.judge.sizes and its use by
the weighted test and the explanation).

The fleets here drop in on/off episodes: a step is ON with the host's own probability and then
drops Poisson(the host's rate) packets, else none (the model the measure is for). A change
multiplies the ON rate, so how often a host drops stays as it was and how much it drops when
it does doubles: the burst count barely moves, the size measure sees it."""
from __future__ import annotations

import math
from typing import List

import numpy as np
import pytest

from fleet_rollout.counters.deltas import WindowCounts
from fleet_rollout.judge.bursts import burst_size
from fleet_rollout.judge.core import judge
from fleet_rollout.judge.explain import render_text
from fleet_rollout.judge.inputs import HostWindows, JudgeInput
from fleet_rollout.judge.policy import Policy
from fleet_rollout.judge.sizes import REGULAR_CV2, step_sizes
from fleet_rollout.judge.weighted import HostData, weighted_test

PACKETS = 1e6  # per post window; the pre window has 3 times as many in 3 times the steps


def _on_off(rng: np.random.Generator, share: float, rate: float, steps: int) -> List[float]:
    on = rng.random(steps) < share
    return [float(x) for x in np.where(on, rng.poisson(rate, steps), 0)]


def _hosts(rng: np.random.Generator, canaries: int, controls: int,
           effect: float) -> List[HostData]:
    hosts = []
    for i in range(canaries + controls):
        share = float(rng.uniform(0.1, 0.4))
        rate = float(rng.lognormal(math.log(20.0), 0.8))
        pre = _on_off(rng, share, rate, 36)
        post = _on_off(rng, share, rate * (effect if i < canaries else 1.0), 12)
        d0, d1 = sum(pre), sum(post)
        e = math.log((d1 + 0.5) / PACKETS) - math.log((d0 + 1.5) / (3 * PACKETS))
        hosts.append(HostData(f"h{i}", i < canaries, e, d0, d1, steps_pre=pre, steps_post=post))
    return hosts


def test_a_host_whose_dropping_steps_double_shows_ln_2() -> None:
    steady = [0.0, 20.0, 0.0, 22.0, 18.0, 0.0] * 6  # pre: 36 steps, 18 dropping ones of ~20
    doubled = [0.0, 40.0, 44.0, 0.0, 36.0, 0.0] * 2  # post: 12 steps, 6 dropping ones of ~40
    quiet = [0.0] * 12
    mixed = [0.0, 10.0, 70.0, 0.0, 40.0, 0.0] * 2  # the same mean as doubled, far more spread
    pre = [steady] * 8
    post = [doubled, mixed] + [[x / 2 for x in doubled]] * 5 + [quiet]
    measured = step_sizes(pre, post, [0.0] * 8)
    assert measured[0] is not None and measured[0].e == pytest.approx(math.log(2.0))
    assert measured[2] is not None and measured[2].e == pytest.approx(0.0)
    assert measured[7] is None  # no dropping step after: nothing to measure
    # the spread is each window's about its own mean: the doubling is not counted as spread,
    # a window whose dropping steps differ is
    assert measured[1] is not None and measured[1].e == pytest.approx(math.log(2.0))
    assert measured[0].v < 0.012 and 2 * measured[0].v < measured[1].v
    # more packets per step after: a traffic rise explains that much of the size
    shifted = step_sizes(pre, post, [math.log(2.0)] + [0.0] * 7)
    assert shifted[0] is not None and shifted[0].e == pytest.approx(0.0)


def test_the_measure_is_left_out_where_dropping_steps_are_unlike() -> None:
    rng = np.random.default_rng(4)
    geometric = [[float(rng.geometric(0.25)) if rng.random() < 0.4 else 0.0 for _ in range(n)]
                 for n in [36] * 20 + [12] * 20]
    assert all(m is None for m in step_sizes(geometric[:20], geometric[20:], [0.0] * 20))
    regular = [_on_off(rng, 0.4, 30.0, 36) for _ in range(20)]
    after = [_on_off(rng, 0.4, 30.0, 12) for _ in range(20)]
    measured = step_sizes(regular, after, [0.0] * 20)
    assert sum(m is not None for m in measured) >= 15
    assert REGULAR_CV2 < 0.75  # geometric bursts of mean 4 (cv^2 0.75) stay out
    assert step_sizes([[0.0, 5.0, 6.0]] * 3, [[5.0, 0.0, 5.0]] * 3, [0.0] * 3) == [None] * 3


def test_a_change_of_drops_per_dropping_step_fails_the_batch() -> None:
    """2x in drops per dropping step, 8 canaries among 40 hosts: the test finds it in most
    batches, from the size measure, and the burst count alone in few."""
    found = by_size = by_count = 0
    for seed in range(40):
        hosts = _hosts(np.random.default_rng([seed, 20]), 8, 32, 2.0)
        assert burst_size([w for h in hosts for w in (h.steps_pre, h.steps_post)]) > 5
        result = weighted_test(hosts, pre_windows=3.0, permutations=1000)
        found += result.p_value < 0.03
        by_size += result.p_value < 0.03 and result.measure == "size"
        by_count += result.p_value < 0.03 and result.measure == "count"
    assert found >= 26 and by_size >= 24 and by_count <= 6, (found, by_size, by_count)


def test_two_measures_keep_the_level() -> None:
    """No change: the p-value of the larger of the two measures' z is uniform (its
    relabellings score both measures at once), within binomial noise."""
    p = []
    for seed in range(300):
        hosts = _hosts(np.random.default_rng([seed, 10]), 8, 32, 1.0)
        p.append(weighted_test(hosts, pre_windows=3.0, permutations=500).p_value)
    values = np.array(p)
    for level in (0.05, 0.2, 0.5):
        spread = 3 * math.sqrt(level * (1 - level) / values.size)
        assert abs(float(np.mean(values < level)) - level) <= spread, level


def test_many_canaries_take_the_normal_approximation_of_both_measures() -> None:
    """From 60 canaries the p-value of the larger z comes from the two measures' joint normal
    law: it agrees with the one of 40 canaries' Monte Carlo in size and in what it finds."""
    null = [weighted_test(_hosts(np.random.default_rng([seed, 60]), 60, 60, 1.0),
                          pre_windows=3.0) for seed in range(60)]
    assert all(r.permutations == 0 for r in null)
    values = np.array([r.p_value for r in null])
    assert 0.25 < float(np.mean(values < 0.5)) < 0.75
    assert float(np.mean(values < 0.05)) <= 0.15
    changed = weighted_test(_hosts(np.random.default_rng(61), 60, 60, 1.5), pre_windows=3.0)
    assert changed.p_value < 1e-4 and changed.measure == "size"
    assert changed.ratio == pytest.approx(1.5, rel=0.15)


def test_the_explanation_says_what_rose() -> None:
    hosts = _hosts(np.random.default_rng(8), 8, 32, 3.0)
    items, canary, control = {}, [], []
    for i, h in enumerate(hosts):
        name = f"{'c' if h.canary else 'k'}{i}"
        (canary if h.canary else control).append(name)
        item = HostWindows(name, "canary" if h.canary else "control", site="s1", model="m1")
        item.pre = WindowCounts(drops=h.drops_pre, packets=3 * PACKETS, coverage=1.0)
        item.post = WindowCounts(drops=h.drops_post, packets=PACKETS, coverage=1.0)
        item.steps_pre, item.steps_post = h.steps_pre, h.steps_post
        items[name] = item
    verdict = judge(JudgeInput(canary, control, items, pre_windows=3.0), Policy())
    assert verdict.verdict == "FAIL" and verdict.test is not None
    assert verdict.test.measure == "size"
    assert "the canaries' drops per dropping step rose" in verdict.explanation
    assert "drops per dropping step" in render_text(verdict)
    assert verdict.to_dict()["test"]["measure"] == "size"


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_the_joint_tail_of_two_correlated_normals(rho: float) -> None:
    """P(max(Z1, Z2) > x), the normal approximation's p-value, against a seeded draw."""
    from fleet_rollout.judge.weighted import _both_above, normal_sf
    draws = np.random.default_rng(3).multivariate_normal([0, 0], [[1, rho], [rho, 1]], 400_000)
    largest = draws.max(axis=1)
    for x in (0.5, 1.5, 2.5):
        either = 2 * normal_sf(x) - _both_above(x, rho)
        assert either == pytest.approx(float(np.mean(largest > x)), rel=0.03, abs=5e-4)
    assert 0 < 2 * normal_sf(12.0) - _both_above(12.0, rho) < 1e-30  # no digits lost far out
