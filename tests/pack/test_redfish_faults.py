"""Every injected BMC fault is either recovered or reported as a clear per-host error."""
from __future__ import annotations

import time

import pytest
from redfish_support import (
    FAST,
    bmc_fleet,
    endpoint,
    host_boot_id,
    reset_counters,
    set_faults,
    state,
    writes,
)

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.bios import commit, plan, stage
from fleet_rollout.redfish.client import RedfishSession
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.operations import Timeouts, apply_bios
from fleet_rollout.redfish.power import RestartNotConfirmed, reset, wait_applied

T = Timeouts(**FAST)


@pytest.fixture()
def fleet():
    with bmc_fleet(["dell-idrac8", "generic", "hpe-ilo4", "supermicro"]) as f:
        yield f


def test_latency_and_503_are_ridden_out(fleet):
    set_faults(fleet, 1, latency_ms=50, unavailable=2, retry_after_s=0)
    report = apply_bios(endpoint(fleet, 1), {"snoop_mode": "home"}, T)
    assert report["applied"]["ok"]


def test_bmc_unreachable_for_a_while_then_back(fleet):
    set_faults(fleet, 1, unreachable_s=1.5)
    report = apply_bios(endpoint(fleet, 1, get_retries=6, backoff=0.4), {"snoop_mode": "home"}, T)
    assert report["applied"]["ok"]


def test_bmc_unreachable_too_long_is_a_transient_host_error(fleet):
    set_faults(fleet, 1, unreachable_s=30)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 1, get_retries=2, backoff=0.1), {"snoop_mode": "home"}, T)
    assert err.value.transient and fleet.bmcs[1].name in str(err.value)
    assert state(fleet, 1)["logical"]["snoop_mode"] == "early"


def test_dropped_answer_to_the_settings_patch_is_not_a_double_write(fleet):
    set_faults(fleet, 1, drop_after_write=1)
    report = apply_bios(endpoint(fleet, 1), {"snoop_mode": "home"}, T)
    assert report["applied"]["ok"]
    assert state(fleet, 1)["counters"]["PATCH"] == 1
    assert state(fleet, 1)["counters"]["dropped"] == 1


def test_exactly_one_reset_when_the_connection_drops_after_it_was_accepted(fleet):
    with RedfishSession(endpoint(fleet, 1)) as session:
        ctx = discover(session)
        targets = plan(ctx, {"snoop_mode": "home"})
        staged = stage(session, ctx, targets)
        commit(session, ctx, staged)
        reset_counters(fleet, 1)
        set_faults(fleet, 1, drop_after_write=1)
        result = reset(session, ctx, graceful_timeout=5, force_timeout=5, poll=0.05)
        wait_applied(session, ctx, targets, timeout=30, poll=0.05)
    assert result.answer_lost == 1 and result.sent == ["GracefulRestart"]
    assert state(fleet, 1)["resets"] == ["GracefulRestart"]
    assert state(fleet, 1)["logical"]["snoop_mode"] == "home"


def test_dropped_answer_to_the_dell_job_creation_makes_one_job(fleet):
    with RedfishSession(endpoint(fleet, 0)) as session:
        ctx = discover(session)
        staged = stage(session, ctx, plan(ctx, {"snoop_mode": "home"}))
        set_faults(fleet, 0, drop_after_write=1)
        result = commit(session, ctx, staged)
    assert result.method == "job" and result.job_id
    assert len(state(fleet, 0)["jobs"]) == 1


def test_graceful_restart_ignored_escalates_to_force(fleet):
    set_faults(fleet, 1, ignore_graceful=True)
    report = apply_bios(endpoint(fleet, 1), {"snoop_mode": "home"},
                        Timeouts(graceful=1.0, force=10, boot=30, poll=0.1))
    assert report["reset"]["sent"] == ["GracefulRestart", "ForceRestart"]
    assert report["reset"]["escalated"] is True
    assert state(fleet, 1)["resets"] == ["GracefulRestart", "ForceRestart"]


def test_dell_job_failure_is_reported(fleet):
    set_faults(fleet, 0, job_failure=True)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 0), {"snoop_mode": "home"}, T)
    assert "Failed" in str(err.value) and fleet.bmcs[0].name in str(err.value)
    assert state(fleet, 0)["logical"]["snoop_mode"] == "early"


