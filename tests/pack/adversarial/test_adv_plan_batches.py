"""Adversarial: plan inputs that crashed planning instead of being planned or refused.

- A huge `batches.growth` (1e308) made the batch size inf and int(inf) raised OverflowError.
- An unexpected exception in one host's precheck escaped plan.precheck_hosts as a traceback.
"""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout.errors import HostError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import make_batches, next_batch_size, precheck_hosts


def _hosts(count: int) -> List[FleetHost]:
    return [FleetHost(f"h{i:03d}", "https://10.0.0.1", site=f"s{i % 3}", rack=f"r{i % 7}")
            for i in range(count)]


@pytest.mark.parametrize("growth", [1e308, 1.7976931348623157e308, 1e300, 13.0])
def test_huge_growth_is_capped_at_max_batch(growth: float) -> None:
    batches = make_batches(_hosts(200), canary_size=2, growth=growth, max_batch=25,
                           max_per_site=100, max_per_rack=100)
    sizes = [len(b) for b in batches]
    assert sizes[0] == 2
    assert all(size <= 25 for size in sizes)
    assert sum(sizes) == 200
    assert sizes[1:-1] == [25] * (len(sizes) - 2)


def test_growth_keeps_the_size_finite_over_many_batches() -> None:
    size = 1.0
    for _ in range(2000):
        size = next_batch_size(size, 1e308, 50)
    assert size == 50.0


def test_canary_larger_than_max_batch_and_nan_growth() -> None:
    batches = make_batches(_hosts(30), canary_size=100, growth=float("nan"), max_batch=10,
                           max_per_site=100, max_per_rack=100)
    assert [len(b) for b in batches] == [10, 10, 10]


def test_precheck_never_lets_an_exception_escape() -> None:
    def check(host: FleetHost) -> Dict[str, Any]:
        if host.name == "h000":
            raise TypeError("'NoneType' object is not subscriptable")
        if host.name == "h001":
            raise HostError("BMC unreachable", host.name)
        if host.name == "h002":
            return None  # type: ignore[return-value]
        return {"compliant": False}

    result = precheck_hosts(_hosts(4), check)
    assert result["h000"] == {"error": "internal error while reading the BMC: TypeError: "
                                       "'NoneType' object is not subscriptable"}
    assert result["h001"] == {"error": "h001: BMC unreachable"}
    assert "internal error" in result["h002"]["error"]
    assert result["h003"] == {"compliant": False}
