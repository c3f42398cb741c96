"""Evaluation baselines: Kayenta-style Mann-Whitney on raw values, pooled Poisson rate ratio."""
from __future__ import annotations

import numpy as np

from fleet_rollout.judge.baselines import kayenta_mann_whitney, pooled_poisson_rate_ratio


def test_kayenta_passes_a_canary_that_drops_while_control_drops_nothing() -> None:
    """The documented weakness: mostly-zero series make the HL interval collapse on 0."""
    canary = [0.0] * 9 + [4e-5, 0.0, 3e-5]  # bursts in 2 of 12 steps
    control = [0.0] * 12
    result = kayenta_mann_whitney(canary, control)
    assert result.verdict == "PASS"
    assert result.estimate == 0.0 and result.ci_low == 0.0


def test_kayenta_flags_a_clear_shift_and_handles_no_data() -> None:
    rng = np.random.default_rng(1)
    canary = rng.normal(3e-5, 2e-6, 12)
    control = rng.normal(1e-5, 2e-6, 12)
    assert kayenta_mann_whitney(canary, control).verdict == "FAIL"
    assert kayenta_mann_whitney([np.nan], control).verdict == "NODATA"
    assert kayenta_mann_whitney([0.0, 0.0], [0.0, 0.0]).verdict == "PASS"


def test_pooled_poisson_cries_wolf_on_host_heterogeneity() -> None:
    """One naturally noisy canary host: same rate as before, but pooling calls it a regression."""
    result = pooled_poisson_rate_ratio(canary_drops=400, canary_packets=4e6,
                                       control_drops=600, control_packets=16e6)
    assert result.verdict == "FAIL" and result.estimate > 2
    assert pooled_poisson_rate_ratio(10, 1e6, 40, 4e6).verdict == "PASS"
    assert pooled_poisson_rate_ratio(0, 1e6, 0, 4e6).verdict == "PASS"
    assert pooled_poisson_rate_ratio(1, 0, 0, 4e6).verdict == "NODATA"
