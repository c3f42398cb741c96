"""The judge: each verdict, each guard, the ceiling, and that guards never give PASS."""
from __future__ import annotations

import json
import math
from typing import Dict, List, Optional

import locations
import numpy as np
import pytest

from fleet_rollout.judge import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Policy,
    judge,
    judge_input_from_dict,
    load_judge_input,
    policy_from_dict,
)
from fleet_rollout.judge.core import SHARE_GUARDS
from fleet_rollout.judge.explain import render_text
from fleet_rollout.judge.guards import log_rate_change

FIXTURES = locations.FIXTURES / "judge"


def fleet(canary_factor: float = 1.0, n_canary: int = 8, n_control: int = 32, seed: int = 1,
          drops: float = 40.0, packets: float = 2e6, canary_traffic: float = 1.0) -> dict:
    """A judge input with heterogeneous hosts; canaries' post drop intensity x canary_factor."""
    rng = np.random.default_rng(seed)
    canary = [f"c{i}" for i in range(n_canary)]
    control = [f"k{i}" for i in range(n_control)]
    hosts: Dict[str, dict] = {}
    for host in canary + control:
        base = packets * math.exp(rng.normal(0, 0.5))
        level = drops * math.exp(abs(rng.normal(0, 1)))
        traffic = canary_traffic if host in canary else 1.0
        factor = canary_factor if host in canary else 1.0
        hosts[host] = {
            "pre": {"drops": int(rng.poisson(level)), "packets": int(base)},
            "post": {"drops": int(rng.poisson(level * factor * traffic)),
                     "packets": int(base * traffic)},
        }
    return {"canary": canary, "control": control, "hosts": hosts}


def run(doc: dict, policy: Optional[Policy] = None):
    return judge(judge_input_from_dict(doc), policy or Policy())


def test_statistic_e_is_the_design_formula() -> None:
    assert log_rate_change(0, 1000, 0, 1000) == 0.0
    assert log_rate_change(9.5, 1e6, 19.5, 1e6) == pytest.approx(math.log(20 / 10))
    # zero drops stay finite and still see the traffic
    assert log_rate_change(0, 1e6, 0, 2e6) == pytest.approx(-math.log(2))


def test_pass_on_no_change() -> None:
    verdict = run(fleet(1.0))
    assert verdict.verdict == PASS and verdict.reason == "no_regression"
    assert verdict.exit_code == 0
    assert verdict.test.n_canary == 8 and verdict.test.n_control == 32
    assert verdict.test.p_value > 0.025
    assert verdict.test.ci_ratio[0] < 1.0 < verdict.test.ci_ratio[1]
    assert "PASS" in verdict.explanation and "permutation p" in verdict.explanation


def test_fail_on_regression_with_numbers() -> None:
    verdict = run(fleet(3.0))
    assert verdict.verdict == FAIL and verdict.reason == "regression" and verdict.exit_code == 1
    assert verdict.test.p_value < 0.025
    assert 2.0 < verdict.test.ratio < 4.5
    assert verdict.test.ci_ratio[0] > 1.0
    text = verdict.explanation
    assert text.startswith("FAIL: after the change the canaries' drop rate rose")
    assert f"{verdict.test.ratio:.2f}x" in text and "should not go on" in text


def test_small_significant_rise_passes_below_min_regression_ratio() -> None:
    doc = fleet(1.0, n_canary=16, n_control=64, seed=3)
    for host in doc["canary"]:  # +4% for every canary, tiny noise: significant but small
        doc["hosts"][host]["post"]["drops"] = int(doc["hosts"][host]["pre"]["drops"] * 1.04) + 1
    for host in doc["control"]:
        doc["hosts"][host]["post"]["drops"] = doc["hosts"][host]["pre"]["drops"]
    verdict = run(doc)
    assert verdict.test.p_value < 0.025
    assert verdict.verdict == PASS and verdict.reason == "small_regression"
    assert "below the 1.1x" in verdict.explanation
    strict = run(doc, policy_from_dict({"min_regression_ratio": 1.0}))
    assert strict.verdict == FAIL


def test_ceiling_fails_at_once_even_when_guards_fail() -> None:
    doc = fleet(1.0, n_canary=3, n_control=12)
    doc["canary"] += ["c8", "c9"]  # two canaries without data: the guards alone say INCONCLUSIVE
    doc["hosts"]["c1"]["post"] = {"drops": 30000, "packets": 1_000_000}
    verdict = run(doc)
    assert verdict.verdict == FAIL and verdict.reason == "ceiling"
    assert [h.host for h in verdict.ceiling_breaches] == ["c1"]
    assert verdict.failed_guards  # reported, but the ceiling wins
    assert "canary host c1 dropped 3.000%" in verdict.explanation


