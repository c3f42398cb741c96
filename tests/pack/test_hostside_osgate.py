"""The BMC-first wait for a rebooting host (fleet_rollout.hostside.osgate, HostRun._wait_os):
the host is asked (an Ansible run) only once its BMC no longer shows the system down. The host
side is a stand-in answering by the test's clock (no Ansible run: what is tested is when the
wait asks, not how)."""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from fleet_rollout import hoststeps
from fleet_rollout.errors import HostError
from fleet_rollout.hostside import osgate
from fleet_rollout.hostside.ansible_run import HostResult
from fleet_rollout.redfish.power import BootMarker


def test_os_state_from_the_bmc():
    def marker(power: Any = "On", last: Any = None, post: Any = None) -> BootMarker:
        return BootMarker(power, last, None, None, post)

    assert osgate.os_state(marker("Off")) == osgate.DOWN
    assert osgate.os_state(marker(last="MemoryInitializationStarted")) == osgate.DOWN
    assert osgate.os_state(marker(post="InPost")) == osgate.DOWN
    assert osgate.os_state(marker(last="OSBootStarted")) == osgate.BOOTING
    assert osgate.os_state(marker(post="FinishedPost")) == osgate.BOOTING
    assert osgate.os_state(marker(last="OSRunning")) == osgate.UP
    assert osgate.os_state(marker()) == osgate.UNKNOWN
    assert osgate.os_state(marker(None, "None")) == osgate.UNKNOWN
    asked: List[int] = []
    assert osgate.gate_boot_id(lambda: osgate.DOWN, lambda: str(asked.append(1))) is None
    assert not asked  # no Ansible run while the BMC shows the system down
    assert osgate.gate_boot_id(lambda: osgate.UNKNOWN, lambda: "b1") == "b1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


class FakeSide:
    """health(): the host answers with `boot` from `up_at` (clock time) on."""

    def __init__(self, clock: Clock, up_at: float, boot: str = "new") -> None:
        self.clock, self.up_at, self.boot, self.calls = clock, up_at, boot, []

    def health(self, hosts: List[str]) -> Dict[str, HostResult]:
        self.calls.append(self.clock.now)
        if self.clock.now >= self.up_at:
            return {hosts[0]: HostResult(hosts[0], ok=True, result={"boot_id": self.boot},
                                         tasks=["fleet_result"])}
        return {hosts[0]: HostResult(hosts[0], unreachable=True, error="unreachable: refused")}


def _host_run(monkeypatch, clock: Clock, side: FakeSide, poll: float = 1) -> Any:
    monkeypatch.setattr(hoststeps, "time", SimpleNamespace(monotonic=clock.monotonic,
                                                           time=time.time))
    run = hoststeps.HostRun.__new__(hoststeps.HostRun)
    run.name = "h1"
    run.ctx = SimpleNamespace(profile={"redfish": {"poll": poll}}, sleep=clock.sleep,
                              hostside=side)
    return run


def test_wait_asks_the_host_only_once_the_bmc_shows_the_os(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 40)
    looks: List[float] = []

    def look() -> str:  # 30 s in POST, then the OS boots, OSRunning at +40 s
        looks.append(clock.now)
        elapsed = clock.now - 1000.0
        return osgate.DOWN if elapsed < 30 else osgate.BOOTING if elapsed < 40 else osgate.UP

    run = _host_run(monkeypatch, clock, side)
    result = run._wait_os("old", 300, look)
    assert result["boot_id"] == "new"
    assert all(t >= 1030.0 for t in side.calls)  # never while the BMC showed POST
    assert len(side.calls) <= 7, side.calls  # booting: tries spaced out; OSRunning: at once
    assert len(looks) >= 30  # the BMC is what is polled (one GET a look)


def test_wait_without_bmc_information_spaces_the_host_tries(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 120)
    run = _host_run(monkeypatch, clock, side)
    assert run._wait_os("old", 600, lambda: osgate.UNKNOWN)["boot_id"] == "new"
    assert 3 <= len(side.calls) < 30, side.calls  # one try a second would make 120


def test_wait_still_asks_a_host_its_bmc_shows_down_and_fails_at_the_deadline(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 10_000)
    run = _host_run(monkeypatch, clock, side)
    with pytest.raises(HostError, match="OS not back within 200s"):
        run._wait_os("old", 200, lambda: osgate.DOWN)
    # stale BMC data is not trusted for ever: every STALE_ASK, and a last try at the deadline
    assert 3 <= len(side.calls) <= 5, side.calls
    assert side.calls[-1] >= 1200.0


def test_wait_without_reboot_asks_the_host_at_once(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now, boot="same")
    run = _host_run(monkeypatch, clock, side)

    def look() -> str:
        raise AssertionError("the BMC is not needed when the host answers")

    assert run._wait_os(None, 300, look)["boot_id"] == "same"
    assert side.calls == [1000.0]


def test_wait_old_boot_id_is_not_back(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now, boot="old")
    run = _host_run(monkeypatch, clock, side)
    with pytest.raises(HostError, match="boot_id still old"):
        run._wait_os("old", 100, lambda: osgate.UP)
