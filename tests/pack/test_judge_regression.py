"""The judge decides exactly as the fixture records.

tests/fixtures/judge_regression.json holds the verdicts, statistics and explanations the judge
gives for 200 seeded inputs (1-3 canary batches, silent hosts, ties, missing data, ceilings,
large lopsided batches). Any change to the judge that moves a verdict, a statistic or a word
of an explanation fails here; when the change is intended, the fixture is regenerated
(tests/fixtures/judge_regression_gen.py) and the commit says why. Floats are compared exactly.
"""
from __future__ import annotations

import importlib.util
import json
from typing import Any, Dict, List, Tuple

import locations
import numpy as np
import pytest

from fleet_rollout.judge.stats import hodges_lehmann

FIXTURES = locations.FIXTURES


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "judge_regression_gen", FIXTURES / "judge_regression_gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
CASES: List[Dict[str, Any]] = json.loads(
    (FIXTURES / "judge_regression.json").read_text(encoding="utf-8"))["cases"]


def test_fixture_covers_the_hard_cases() -> None:
    assert len(CASES) == GEN.CASES + GEN.STEP_CASES
    verdicts = {c["result"]["verdict"] for c in CASES}
    assert verdicts == {"PASS", "FAIL", "INCONCLUSIVE"}
    assert any(c["n_canary"] == 1 for c in CASES)
    assert any(c["n_canary"] * c["n_control"] > 1_000_000 for c in CASES)
    assert any(c["result"]["test"] and c["result"]["test"]["ci_low"] is None for c in CASES)
    tests = [c["result"]["test"] for c in CASES if c["result"]["test"]]
    assert any(t["burst_size"] > 1 for t in tests)  # per-step drops, counted in bursts
    assert any(t["measure"] == "size" for t in tests)  # drops per dropping step decided
    assert any(t["measure"] == "size" and t["permutations"] == 0 for t in tests)


@pytest.mark.parametrize("chunk", range(10))
def test_judge_reproduces_fixture(chunk: int) -> None:
    differ = []
    for case in CASES[chunk::10]:
        doc, policy = GEN.case_input(case["seed"])
        assert (len(doc["canary"]), len(doc["control"]), policy) == (
            case["n_canary"], case["n_control"], case["policy"])
        got = json.loads(json.dumps(GEN.outcome(doc, policy)))
        if got != case["result"]:
            differ.append((case["seed"], {k for k in got if got[k] != case["result"].get(k)}))
    assert not differ


def _hodges_lehmann_by_sorting(x: np.ndarray, y: np.ndarray,
                               k: int) -> Tuple[float, float, float]:
    """The judge's original method: every pairwise difference, sorted."""
    diffs = np.sort((x[:, None] - y[None, :]).ravel())
    if k < 1:
        return float(np.median(diffs)), float("-inf"), float("inf")
    return float(np.median(diffs)), float(diffs[k - 1]), float(diffs[diffs.size - k])


@pytest.mark.parametrize("seed", range(40))
def test_hodges_lehmann_selection_equals_sorting(seed: int) -> None:
    from fleet_rollout.judge.stats import ci_rank

    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 60 if seed % 4 else 700))
    n = int(rng.integers(1, 80 if seed % 4 else 900))
    if seed % 3 == 0:  # heavy ties: few distinct values, as with sparse drop counts
        x = rng.choice([-0.7, 0.0, 0.2, 1e-17, 0.3], m)
        y = rng.choice([-0.7, 0.0, 0.2, 0.1 + 0.2], n)
    elif seed % 3 == 1:  # values a few ulps apart: rounding of x - y must not matter
        x = 1.0 + rng.integers(0, 6, m) * np.finfo(float).eps
        y = 3.0 + rng.integers(0, 6, n) * 4 * np.finfo(float).eps
    else:
        x = rng.normal(0.3, 1.0, m) * 10.0 ** int(rng.integers(-3, 3))
        y = rng.standard_t(3, n)
    for level in (0.8, 0.95):
        k = ci_rank(m, n, level)
        assert hodges_lehmann(x, y, level) == _hodges_lehmann_by_sorting(x, y, k)
        assert hodges_lehmann(y, x, level) == _hodges_lehmann_by_sorting(y, x, k)


def test_a_judgement_does_not_import_scipy() -> None:
    """Every verdict of the fixture's kinds (PASS, FAIL by the test and by the ceiling,
    INCONCLUSIVE) in a process of its own: scipy is never imported (0.5-1 s of a judge action's
    process before, on st2 every time)."""
    import subprocess
    import sys

    seeds = sorted({c["result"]["verdict"]: c["seed"] for c in CASES}.values())
    generator = str(FIXTURES / "judge_regression_gen.py")
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('gen', {generator!r})\n"
        "gen = importlib.util.module_from_spec(spec); spec.loader.exec_module(gen)\n"
        f"verdicts = [gen.outcome(*gen.case_input(s))['verdict'] for s in {seeds!r}]\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'scipy')\n"
        "print(json.dumps([verdicts, loaded]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=str(locations.ROOT))
    assert out.returncode == 0, out.stderr
    verdicts, scipy = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(verdicts) == ["FAIL", "INCONCLUSIVE", "PASS"] and scipy == []