def _breached(doc) -> list:
    return [h.host for h in run(doc).ceiling_breaches]


def test_ceiling_ignores_hosts_that_were_that_bad_before() -> None:
    doc = fleet(1.0)
    doc["hosts"]["c1"]["pre"] = {"drops": 50000, "packets": 1_000_000}
    doc["hosts"]["c1"]["post"] = {"drops": 40000, "packets": 1_000_000}
    assert _breached(doc) == []
    doc["hosts"]["c1"]["post"] = {"drops": 60000, "packets": 1_000_000}
    assert _breached(doc) == []  # already above the ceiling: only a doubling counts
    doc["hosts"]["c1"]["post"] = {"drops": 110000, "packets": 1_000_000}
    assert _breached(doc) == ["c1"]
    doc["hosts"]["c1"]["pre"] = {"drops": 500, "packets": 1_000_000}  # was fine before
    doc["hosts"]["c1"]["post"] = {"drops": 12000, "packets": 1_000_000}
    assert _breached(doc) == ["c1"]
    # a control host above the ceiling is not the change's doing
    doc = fleet(1.0)
    doc["hosts"]["k1"]["post"] = {"drops": 60000, "packets": 1_000_000}
    assert _breached(doc) == [] and run(doc).verdict != FAIL


def test_a_regression_the_comparison_shows_is_the_first_reason_the_ceiling_the_second() -> None:
    """One canary above the ceiling while the comparison is unremarkable: FAIL by the ceiling.
    Every canary far worse and one of them above the ceiling: FAIL by the comparison, with the
    ceiling named as the second reason (the chat shows both)."""
    doc = fleet(1.0, n_canary=8, n_control=32, seed=11)
    doc["hosts"]["c1"]["post"] = {"drops": 30000, "packets": 1_000_000}
    alone = run(doc)
    assert alone.verdict == FAIL and alone.reason == "ceiling"
    assert "alone would not have" in alone.explanation and "Second reason" not in alone.explanation
    worse = fleet(4.0, n_canary=8, n_control=32, seed=11)
    worse["hosts"]["c1"]["post"] = {"drops": 30000, "packets": 1_000_000}
    both = run(worse)
    assert both.verdict == FAIL and both.reason == "regression"
    assert [h.host for h in both.ceiling_breaches] == ["c1"]
    first, second = both.explanation.split(" Second reason: ")
    assert first.startswith("FAIL") and "rose" in first
    assert second.startswith("canary host c1 dropped 3.000%") and "absolute ceiling" in second


def test_ceiling_needs_traffic() -> None:
    doc = fleet(1.0)
    doc["hosts"]["c1"]["post"] = {"drops": 5, "packets": 100}  # 5% of almost nothing
    verdict = run(doc)
    assert verdict.reason != "ceiling"
    assert verdict.verdict == PASS  # 1 of 8 low-traffic canaries is within the guard


def _guard(verdict, name):
    return next(g for g in verdict.guards if g.name == name)


def test_guard_min_canary_hosts() -> None:
    verdict = run(fleet(3.0, n_canary=2, n_control=20))
    assert verdict.verdict == INCONCLUSIVE and verdict.exit_code == 3
    guard = _guard(verdict, "canary_hosts")
    assert not guard.ok and guard.value == 2 and guard.limit == 3
    assert "2 of 2 canary hosts usable (need at least 3)" in verdict.explanation


def test_guard_min_control_hosts() -> None:
    verdict = run(fleet(1.0, n_canary=4, n_control=4))
    assert verdict.verdict == INCONCLUSIVE
    assert not _guard(verdict, "control_hosts").ok and _guard(verdict, "canary_hosts").ok


def test_guard_missing_data_share() -> None:
    doc = fleet(1.0, n_canary=8)
    doc["canary"] += ["c20", "c21"]  # listed, no data at all
    doc["hosts"]["c3"]["post"] = None
    verdict = run(doc)
    guard = _guard(verdict, "canary_data")
    assert verdict.verdict == INCONCLUSIVE and not guard.ok
    assert guard.value == pytest.approx(0.3)
    assert "c3, c20, c21" in guard.message
    assert _guard(verdict, "canary_hosts").ok  # 7 usable is plenty; the share is the problem