def test_settings_silently_not_applied_are_caught(fleet):
    set_faults(fleet, 2, settings_not_applied=True)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 2), {"snoop_mode": "home"}, T)
    assert "QpiSnoopConfig is 'EarlySnoop', wanted 'Standard'" in str(err.value)


def test_settings_failed_message_names_the_attribute(fleet):
    set_faults(fleet, 3, settings_failed="NUMA_002A")
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 3), {"snoop_mode": "home", "node_interleaving": "enabled"}, T)
    text = str(err.value)
    assert "SettingsFailed" in text and "/Attributes/NUMA_002A" in text
    assert state(fleet, 3)["current"]["SnoopMode_0027"] == "0x01"  # the other one applied


def _stage_foreign(fleet, index, attrs):
    with RedfishSession(endpoint(fleet, index)) as session:
        ctx = discover(session)
        return stage(session, ctx, attrs)


def test_foreign_pending_change_is_refused_then_cleared_when_asked(fleet):
    _stage_foreign(fleet, 2, {"ProcTurboMode": "Disabled"})
    reset_counters(fleet, 2)
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, 2), {"snoop_mode": "home"}, T)
    assert "ProcTurboMode=Disabled" in str(err.value) and "foreign" in str(err.value)
    assert writes(state(fleet, 2)) == 0
    report = apply_bios(endpoint(fleet, 2), {"snoop_mode": "home"}, T, clear_foreign=True)
    assert report["stage"]["cleared"] == {"ProcTurboMode": "Disabled"}
    assert state(fleet, 2)["current"]["ProcTurboMode"] == "Enabled"
    assert state(fleet, 2)["logical"]["snoop_mode"] == "home"


def test_foreign_dell_job_is_refused_then_deleted_when_asked(fleet):
    with RedfishSession(endpoint(fleet, 0)) as session:
        ctx = discover(session)
        commit(session, ctx, stage(session, ctx, {"ProcTurboMode": "Disabled"}))
    assert len(state(fleet, 0)["jobs"]) == 1
    with pytest.raises(RedfishError):
        apply_bios(endpoint(fleet, 0), {"snoop_mode": "home"}, T)
    report = apply_bios(endpoint(fleet, 0), {"snoop_mode": "home"}, T, clear_foreign=True)
    assert report["stage"]["deleted_jobs"] and report["applied"]["ok"]
    assert state(fleet, 0)["current"]["ProcTurboMode"] == "Enabled"


def test_simulator_rejects_what_real_bmcs_reject(fleet):
    with RedfishSession(endpoint(fleet, 3)) as session:  # Supermicro: no SettingsApplyTime
        ctx = discover(session)
        with pytest.raises(RedfishError) as err:
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"},
                                             "@Redfish.SettingsApplyTime": {
                                                 "ApplyTime": "OnReset"}})
        assert err.value.status == 400
    with RedfishSession(endpoint(fleet, 2)) as session:  # iLO 4: flat body only
        ctx = discover(session)
        with pytest.raises(RedfishError):
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"}})
    with RedfishSession(endpoint(fleet, 0)) as session:  # Dell: no second set with a job queued
        ctx = discover(session)
        commit(session, ctx, stage(session, ctx, {"ProcTurboMode": "Disabled"}))
        with pytest.raises(RedfishError) as err:
            session.patch(ctx.settings_uri, {"Attributes": {"SnoopMode": "HomeSnoop"}})
        assert "already committed" in str(err.value)


# ---------------------------------------------------------------- reset evidence
def _staged_session(fleet, index):
    session = RedfishSession(endpoint(fleet, index))
    session.open()
    ctx = discover(session)
    targets = plan(ctx, {"snoop_mode": "home"})
    commit(session, ctx, stage(session, ctx, targets))
    return session, ctx, targets


def test_warm_restart_without_bmc_evidence_is_confirmed_by_the_host_and_sent_once(fleet):
    """A BMC without BootProgress/LastResetTime/PostState whose restart keeps PowerState On: the
    host side's boot id (stand-in: redfish_support.host_boot_id) confirms it; one reset only."""
    set_faults(fleet, 1, no_reset_evidence=True, warm_reset=True)
    session, ctx, targets = _staged_session(fleet, 1)
    try:
        reset_counters(fleet, 1)
        result = reset(session, ctx, graceful_timeout=5, force_timeout=5, poll=0.05,
                       host_boot_id=host_boot_id(fleet, 1))
        wait_applied(session, ctx, targets, timeout=30, poll=0.05)
    finally:
        session.close()
    assert result.sent == ["GracefulRestart"] and result.evidence == "host boot id changed"
    assert state(fleet, 1)["resets"] == ["GracefulRestart"]
    assert state(fleet, 1)["logical"]["snoop_mode"] == "home"


