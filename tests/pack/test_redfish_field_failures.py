"""Field-reported BMC failure modes: no false "applied", a clear per-host error, and
a repeat run after the fix that writes nothing and resets nothing.

Real HTTPS between the real Redfish client and the BMC simulator; each failure mode is a
fault of the simulator's personality that has it in the field (iDRAC here):

- pending_shown_early: /Bios shows pending values as current before they applied, so a
  check of /Bios alone says "applied" too early;
- job_stuck: the config job stays Scheduled through every reset, nothing applies.
"""
from __future__ import annotations

import pytest
from redfish_support import FAST, bmc_fleet, endpoint, reset_counters, set_faults, state, writes

from fleet_rollout.errors import KnobError, RedfishError
from fleet_rollout.redfish.bios import commit, plan, stage
from fleet_rollout.redfish.client import RedfishSession
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.operations import Timeouts, apply_bios
from fleet_rollout.redfish.power import reset, wait_applied

T = Timeouts(**FAST)
DELL = ["dell-idrac8", "dell-idrac9"]
WANT = {"node_interleaving": "enabled"}


@pytest.fixture()
def fleet():
    with bmc_fleet(DELL) as f:
        yield f


def _stage_and_commit(fleet, index: int) -> None:
    """What a first attempt did before it was killed: staged and committed, no reset."""
    with RedfishSession(endpoint(fleet, index)) as session:
        ctx = discover(session)
        staged = stage(session, ctx, plan(ctx, WANT))
        commit(session, ctx, staged)


def _repeat_is_a_no_op(fleet, index: int) -> None:
    reset_counters(fleet, index)
    before = list(state(fleet, index)["resets"])
    report = apply_bios(endpoint(fleet, index), WANT, T)
    assert report["reset"] is None and report["stage"]["writes"] == 0
    assert report["commit"]["method"] == "none"
    assert writes(state(fleet, index)) == 0
    assert state(fleet, index)["resets"] == before


def test_a_config_job_stuck_in_scheduled_is_an_error_not_applied(fleet):
    set_faults(fleet, 0, job_stuck=True)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 0), WANT, T)
    text = str(err.value)
    assert fleet.bmcs[0].name in text
    assert "still Scheduled after the reset" in text and "NodeInterleave" in text
    doc = state(fleet, 0)
    assert doc["current"]["NodeInterleave"] == "Disabled"  # nothing applied
    assert [j["state"] for j in doc["jobs"]] == ["Scheduled"]
    # the fix (the job runs again): the same change on a repeat applies with one more reset,
    # reusing the job already there, and a repeat after that changes nothing
    set_faults(fleet, 0, job_stuck=False)
    reset_counters(fleet, 0)
    report = apply_bios(endpoint(fleet, 0), WANT, T)
    assert report["applied"]["ok"] and report["commit"]["writes"] == 0  # the job was reused
    assert state(fleet, 0)["current"]["NodeInterleave"] == "Enabled"
    _repeat_is_a_no_op(fleet, 0)


def test_bios_showing_pending_values_early_is_not_taken_for_applied(fleet):
    set_faults(fleet, 0, pending_shown_early=True, job_stuck=True)
    for _attempt in range(2):  # a repeat run must not believe /Bios either
        with pytest.raises(RedfishError) as err:
            apply_bios(endpoint(fleet, 0), WANT, T)
        text = str(err.value)
        assert "still pending after the reset: NodeInterleave=Enabled" in text, text
        assert "still Scheduled after the reset" in text
        assert state(fleet, 0)["current"]["NodeInterleave"] == "Disabled"
    set_faults(fleet, 0, job_stuck=False)
    report = apply_bios(endpoint(fleet, 0), WANT, T)
    assert report["applied"]["ok"]
    assert state(fleet, 0)["current"]["NodeInterleave"] == "Enabled"
    _repeat_is_a_no_op(fleet, 0)


@pytest.mark.parametrize("index", [0, 1], ids=DELL)
def test_a_resume_between_commit_and_reset_still_resets(fleet, index: int):
    """/Bios already shows the staged value (pending_shown_early): the resumed run must see
    it pending and reset, not report it in effect."""
    set_faults(fleet, index, pending_shown_early=True)
    _stage_and_commit(fleet, index)
    doc = state(fleet, index)
    assert doc["pending"] == {"NodeInterleave": "Enabled"} and doc["resets"] == []
    report = apply_bios(endpoint(fleet, index), WANT, T)
    assert report["stage"]["already"] == {"NodeInterleave": "Enabled"}  # staged before
    assert report["reset"] is not None and report["applied"]["ok"]
    doc = state(fleet, index)
    assert doc["current"]["NodeInterleave"] == "Enabled" and doc["pending"] == {}
    assert len(doc["resets"]) == 1
    _repeat_is_a_no_op(fleet, index)