def test_guard_low_traffic_share() -> None:
    doc = fleet(1.0, n_canary=6)
    for host in ("c0", "c1", "c2"):
        doc["hosts"][host]["pre"]["packets"] = 4000
    verdict = run(doc)
    guard = _guard(verdict, "canary_traffic")
    assert verdict.verdict == INCONCLUSIVE and not guard.ok and guard.value == 0.5
    host = next(h for h in verdict.hosts if h.host == "c0")
    assert host.reason == "too little traffic: 4000 packets in the pre window (need 10000)"


def test_guard_data_coverage_of_the_window() -> None:
    doc = fleet(1.0, n_canary=5)
    doc["hosts"]["c0"]["post"]["coverage"] = 0.5
    doc["hosts"]["c1"]["pre"]["coverage"] = 0.8
    verdict = run(doc)
    assert verdict.verdict == INCONCLUSIVE
    assert not _guard(verdict, "canary_data").ok
    reasons = {h.host: h.reason for h in verdict.hosts}
    assert reasons["c0"] == "post window data covers 50% (need 90%)"
    relaxed = run(doc, policy_from_dict({"min_coverage": 0.5}))
    assert relaxed.verdict == PASS


def test_guard_traffic_shift() -> None:
    verdict = run(fleet(1.0, canary_traffic=0.4))  # canaries still half drained
    guard = _guard(verdict, "traffic_shift")
    assert verdict.verdict == INCONCLUSIVE and not guard.ok
    assert guard.value == pytest.approx(0.4, rel=0.01)
    assert "canary traffic changed 0.40x relative to control" in verdict.explanation


def _timed(doc: dict, seconds: Dict[str, Dict[str, float]]) -> dict:
    """Each host's windows last what `seconds` says (host -> window -> s, default 60), their
    packets and drops scaled alike: the same traffic per second, windows of other lengths."""
    for host, windows in doc["hosts"].items():
        for name, window in windows.items():
            length = seconds.get(host, {}).get(name, 60.0)
            window["packets"] = int(window["packets"] * length / 60.0)
            window["drops"] = int(window["drops"] * length / 60.0)
            window["seconds"] = length
    return doc


def test_traffic_shift_is_per_second_when_the_windows_know_their_length() -> None:
    # the lab's VM canaries: a collection reached them later than the controls, so their pre
    # window lasted 55 s where the controls' lasted 72 s, at the same packets per second
    doc = fleet(1.0, n_canary=5)
    late = {h: {"pre": 40.0} for h in doc["canary"]}
    verdict = run(_timed(doc, late))
    guard = _guard(verdict, "traffic_shift")
    assert guard.ok and guard.value == pytest.approx(1.0, rel=0.02), guard
    # without the windows' lengths the same counts look like 1.5x more traffic after
    for windows in doc["hosts"].values():
        for window in windows.values():
            del window["seconds"]
    untimed = _guard(run(doc), "traffic_shift")
    assert not untimed.ok and untimed.value == pytest.approx(1.5, rel=0.02)
    # a real change of traffic per second is a shift whatever the windows' lengths
    shifted = _timed(fleet(1.0, canary_traffic=0.4, n_canary=5), late)
    guard = _guard(run(shifted), "traffic_shift")
    assert not guard.ok and guard.value == pytest.approx(0.4, rel=0.02)


def test_unusable_windows_from_snapshot_problems() -> None:
    doc = fleet(1.0)
    doc["hosts"]["c0"]["post"]["problem"] = "reboot inside the window (boot_id changed)"
    verdict = run(doc)
    host = next(h for h in verdict.hosts if h.host == "c0")
    assert not host.usable and "reboot inside the window" in host.reason


@pytest.mark.parametrize("seed", range(25))
def test_guards_never_give_pass(seed: int) -> None:
    """Whatever the data, a failing guard means INCONCLUSIVE or FAIL, never PASS: FAIL by the
    ceiling, or by a significant regression when only the share guards failed."""
    rng = np.random.default_rng(seed)
    doc = fleet(float(rng.choice([0.5, 1.0, 3.0])), n_canary=int(rng.integers(2, 10)),
                n_control=int(rng.integers(3, 30)), seed=seed,
                canary_traffic=float(rng.choice([0.3, 1.0, 1.0, 2.5])))
    for host in list(doc["hosts"]):
        roll = rng.random()
        if roll < 0.1:
            del doc["hosts"][host]
        elif roll < 0.15:
            doc["hosts"][host]["pre"]["packets"] = 10
        elif roll < 0.2:
            doc["hosts"][host]["post"]["coverage"] = 0.3
    verdict = run(doc)
    if verdict.failed_guards:
        assert verdict.verdict in (INCONCLUSIVE, FAIL)
        if verdict.verdict == FAIL and verdict.reason != "ceiling":
            assert verdict.reason == "regression" and verdict.test.p_value < 0.025
            assert {g.name for g in verdict.failed_guards} <= SHARE_GUARDS
            assert "the usable ones show the regression" in verdict.explanation
    else:
        assert verdict.verdict in (PASS, FAIL)


