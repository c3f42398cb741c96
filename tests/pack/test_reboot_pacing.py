"""The reboot time learned from the hosts already changed paces the next batches' waits:
timeouts.observed_reboot (median reset -> OS back), stored by batch_info in the rollout meta,
read by RolloutContext.timeouts() into Timeouts.reboot (redfish.power.Pacer's `expected`).
The end-to-end part (batch_info storing it during a rollout) is in test_rollout_sim's happy path."""
from __future__ import annotations

from fleet_rollout.config import PackConfig
from fleet_rollout.hoststeps import RolloutContext
from fleet_rollout.profile import load_profile
from fleet_rollout.redfish.power import Pacer
from fleet_rollout.store import MemoryStore, RolloutState
from fleet_rollout.timeouts import observed_reboot


def _host(started: float, at: float, ok: bool = True, needs_reboot: bool = True) -> dict:
    return {"needs_reboot": needs_reboot,
            "steps": {"reboot": {"ok": True, "started": started, "at": started + 5},
                      "wait": {"ok": ok, "started": started + 5, "at": at}}}


def test_observed_reboot_is_the_median_of_changed_hosts():
    hosts = [_host(100, 190), _host(100, 220), _host(100, 400), _host(0, 50)]
    assert observed_reboot(hosts) == 105.0  # (90 + 120) / 2
    assert observed_reboot(hosts[:3]) == 120.0


def _seen(started: float, at: float, post: object) -> dict:
    host = _host(started, at)
    host["steps"]["wait"]["detail"] = {"post_after_reset": post, "boot_id": "b"}
    return host


def test_observed_reboot_is_the_reboot_the_bmcs_showed():
    """The reset to POST seen finished, not to the wait step's end (the OS's start and its
    health check after POST would make every look of the next batch come that much late)."""
    hosts = [_seen(100, 190, 40.0), _seen(100, 220, 50.0), _seen(100, 400, 45.5)]
    assert observed_reboot(hosts) == 45.5
    # a host whose wait step did not record it (an older rollout's) counts its whole span
    assert observed_reboot(hosts[:2] + [_host(0, 80)]) == 50.0
    # a value that is no number of seconds is not taken either
    for bad in (None, True, "40", -3, 0):
        assert observed_reboot([_seen(100, 190, bad)]) == 90.0, bad


def test_observed_reboot_ignores_hosts_without_a_finished_reboot():
    hosts = [_host(100, 190, ok=False), _host(100, 190, needs_reboot=False), {},
             {"steps": {"reboot": {"ok": True, "started": 1}}, "needs_reboot": True},
             {"steps": {"reboot": {"ok": True, "started": "x"}, "wait": {"ok": True, "at": 3}},
              "needs_reboot": True}]
    assert observed_reboot(hosts) is None
    assert observed_reboot(hosts + [_host(10, 70)]) == 60.0


def _context(tmp_path, store) -> RolloutContext:
    profile = load_profile("home-snoop").data
    config = PackConfig(credentials={}, state_dir=str(tmp_path / "state"))
    return RolloutContext(store, "r-1", config, None, plan={"profile": profile})


def test_timeouts_carry_the_learned_reboot(tmp_path):
    store = MemoryStore()
    first = _context(tmp_path, store).timeouts()
    assert first.reboot is None  # first batch: nothing learned, looks spaced from `poll`
    RolloutState(store, "r-1").update_meta(expected_reboot=240.0)
    timeouts = _context(tmp_path, store).timeouts()
    assert timeouts.reboot == 240.0
    assert timeouts.boot == first.boot and timeouts.poll == first.poll
    RolloutState(store, "r-1").update_meta(expected_reboot=True)  # not a number of seconds
    assert _context(tmp_path, store).timeouts().reboot is None


def test_a_learned_reboot_spaces_the_looks():
    now = [0.0]
    pacer = Pacer(2.0, expected=240.0, elapsed=40.0, clock=lambda: now[0])
    assert pacer.next_sleep() == 150.0  # 0.75 x the 200 s still expected
    blind = Pacer(2.0, clock=lambda: now[0])
    assert blind.next_sleep() == 2.0
