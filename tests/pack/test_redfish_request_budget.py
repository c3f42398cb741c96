"""Request budget per host (fleet scale): one apply_bios (snapshot + stage + commit +
reset + verify) costs at most BUDGET HTTP requests at each simulated BMC personality, and so does
a restore_bios with its reset.

What is counted: every request the simulated BMC served (its own counters, over real HTTPS),
session login (POST) and logout (DELETE) included, the lab's /_sim admin calls excluded. The
client's own count of what it put on the wire must agree with it. The attribute registry cache
is emptied first: each operation is measured as a fresh process (an st2 action) would run it.
The reboot time the client expects (Timeouts.reboot) is the simulator's own plus a margin.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

import pytest
from redfish_support import bmc_fleet, endpoint, reset_counters, server_requests, state

from fleet_lab.bmcsim.vendors import VENDOR_KEYS, sample_desired
from fleet_rollout.redfish import attribute_registry as rf_registry
from fleet_rollout.redfish.operations import Timeouts, apply_bios, restore_bios, take_snapshot

BUDGET = 20
SNAPSHOT_BUDGET = 12
REBOOT = 2.0  # seconds: the simulator's reboot
# what the client is told to expect: the reboot time with an operator's margin. The first look
# after the reset comes at 3/4 of it (3.75 x the simulator's reboot); a loaded test machine
# delays the simulator's timers (its event loop shares this process with five clients), and each
# look that comes too early costs one more GET: the generous reboot keeps those out of the count
TIMEOUTS = dict(graceful=20.0, force=20.0, boot=40.0, poll=0.1, reboot=REBOOT * 5)
# the product's default request timeout, not the helpers' 5 s: the client counts a request that
# timed out before the simulator (its event loop shares this process, under a busy test run) took
# it in, then sends it again, and the client's count would exceed what was served
CLIENT_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def runs() -> Dict[str, Dict[str, Any]]:
    """Snapshot, apply and restore on every personality at once (one BMC each)."""
    with bmc_fleet(VENDOR_KEYS, reboot_seconds=REBOOT) as fleet:
        with ThreadPoolExecutor(max_workers=len(VENDOR_KEYS)) as pool:
            results = list(pool.map(lambda i: _run(fleet, i), range(len(VENDOR_KEYS))))
    return dict(zip(VENDOR_KEYS, results))


def _served(fleet: Any, index: int) -> Dict[str, int]:
    return server_requests(state(fleet, index))


def _await_os(fleet: Any, index: int) -> None:
    deadline = time.monotonic() + 30
    while state(fleet, index)["boot_state"] != "OSRunning":
        assert time.monotonic() < deadline, state(fleet, index)
        time.sleep(0.05)


def _run(fleet: Any, index: int) -> Dict[str, Any]:
    vendor = VENDOR_KEYS[index]
    out: Dict[str, Any] = {"name": fleet.bmcs[index].name}
    bmc = endpoint(fleet, index, timeout=CLIENT_TIMEOUT)
    rf_registry._CACHE.clear()
    reset_counters(fleet, index)
    snap = take_snapshot(bmc)
    out["snapshot"] = (snap["requests"], _served(fleet, index))

    rf_registry._CACHE.clear()
    reset_counters(fleet, index)
    report = apply_bios(bmc, sample_desired(vendor), Timeouts(**TIMEOUTS))
    out["apply"] = (report["requests"], _served(fleet, index))
    out["apply_report"] = report
    out["resets_after_apply"] = list(state(fleet, index)["resets"])

    _await_os(fleet, index)  # a rollout restores a running host, not one mid-boot
    jobs_listed = len(state(fleet, index)["jobs"])
    rf_registry._CACHE.clear()
    reset_counters(fleet, index)
    before = len(state(fleet, index)["resets"])
    restored = restore_bios(bmc, report["snapshot"], Timeouts(**TIMEOUTS))
    out["restore"] = (restored["requests"], _served(fleet, index))
    out["restore_report"] = restored
    out["restore_resets"] = state(fleet, index)["resets"][before:]
    out["jobs_listed"] = jobs_listed
    return out


def _total(counts: Dict[str, int]) -> int:
    return sum(counts.values())


@pytest.mark.parametrize("vendor", VENDOR_KEYS)
def test_apply_within_budget(runs: Dict[str, Dict[str, Any]], vendor: str) -> None:
    run = runs[vendor]
    client, served = run["apply"]
    assert client == served, (vendor, client, served)  # the client counts what went on the wire
    assert _total(served) <= BUDGET, (vendor, served)
    report = run["apply_report"]
    assert report["applied"]["ok"] is True
    assert report["reset"]["sent"] == ["GracefulRestart"]  # exactly one reset
    assert run["resets_after_apply"] == ["GracefulRestart"]
    assert report["stage"]["writes"] == 1
    # login and logout are part of it (every personality here offers sessions)
    assert served.get("DELETE", 0) == 1


@pytest.mark.parametrize("vendor", VENDOR_KEYS)
def test_restore_within_budget(runs: Dict[str, Dict[str, Any]], vendor: str) -> None:
    """A restore re-reads the Dell job queue, which lists the apply's finished job: one GET per
    listed job is the price of foreign-job detection on an iDRAC (no $expand there)."""
    run = runs[vendor]
    client, served = run["restore"]
    assert client == served, (vendor, client, served)
    extra_jobs = run["jobs_listed"] if vendor.startswith("dell") else 0
    assert _total(served) <= BUDGET + extra_jobs, (vendor, served, extra_jobs)
    assert run["restore_report"]["applied"]["ok"] is True
    assert run["restore_resets"] == ["GracefulRestart"]


@pytest.mark.parametrize("vendor", VENDOR_KEYS)
def test_snapshot_is_lean(runs: Dict[str, Dict[str, Any]], vendor: str) -> None:
    client, served = runs[vendor]["snapshot"]
    assert client == served
    assert _total(served) <= SNAPSHOT_BUDGET, (vendor, served)


def test_budget_report(runs: Dict[str, Dict[str, Any]]) -> None:
    """Not a check: the per-personality counts, printed for the record (pytest -s)."""
    rows: List[str] = []
    for vendor in VENDOR_KEYS:
        run = runs[vendor]
        rows.append(f"{vendor}: snapshot {_total(run['snapshot'][1])}, apply "
                    f"{_total(run['apply'][1])} {run['apply'][1]}, restore "
                    f"{_total(run['restore'][1])}")
    print("\nrequests per host: " + "; ".join(rows))


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pacer_follows_the_expected_reboot_time_and_never_polls_faster_than_poll() -> None:
    from fleet_rollout.redfish.power import Pacer

    clock = _Clock()
    pacer = Pacer(poll=0.5, expected=40.0, clock=clock)
    sleeps = []
    for _ in range(8):
        delay = pacer.next_sleep()
        sleeps.append(delay)
        clock.now += delay
    assert sleeps[0] == pytest.approx(30.0)  # sparse at first: 3/4 of the expected 40s
    assert sleeps[1] == pytest.approx(7.5)  # then 3/4 of what remains
    assert all(s >= 0.5 for s in sleeps)
    # past the expected time: back off from poll again, growing, bounded
    late = Pacer(poll=0.5, expected=1.0, elapsed=5.0, clock=clock)
    assert [late.next_sleep() for _ in range(3)] == pytest.approx([0.5, 0.75, 1.125])


def test_pacer_without_expectation_backs_off_from_poll_and_respects_the_deadline() -> None:
    from fleet_rollout.redfish.power import Pacer

    clock = _Clock()
    pacer = Pacer(poll=2.0, clock=clock)
    sleeps = [pacer.next_sleep() for _ in range(10)]
    assert sleeps[:3] == pytest.approx([2.0, 3.0, 4.5])
    assert max(sleeps) == pytest.approx(16.0)  # never more than 8 polls (and 30s) apart
    near = Pacer(poll=0.5, expected=60.0, deadline=clock.now + 3.0, clock=clock)
    assert near.next_sleep() == pytest.approx(3.0)  # not past the wait's end


def test_first_look_after_a_reset_waits_for_the_expected_time() -> None:
    """Right after the reset POST nothing is to be seen: the first GET of the system comes after
    most of the expected reboot time, and it both confirms the restart and ends the POST wait."""
    with bmc_fleet(["supermicro"], reboot_seconds=1.0) as fleet:
        slept: List[float] = []  # the client's waits once the BMC has accepted the reset

        def sleep(seconds: float) -> None:
            # a loaded machine can leave the staging task unfinished at the client's first look,
            # and the client then polls it (0.05 s) before the reset: those waits are not the
            # one under test
            if state(fleet, 0)["resets"]:
                slept.append(seconds)
            time.sleep(seconds)

        report = apply_bios(endpoint(fleet, 0), sample_desired("supermicro"),
                            Timeouts(graceful=10, force=10, boot=20, poll=0.05, reboot=1.0),
                            sleep=sleep)
    assert report["applied"]["ok"] and report["reset"]["sent"] == ["GracefulRestart"]
    assert slept and slept[0] == pytest.approx(0.75, abs=0.05)
    assert report["reset"]["after"] is not None  # the look that showed the restart, handed on
    # the wait for POST, apart from reading the BIOS back (a rollout learns its reboots by it)
    applied = report["applied"]
    assert 0 <= applied["post_seconds"] <= applied["seconds"], applied
