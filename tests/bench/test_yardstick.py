"""The yardstick (bench/yardstick.py): its likelihoods are probability laws with the means the
models give, its false-alarm rate on fresh no-change batches is the level it was set at, and
at that level it detects what the judge detects on the same batches, or more."""
from __future__ import annotations

import math
import sys
from typing import Callable, List, Tuple

import locations
import numpy as np
import pytest

from fleet_rollout.judge import FAIL, Policy, judge, judge_input_from_dict

sys.path.append(str(locations.ROOT / "bench"))  # last: bench/'s modules shadow nothing
import bench_judge as bj
import fleet_generators as fg
import results as bench_results
import yardstick as ys

LEVEL = 0.05


# --- the likelihoods ----------------------------------------------------------------------

@pytest.mark.parametrize("lam", [0.002, 0.3, 2.0, 20.0])
def test_compound_pareto_law_sums_to_one_and_has_its_mean_in_the_body(lam: float) -> None:
    x = np.arange(0, 16385)
    pmf = np.exp(ys.ParetoYardstick().logpmf(x, np.full(x.shape, lam)))
    # the tail beyond the table: P(X > n) is about lam * n^-1.5 (one big burst)
    assert abs(pmf.sum() - 1.0) < 2e-3
    assert pmf[0] == pytest.approx(math.exp(-lam), rel=0.02)
    # P(X = 1) = P(one burst, of size 1): lam e^-lam (1 - 2^-1.5)
    assert pmf[1] == pytest.approx(lam * math.exp(-lam) * (1 - 2 ** -1.5), rel=0.02)


@pytest.mark.parametrize("log_mean", [-6.0, -1.0, 0.5, 3.0, 6.0])
def test_poisson_lognormal_law_sums_to_one_with_the_mean_it_is_given(log_mean: float) -> None:
    x = np.arange(0, 60000)
    pmf = np.exp(ys.DiurnalYardstick().step_logpmf(x, np.full(x.shape, log_mean)))
    assert abs(pmf.sum() - 1.0) < 1e-3
    assert (x * pmf).sum() == pytest.approx(math.exp(log_mean), rel=0.01)


def test_negative_binomial_has_its_mean_and_variance() -> None:
    x = np.arange(0, 20000)
    pmf = np.exp(ys.nb_logpmf(x, 40.0, 0.8))
    mean = (x * pmf).sum()
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    assert mean == pytest.approx(40.0, rel=1e-6)
    assert ((x - mean) ** 2 * pmf).sum() == pytest.approx(40.0 + 40.0 ** 2 / 0.8, rel=1e-4)


def test_threshold_keeps_the_rate_on_its_own_batches_at_the_level() -> None:
    values = np.random.default_rng(1).normal(size=1000)
    for level in (0.0, 0.01, 0.05, 0.3):
        assert ys.power(values, ys.threshold(values, level)) <= level
        assert ys.power(values, ys.threshold(values, level)) > level - 0.002


# --- the test at its level ----------------------------------------------------------------

Draw = Callable[[np.random.Generator, int, bool], Tuple[List[float], List[bool]]]


def bench_draw(scenario: str, m: int, effect: float) -> Draw:
    """Batches of bench_judge's model: the yardstick's statistic and the judge's FAIL each."""
    yardstick = ys.BenchYardstick(bj.SCENARIOS[scenario], bj.STEPS)

    def draw(rng: np.random.Generator, size: int,
             judged: bool) -> Tuple[List[float], List[bool]]:
        sim = bj.simulate(rng, size, m, effect, scenario, pre_windows=3)
        stats, fails = [], []
        for rep in range(size):
            stats.append(ys.statistic(yardstick.log_marginals(sim, rep, m, (1.0, 2.0)),
                                      (1.0, 2.0), 2.0))
            if judged:
                fails.append(judge(bj._judge_input(sim, rep, m), Policy()).verdict == FAIL)
        return stats, fails
    return draw


