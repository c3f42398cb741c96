"""Small batches (fleet_rollout.judge.large_change): with fewer usable canaries than
the comparison needs, a change of 5x or more either way is still decided; anything else stays
INCONCLUSIVE."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from fleet_rollout.judge import judge, judge_input_from_dict
from fleet_rollout.judge.core import FAIL, INCONCLUSIVE, PASS

PACKETS = 4_000_000
STEPS = 12


def _window(rng: np.random.Generator, level: float, burst: Optional[float] = None
            ) -> Dict[str, Any]:
    steps = [float(x) for x in rng.negative_binomial(4, 4 / (4 + level / STEPS), STEPS)]
    if burst is not None:  # the whole change in one step
        steps[3] += burst
    return {"drops": sum(steps), "packets": PACKETS, "steps": steps}


def _batch(seed: int, canary_effects: List[float], controls: int = 20,
           burst: Optional[float] = None) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    hosts = {}
    canary = [f"c{i}" for i in range(len(canary_effects))]
    for i, name in enumerate(canary + [f"k{i}" for i in range(controls)]):
        level = 300.0 * np.exp(rng.normal(0, 0.8))
        effect = canary_effects[i] if i < len(canary) else 1.0
        post = _window(rng, level * effect) if burst is None or i >= len(canary) else \
            _window(rng, level, burst=burst * level)
        hosts[name] = {"pre": _window(rng, level), "post": post}
    return {"canary": canary, "control": [h for h in hosts if h not in canary], "hosts": hosts}


def _run(doc: Dict[str, Any]):
    return judge(judge_input_from_dict(doc))


def test_one_canary_with_a_large_regression_fails() -> None:
    verdict = _run(_batch(1, [8.0]))
    assert verdict.verdict == FAIL and verdict.reason == "large_regression"
    assert verdict.large is not None and 5.0 < verdict.large.ratio < 13.0
    assert verdict.large.hosts[0]["host"] == "c0" and verdict.large.hosts[0]["z"] >= 2.0
    assert "a large regression" in verdict.explanation and "c0" in verdict.explanation
    assert verdict.to_dict()["large_change"]["reason"] == "large_regression"


def test_two_canaries_with_a_large_improvement_pass_with_its_size() -> None:
    verdict = _run(_batch(2, [0.1, 0.12]))
    assert verdict.verdict == PASS and verdict.reason == "large_improvement"
    assert verdict.large.ratio < 0.2
    assert f"{1 / verdict.large.ratio:.1f}x fewer drops" in verdict.explanation


def test_a_moderate_change_with_one_canary_stays_inconclusive() -> None:
    for effect in (3.0, 0.35, 1.0):
        verdict = _run(_batch(3, [effect]))
        assert verdict.verdict == INCONCLUSIVE and verdict.large is None, effect


def test_one_burst_is_not_a_large_change() -> None:
    """The canary's post window holds 8x its drops, all in one step: its median step did not
    move, so its own history says burst, not change."""
    verdict = _run(_batch(4, [1.0], burst=7.0))
    assert verdict.summary["canary"]["drops_post"] > 5 * verdict.summary["canary"]["drops_pre"]
    assert verdict.verdict == INCONCLUSIVE


def test_no_improvement_pass_while_a_canary_lacks_data() -> None:
    doc = _batch(5, [0.1, 0.1])
    del doc["hosts"]["c1"]
    verdict = _run(doc)
    assert verdict.verdict == INCONCLUSIVE
    doc = _batch(5, [8.0, 8.0])
    del doc["hosts"]["c1"]
    assert _run(doc).reason == "large_regression"  # a regression still fails


def test_thin_controls_decide_nothing() -> None:
    verdict = _run(_batch(6, [10.0], controls=4))
    assert verdict.verdict == INCONCLUSIVE
    assert "control_hosts" in {g.name for g in verdict.failed_guards}


def test_false_alarms_of_one_canary_stay_rare() -> None:
    """400 batches without any change, one canary among 20 over-dispersed controls."""
    fails = sum(_run(_batch(100 + seed, [1.0])).verdict == FAIL for seed in range(400))
    assert fails / 400 <= 0.025