def test_fixture_verdicts_and_json_report() -> None:
    expected = {"pass.json": PASS, "fail.json": FAIL, "ceiling.json": FAIL,
                "inconclusive.json": INCONCLUSIVE, "example.json": PASS}
    for name, want in expected.items():
        verdict = judge(load_judge_input(str(FIXTURES / name)))
        assert verdict.verdict == want, name
        report = json.loads(json.dumps(verdict.to_dict(), allow_nan=False))
        assert report["verdict"] == want and report["explanation"] == verdict.explanation
        assert report["policy"]["alpha"] == 0.03
        assert len(report["hosts"]) == len(verdict.hosts)
        assert verdict.rollout == "snoop-home-2024-05" and verdict.batch == 2
        text = render_text(verdict, all_hosts=True)
        assert text.startswith(f"Verdict: {want}") and "Guards:" in text


def test_explanation_is_one_paragraph_for_chat() -> None:
    for doc in (fleet(1.0), fleet(3.0), fleet(1.0, n_canary=2)):
        text = run(doc).explanation
        assert "\n" not in text and 80 < len(text) < 900


def test_all_zero_drops_pass() -> None:
    doc = fleet(1.0)
    for host in doc["hosts"].values():
        host["pre"]["drops"] = host["post"]["drops"] = 0
    verdict = run(doc)
    assert verdict.verdict == PASS
    assert verdict.summary["canary"]["median_rate_post"] == 0.0


def test_canary_that_starts_dropping_when_control_drops_nothing_fails() -> None:
    """The case Kayenta-style raw-value Mann-Whitney passes (see test_judge_baselines)."""
    doc = fleet(1.0, n_canary=8, n_control=32)
    for name, host in doc["hosts"].items():
        host["pre"]["drops"] = 0
        host["post"]["drops"] = 25 if name.startswith("c") else 0
    verdict = run(doc)
    assert verdict.verdict == FAIL and verdict.test.ratio > 10


def host_list(verdict) -> List[str]:
    return [h.host for h in verdict.hosts]


def test_hosts_keep_input_order() -> None:
    doc = fleet(1.0, n_canary=3, n_control=5)
    assert host_list(run(doc)) == doc["canary"] + doc["control"]


def test_control_side_guards() -> None:
    doc = fleet(1.0, n_canary=5, n_control=20)
    for host in doc["control"][:5]:  # 25% of the controls silent
        del doc["hosts"][host]
    verdict = run(doc)
    assert verdict.verdict == INCONCLUSIVE
    assert not _guard(verdict, "control_data").ok and _guard(verdict, "canary_data").ok
    doc = fleet(1.0, n_canary=5, n_control=20)
    for host in doc["control"][:8]:  # 40% of the controls idle
        doc["hosts"][host]["post"]["packets"] = 900
    verdict = run(doc)
    assert verdict.verdict == INCONCLUSIVE and not _guard(verdict, "control_traffic").ok


def test_a_regression_fails_though_some_hosts_lack_data() -> None:
    """Two of eight canaries without data (25%, above the 20% allowed): no PASS, but the six
    usable canaries show a clear regression, so the batch FAILs; with no regression it stays
    INCONCLUSIVE."""
    for effect, want in ((3.0, FAIL), (1.0, INCONCLUSIVE)):
        doc = fleet(effect)
        del doc["hosts"]["c0"], doc["hosts"]["c1"]
        verdict = run(doc)
        assert verdict.verdict == want, effect
        assert [g.name for g in verdict.failed_guards] == ["canary_data"]
    assert verdict.reason == "guards"


def test_a_regression_does_not_fail_through_a_traffic_shift() -> None:
    verdict = run(fleet(3.0, canary_traffic=0.3))
    assert verdict.verdict == INCONCLUSIVE
    assert "traffic_shift" in {g.name for g in verdict.failed_guards}


def test_an_improvement_passes_with_its_size() -> None:
    verdict = run(fleet(0.3))
    assert verdict.verdict == PASS and verdict.test.ci_ratio[1] < 1.0
    assert f"An improvement: {1 / verdict.test.ratio:.1f}x fewer drops" in verdict.explanation