def generator_draw(name: str, m: int, effect: float, totals_only: bool) -> Draw:
    yardstick = ys.generator_yardstick(name)
    layout = fg.Layout(m, 4 * m, 12, 3)

    def draw(rng: np.random.Generator, size: int,
             judged: bool) -> Tuple[List[float], List[bool]]:
        stats, fails = [], []
        for _ in range(size):
            fleet = fg.GENERATORS[name].sample(rng, layout, effect)
            stats.append(ys.statistic(yardstick.log_marginals(fleet, totals_only, (1.0, 2.0)),
                                      (1.0, 2.0), 2.0))
            if judged:
                verdict = judge(judge_input_from_dict(fleet.document(totals_only)), Policy())
                fails.append(verdict.verdict == FAIL)
        return stats, fails
    return draw


CASES = {
    "bench harsh": lambda effect: bench_draw("harsh", 8, effect),
    "lognormal steps": lambda effect: generator_draw("lognormal_fleet", 8, effect, False),
    "lognormal totals": lambda effect: generator_draw("lognormal_fleet", 8, effect, True),
    "pareto steps": lambda effect: generator_draw("pareto_bursts_fleet", 8, effect, False),
    "pareto totals": lambda effect: generator_draw("pareto_bursts_fleet", 8, effect, True),
    "diurnal steps": lambda effect: generator_draw("diurnal_missing_fleet", 8, effect, False),
    "diurnal totals": lambda effect: generator_draw("diurnal_missing_fleet", 8, effect, True),
    "markov steps": lambda effect: generator_draw("markov_onoff_fleet", 8, effect, False),
    "markov totals": lambda effect: generator_draw("markov_onoff_fleet", 8, effect, True),
    "ring steps": lambda effect: generator_draw("ring_overflow_fleet", 8, effect, False),
    "ring totals": lambda effect: generator_draw("ring_overflow_fleet", 8, effect, True),
}
CALIBRATION, CHECK, POWER = 300, 300, 80


@pytest.mark.parametrize("case", list(CASES))
def test_yardstick_false_alarms_stay_at_its_level_and_it_sees_what_the_judge_sees(
        case: str) -> None:
    """Set at 5% on 300 no-change batches, the yardstick FAILs about 5% of 300 fresh ones
    (within 2.6 sd of the calibration's and the check's binomial noise), and at 2x with 8
    canaries it finds at least what the judge finds on the same 80 batches, less the two
    rates' noise."""
    null = CASES[case](1.0)
    calibration, _ = null(np.random.default_rng(101), CALIBRATION, False)
    limit = ys.threshold(calibration, LEVEL)
    fresh, _ = null(np.random.default_rng(202), CHECK, False)
    rate = ys.power(fresh, limit)
    # the calibration's own quantile error adds to the fresh batches' binomial noise
    spread = math.sqrt(LEVEL * (1 - LEVEL) * (1 / CALIBRATION + 1 / CHECK))
    assert abs(rate - LEVEL) <= 2.6 * spread, (case, rate)

    stats, fails = CASES[case](2.0)(np.random.default_rng(303), POWER, True)
    best, judged = ys.power(stats, limit), float(np.mean(fails))
    assert best > 2 * LEVEL, (case, best)  # it detects the change
    assert best >= judged - 2.6 * math.sqrt(2 * 0.25 / POWER), (case, best, judged)


# --- what bench-judge writes --------------------------------------------------------------

def test_bench_section_replaces_only_its_part_of_a_page(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLEET_BENCH_RECORD", "1")
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nbefore\n<!-- bench:x:begin -->\nold\n<!-- bench:x:end -->\n"
                    "after\n")
    bench_results.write_section(str(page), "x", "| a |\n|---|\n| 1 |")
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- bench:x:begin -->\n| a |\n|---|\n| 1 |\n")
    assert "old" not in text and text.endswith("<!-- bench:x:end -->\nafter\n")
    assert "Written by the bench on" in text
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="bench:x:begin"):
        bench_results.write_section(str(tmp_path / "bare.md"), "x", "table")
    monkeypatch.setenv("FLEET_BENCH_RECORD", "0")
    assert bench_results.write_section(str(page), "x", "other") is None
    assert "| 1 |" in page.read_text()


def test_docs_page_has_the_bench_judge_section() -> None:
    page = (locations.ROOT / "docs" / "judge.md").read_text(encoding="utf-8")
    assert page.count("<!-- bench:bench-judge:begin -->") == 1
    assert page.count("<!-- bench:bench-judge:end -->") == 1