def test_an_ignored_apply_time_is_reported_then_a_job_applies_it(fleet):
    """iDRAC 9 firmware that accepts @Redfish.SettingsApplyTime and ignores it: nothing applies
    at the reset. The repeat run finds its values pending and commits them with a config job."""
    set_faults(fleet, 1, apply_time_ignored=True)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 1), WANT, T)
    assert "still pending after the reset: NodeInterleave=Enabled" in str(err.value)
    assert fleet.bmcs[1].name in str(err.value)
    assert state(fleet, 1)["current"]["NodeInterleave"] == "Disabled"
    report = apply_bios(endpoint(fleet, 1), WANT, T)  # the same firmware: a job this time
    assert report["stage"]["writes"] == 0 and report["commit"]["method"] == "job"
    assert report["applied"]["ok"] and state(fleet, 1)["current"]["NodeInterleave"] == "Enabled"
    _repeat_is_a_no_op(fleet, 1)


OTHERS = ["hpe-ilo4", "hpe-ilo5", "lenovo-xcc", "supermicro", "generic"]


@pytest.fixture()
def others():
    with bmc_fleet(OTHERS) as f:
        yield f


@pytest.mark.parametrize("index", range(len(OTHERS)), ids=OTHERS)
def test_values_left_pending_through_the_reset_are_named(others, index: int):
    """Staged values that stay pending through the reset, no job, no message."""
    with RedfishSession(endpoint(others, index)) as session:
        targets = plan(discover(session), WANT)
    set_faults(others, index, pending_never_applied=True)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(others, index), WANT, T)
    text = str(err.value)
    listing = ", ".join(f"{k}={v}" for k, v in sorted(targets.items()))
    assert f"still pending after the reset: {listing}" in text, text
    assert "settings not in effect after reset" in text and others.bmcs[index].name in text
    before = state(others, index)
    assert all(before["current"][k] != v for k, v in targets.items())
    set_faults(others, index, pending_never_applied=False)  # the fix
    report = apply_bios(endpoint(others, index), WANT, T)
    assert report["stage"]["writes"] == 0  # its own pending values, found again
    assert report["applied"]["ok"]
    assert all(state(others, index)["current"][k] == v for k, v in targets.items())
    _repeat_is_a_no_op(others, index)


def _set_profile(fleet, index: int, profile: str) -> None:
    """An operator's change of the system profile, applied the way any BIOS change is."""
    targets = {"SysProfile": profile}
    with RedfishSession(endpoint(fleet, index)) as session:
        ctx = discover(session)
        commit(session, ctx, stage(session, ctx, targets))
        reset(session, ctx, graceful_timeout=5, force_timeout=5, poll=0.05)
        wait_applied(session, ctx, targets, timeout=30, poll=0.05)
    assert state(fleet, index)["current"]["SysProfile"] == profile


@pytest.mark.parametrize("index", [0, 1], ids=DELL)
def test_a_setting_the_system_profile_locks_is_refused_before_any_write(fleet, index: int):
    _set_profile(fleet, index, "PerfOptimized")
    reset_counters(fleet, index)
    with pytest.raises(KnobError) as err:
        apply_bios(endpoint(fleet, index), WANT, T)
    text = str(err.value)
    assert "NodeInterleave is read-only on this host while SysProfile=PerfOptimized" in text
    assert "nothing was written" in text and fleet.bmcs[index].name in text
    assert writes(state(fleet, index)) == 0 and state(fleet, index)["resets"] == []


@pytest.mark.parametrize("index", [0, 1], ids=DELL)
def test_an_undeclared_profile_lock_is_caught_after_the_reset_and_named(fleet, index: int):
    """Older firmware: the registry does not say what the profile locks; the PATCH is accepted,
    the job completes, the value never changes."""
    set_faults(fleet, index, undeclared_locks=True)
    _set_profile(fleet, index, "PerfOptimized")
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, index), WANT, T)
    text = str(err.value)
    assert "NodeInterleave is 'Disabled', wanted 'Enabled'" in text
    assert "SysProfile is PerfOptimized: this system profile locks" in text
    assert state(fleet, index)["current"]["NodeInterleave"] == "Disabled"
    _set_profile(fleet, index, "Custom")  # the fix
    report = apply_bios(endpoint(fleet, index), WANT, T)
    assert report["applied"]["ok"] and state(fleet, index)["current"]["NodeInterleave"] == "Enabled"
    _repeat_is_a_no_op(fleet, index)
