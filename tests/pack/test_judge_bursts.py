"""Counting bursts instead of drops (fleet_rollout.judge.bursts and its use by the test).

The windows here are drawn from the model the module assumes (Poisson bursts per step, each of
geometric size), seeded, so what is asserted is what the estimates must recover."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest

from fleet_rollout.counters.deltas import WindowCounts
from fleet_rollout.judge.bursts import MAX_STEP, burst_size, count_bursts
from fleet_rollout.judge.core import judge
from fleet_rollout.judge.explain import render_text
from fleet_rollout.judge.inputs import HostWindows, JudgeInput
from fleet_rollout.judge.policy import Policy
from fleet_rollout.judge.weighted import HostData, counted_in_bursts, weighted_test


def _window(rng: np.random.Generator, beta: float, size: float,
            steps: int = 12) -> Tuple[List[float], int]:
    """Per-step drops of one window and its true number of bursts."""
    bursts = rng.poisson(beta, steps)
    drops = [int(rng.geometric(1.0 / size, k).sum()) if k else 0 for k in bursts]
    return [float(d) for d in drops], int(bursts.sum())


@pytest.mark.parametrize("size", [2.0, 4.0, 10.0])
def test_the_burst_size_comes_back_from_the_steps(size: float) -> None:
    rng = np.random.default_rng(int(size * 10))
    windows = [_window(rng, beta, size)[0] for beta in rng.uniform(0.2, 1.5, 60)]
    assert burst_size(windows) == pytest.approx(size, rel=0.25)


def test_single_drops_and_thin_data_say_size_one() -> None:
    rng = np.random.default_rng(1)
    poisson = [[float(x) for x in rng.poisson(0.8, 12)] for _ in range(40)]
    assert burst_size(poisson) == pytest.approx(1.0, abs=0.2)
    assert burst_size([[0, 3, 0, 0, 5, 0]] * 3) == 1.0  # fewer windows than it needs
    assert burst_size([None, [0.0] * 12, [5.0] * 12]) == 1.0  # none with both kinds of step


def test_burst_counts_add_up_to_the_bursts_there_were() -> None:
    rng = np.random.default_rng(7)
    drawn = [_window(rng, beta, 4.0) for beta in rng.uniform(0.1, 2.0, 200)]
    counted = count_bursts([w for w, _ in drawn], 4.0)
    true = sum(k for _, k in drawn)
    drops = sum(sum(w) for w, _ in drawn)
    assert sum(float(c.sum()) for c in counted) == pytest.approx(true, rel=0.05)
    assert drops > 3 * true  # the drops alone would say 4x as many events
    for (window, _), bursts in zip(drawn, counted):
        assert len(bursts) == len(window)
        for d, k in zip(window, bursts):
            assert (k == 0) if d == 0 else (1.0 <= k <= d)  # a step with d drops: 1..d bursts


def test_edge_cases_keep_the_drops() -> None:
    one_each = [[0.0, 1.0, 1.0, 0.0, 1.0]]
    assert count_bursts(one_each, 4.0)[0].tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]
    assert count_bursts([[3.0, 0.0, 9.0]], 1.0)[0].tolist() == [3.0, 0.0, 9.0]  # size 1
    big = [0.0, MAX_STEP + 4.0, 8.0]
    assert count_bursts([big], 4.0)[0].tolist() == pytest.approx([x / 4.0 for x in big])
    assert count_bursts([[0.0, 0.0], []], 4.0)[1].tolist() == []


def _hosts(rng: np.random.Generator, canaries: int, controls: int, effect: float,
           size: float = 4.0) -> List[HostData]:
    hosts = []
    for i in range(canaries + controls):
        beta = float(rng.lognormal(np.log(0.6), 0.8))
        pre, _ = _window(rng, beta, size, steps=36)
        post, _ = _window(rng, beta * (effect if i < canaries else 1.0), size)
        d0, d1 = sum(pre), sum(post)
        e = float(np.log((d1 + 0.5) / 1e6) - np.log((d0 + 1.5) / 3e6))
        hosts.append(HostData(f"h{i}", i < canaries, e, d0, d1, steps_pre=pre, steps_post=post))
    return hosts


def test_the_conversion_does_not_look_at_labels() -> None:
    hosts = _hosts(np.random.default_rng(3), 8, 32, 1.0)
    swapped = [HostData(h.name, not h.canary, h.e, h.drops_pre, h.drops_post,
                        steps_pre=h.steps_pre, steps_post=h.steps_post) for h in hosts]
    (a, size_a), (b, size_b) = counted_in_bursts(hosts, 3.0), counted_in_bursts(swapped, 3.0)
    assert size_a == size_b > 1.5
    assert [h.e for h in a] == [h.e for h in b]
    assert [h.drops_post for h in a] == [h.drops_post for h in b]


def test_drops_in_one_step_count_less_than_drops_spread_out() -> None:
    rng = np.random.default_rng(11)
    hosts = _hosts(rng, 2, 30, 1.0)
    pre = [1.0, 0.0, 2.0, 0.0, 0.0, 1.0] * 6  # 24 drops, a few at a time
    hosts[0] = HostData("one-burst", True, 0.0, 24.0, 8.0, steps_pre=pre,
                        steps_post=[0.0] * 11 + [8.0])
    hosts[1] = HostData("spread", True, 0.0, 24.0, 8.0, steps_pre=pre,
                        steps_post=[1.0] * 8 + [0.0] * 4)
    counted, _ = counted_in_bursts(hosts, 3.0)
    assert counted[0].drops_post < 3.0 < 7.0 < counted[1].drops_post
    assert counted[0].e < counted[1].e  # same drops; the spread-out ones are more events


def test_counting_bursts_finds_a_regression_drops_miss() -> None:
    """The same seeded batches judged by the test with and without the per-step drops (without
    them it counts drops): counting bursts finds a 1.5x regression at 8 canaries more often, and
    raises no more false alarms."""
    found = {True: 0, False: 0}
    alarms = {True: 0, False: 0}
    for seed in range(100):
        for effect, tally in ((1.5, found), (1.0, alarms)):
            hosts = _hosts(np.random.default_rng([seed, int(effect * 10)]), 8, 32, effect)
            for steps in (True, False):
                data = hosts if steps else [HostData(h.name, h.canary, h.e, h.drops_pre,
                                                     h.drops_post) for h in hosts]
                result = weighted_test(data, pre_windows=3.0, permutations=500)
                tally[steps] += result.p_value < 0.025
                assert (result.burst_size > 1.5) is steps
    assert found[True] >= found[False] + 8
    assert alarms[True] <= 5 and alarms[False] <= 5


def test_the_explanation_says_what_was_counted() -> None:
    rng = np.random.default_rng(5)
    hosts = {}
    canary, control = [], []
    for i, h in enumerate(_hosts(rng, 8, 32, 1.0)):
        name = f"{'c' if h.canary else 'k'}{i}"
        (canary if h.canary else control).append(name)
        item = HostWindows(name, "canary" if h.canary else "control", site="s1", model="m1")
        item.pre = WindowCounts(drops=h.drops_pre, packets=3e6, coverage=1.0)
        item.post = WindowCounts(drops=h.drops_post, packets=1e6, coverage=1.0)
        item.steps_pre, item.steps_post = h.steps_pre, h.steps_post
        hosts[name] = item
    verdict = judge(JudgeInput(canary, control, hosts, pre_windows=3.0), Policy())
    assert verdict.test is not None and verdict.test.burst_size > 1.5
    assert f"bursts (mean size {verdict.test.burst_size:.1f} drops)" in render_text(verdict)
    assert verdict.to_dict()["test"]["burst_size"] == verdict.test.burst_size