def test_no_evidence_at_all_is_restart_not_confirmed_never_a_second_reset(fleet):
    set_faults(fleet, 1, no_reset_evidence=True, warm_reset=True)
    session, ctx, _targets = _staged_session(fleet, 1)
    try:
        reset_counters(fleet, 1)
        with pytest.raises(RestartNotConfirmed) as err:
            reset(session, ctx, graceful_timeout=1.0, force_timeout=1.0, poll=0.05)
    finally:
        session.close()
    assert "restart not confirmed" in str(err.value)
    assert state(fleet, 1)["resets"] == ["GracefulRestart"]


def test_host_not_answering_is_no_reason_to_escalate(fleet):
    """The OS may be mid-boot: a host side that does not answer never leads to a ForceRestart."""
    set_faults(fleet, 1, no_reset_evidence=True, ignore_graceful=True)
    session, ctx, _targets = _staged_session(fleet, 1)
    answers = iter(["boot-1"])
    try:
        reset_counters(fleet, 1)
        with pytest.raises(RestartNotConfirmed):
            reset(session, ctx, graceful_timeout=1.0, force_timeout=1.0, poll=0.05,
                  host_boot_id=lambda: next(answers, None))
    finally:
        session.close()
    assert state(fleet, 1)["resets"] == ["GracefulRestart"]


def test_graceful_ignored_escalates_once_when_the_host_runs_on_unrestarted(fleet):
    set_faults(fleet, 1, no_reset_evidence=True, ignore_graceful=True)
    report = apply_bios(endpoint(fleet, 1), {"snoop_mode": "home"},
                        Timeouts(graceful=1.0, force=10, boot=30, poll=0.1),
                        host_boot_id=host_boot_id(fleet, 1))
    assert report["reset"]["sent"] == ["GracefulRestart", "ForceRestart"]
    assert report["reset"]["escalated"] is True
    assert state(fleet, 1)["resets"] == ["GracefulRestart", "ForceRestart"]
    assert report["applied"]["ok"]  # waited for the host's new boot id, not just power On


def test_quick_restart_seen_only_by_bmc_evidence_is_not_escalated(fleet):
    """PowerState Off is never caught between two polls here (warm), but LastResetTime moves."""
    set_faults(fleet, 1, warm_reset=True)
    report = apply_bios(endpoint(fleet, 1), {"snoop_mode": "home"}, T)
    assert report["reset"]["sent"] == ["GracefulRestart"]
    assert report["reset"]["evidence"] in ("LastResetTime moved",
                                           "BootProgress.LastStateTime moved")


def test_a_reset_asked_for_mid_boot_is_judged_against_the_settled_system():
    """Asked while the previous boot is still under way (BootProgress OSBootStarted), the reset
    waits for the OS to run, and the marker it hands the caller to store (the rerun's evidence
    baseline) is the settled one: the end of the earlier boot never counts as the restart."""
    with bmc_fleet(["generic"], reboot_seconds=6.0) as slow:
        session = RedfishSession(endpoint(slow, 0))
        session.open()
        try:
            ctx = discover(session)
            boots = state(slow, 0)["boot_count"]
            session.post(ctx.reset_uri, {"ResetType": "ForceRestart"})  # someone else's boot
            deadline = time.monotonic() + 30
            while state(slow, 0)["boot_state"] != "OSBootStarted":
                assert time.monotonic() < deadline, state(slow, 0)
                time.sleep(0.05)
            stored: list = []
            result = reset(session, ctx, graceful_timeout=30, force_timeout=10, poll=0.1,
                           on_before=stored.append)
            while state(slow, 0)["boot_state"] != "OSRunning":
                assert time.monotonic() < deadline, state(slow, 0)
                time.sleep(0.05)
            # both restarts happened (a GracefulRestart sent mid-boot is ignored by the OS)
            assert state(slow, 0)["boot_count"] == boots + 2
        finally:
            session.close()
    assert [m.last_state for m in stored] == ["OSRunning"]
    assert stored[0].to_dict() == result.before
    assert result.sent == ["GracefulRestart"]
