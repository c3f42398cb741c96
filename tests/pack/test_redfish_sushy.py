"""Interop with a Redfish service we did not write: OpenStack's sushy-tools 2.2.0 emulator.

The emulator runs unmodified (libvirt `test:///default`, plain http, HTTP basic auth from an
htpasswd file; it offers no sessions, applies BIOS settings at once and reports no BootProgress,
LastResetTime or PostState; a GracefulRestart keeps PowerState On). Our own simulator stays the
main test bed; this is the independent second opinion. Every test also checks that the client's
request count equals what the emulator's access log shows.

Stand-in: the host side's OS boot id (in a rollout, read through Ansible) is served by
fleet_lab.bmcsim.sushy_lab from the libvirt domain's starts and reboots inside the emulator's
process; the emulator's Redfish code does not see it.
"""
from __future__ import annotations

import pytest

from fleet_lab.bmcsim.sushy_lab import SushyLab, available
from fleet_rollout.errors import KnobError, RedfishError
from fleet_rollout.redfish import bios as rf_bios
from fleet_rollout.redfish import power as rf_power
from fleet_rollout.redfish.client import BmcEndpoint, RedfishSession
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.operations import Timeouts, check_desired, take_snapshot

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lab():
    why = available()
    assert why is None, why + " (make install installs sushy-tools and libvirt-python)"
    with SushyLab(boot_seconds=1.0) as sushy:
        yield sushy


def _endpoint(lab: SushyLab, **kw) -> BmcEndpoint:
    opts = {"allow_http": True, "timeout": 10.0, "backoff": 0.05, "max_backoff": 1.0}
    opts.update(kw)
    return BmcEndpoint("sushy-1", lab.url, lab.username, lab.password, **opts)


class LogWindow:
    """The emulator's access log lines written while the window was open."""

    def __init__(self, lab: SushyLab) -> None:
        self.lab = lab
        self.start = len(lab.access_log())

    def lines(self):
        return self.lab.access_log()[self.start:]

    def count(self, method: str, path_part: str = "") -> int:
        return sum(1 for m, p, _ in self.lines() if m == method and path_part in p)


def _assert_counts_match(window: LogWindow, *counters) -> None:
    total = {}
    for counter in counters:
        for method, n in dict(counter).items():
            total[method] = total.get(method, 0) + n
    logged = {}
    for method, _path, _status in window.lines():
        logged[method] = logged.get(method, 0) + 1
    assert total == logged, (total, window.lines())


def test_login_on_a_service_without_sessions(lab):
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:  # auth auto
        assert session.auth == "basic"
        assert session.get("/redfish/v1/Systems").status == 200
    assert session.requests == {"GET": 2}  # the service root, then the collection; no logout
    assert window.count("POST") == 0 and window.count("DELETE") == 0
    assert not any("SessionService" in p for _, p, _ in window.lines())
    _assert_counts_match(window, session.requests)


def test_session_auth_configured_on_a_service_without_sessions_is_clear(lab):
    with pytest.raises(RedfishError) as err:
        RedfishSession(_endpoint(lab, auth="session")).open()
    assert "offers no sessions" in str(err.value) and "basic" in str(err.value)


def test_wrong_password_is_invalid_credentials_and_secret_free(lab):
    ep = _endpoint(lab)
    ep._password = "Wr0ng-" + lab.password
    with pytest.raises(RedfishError) as err:
        with RedfishSession(ep) as session:
            discover(session)
    text = str(err.value)
    assert "invalid credentials" in text and err.value.status == 401
    assert lab.password not in text and "Wr0ng" not in text


def test_snapshot(lab):
    window = LogWindow(lab)
    snap = take_snapshot(_endpoint(lab))
    assert snap["registry_id"] == "BiosAttributeRegistryP89.v1_0_0"  # found by the document's Id
    assert snap["vendor"] == "generic"
    assert snap["attributes"] == {} and snap["logical"] == {}  # it has no knob attributes
    assert snap["pending"] == {}
    _assert_counts_match(window, snap["requests"])


def test_knob_refused_for_attributes_it_lacks(lab):
    window = LogWindow(lab)
    with pytest.raises(KnobError) as err:
        check_desired(_endpoint(lab), {"snoop_mode": "home"})
    assert "sushy-1" in str(err.value) and "snoop_mode" in str(err.value)
    assert window.count("PATCH") == 0 and window.count("POST") == 0


def _attributes(session, ctx):
    return rf_bios.read_state(session, ctx).current


def test_raw_attribute_change_and_restore(lab):
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:
        ctx = discover(session)
        before = _attributes(session, ctx)
        wanted = {"ProcTurboMode": "Disabled" if before["ProcTurboMode"] == "Enabled"
                  else "Enabled", "SerialNumber": "FLEET-0001"}
        staged = rf_bios.stage(session, ctx, wanted)
        assert staged.changed == wanted
        assert not staged.needs_reset  # sushy-tools applies BIOS settings at once
        assert {k: _attributes(session, ctx)[k] for k in wanted} == wanted
        back = {k: before[k] for k in wanted}
        restored = rf_bios.stage(session, ctx, back)
        assert restored.changed == back
        assert {k: _attributes(session, ctx)[k] for k in wanted} == back
        again = rf_bios.stage(session, ctx, back)  # nothing to do: nothing written
        assert again.writes == 0
    assert window.count("PATCH", "/BIOS/Settings") == 2
    _assert_counts_match(window, session.requests)


@pytest.mark.parametrize("attribute,value,why", [
    ("QuietBoot", "yes", "not true or false"),  # Boolean
    ("NumCores", 15, "read-only"),  # Integer, ReadOnly (bounds 10..20)
    ("SerialNumber", "X" * 17, "MaxLength is 16"),  # String
    ("L2Cache", 512, "not a string"),  # String
    ("EmbeddedSata", "Floppy", "allowed: Ata, Ahci, Raid, Off"),  # Enumeration
    ("SecureBootStatus", "Disabled", "read-only"),
    ("NoSuchAttribute", "x", "not in registry"),
])
def test_registry_type_checks_refuse_before_any_write(lab, attribute, value, why):
    """sushy-tools itself accepts any value (it stored NumCores=99 when asked): our checks are
    the only guard, and they run before the first write."""
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:
        ctx = discover(session)
        with pytest.raises(KnobError) as err:
            rf_bios.stage(session, ctx, {attribute: value})
    assert why in str(err.value) and attribute in str(err.value)
    assert window.count("PATCH") == 0


def test_boolean_stored_as_a_string_is_caught_by_the_read_back(lab):
    """A quirk of sushy-tools 2.2.0: its registry types QuietBoot as Boolean, but it stores every
    attribute as a string (it reports "true", and a written false comes back as "False"). The
    write passes our type check; the read-back refuses to call it done."""
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:
        ctx = discover(session)
        with pytest.raises(RedfishError) as err:
            rf_bios.stage(session, ctx, {"QuietBoot": False})
        assert _attributes(session, ctx)["QuietBoot"] == "False"
    assert "does not show them pending: QuietBoot=False" in str(err.value)
    assert window.count("PATCH") == 1


def _system_id(lab) -> str:
    with RedfishSession(_endpoint(lab)) as session:
        return discover(session).system_uri.rstrip("/").rsplit("/", 1)[-1]


def test_reset_exactly_once_confirmed_by_the_host_boot_id(lab):
    """A warm GracefulRestart: PowerState stays On and the BMC reports no reset evidence; the
    host side (stand-in, see module docstring) shows a new boot id after 1 s of "booting"."""
    system = _system_id(lab)
    boot_before = lab.host_boot_id(system)
    assert boot_before
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:
        ctx = discover(session)
        result = rf_power.reset(session, ctx, graceful_timeout=20, force_timeout=20, poll=0.2,
                                host_boot_id=lambda: lab.host_boot_id(system))
    assert result.sent == ["GracefulRestart"] and not result.escalated
    assert result.evidence == "host boot id changed"
    assert result.before["boot_id"] == boot_before
    assert lab.host_boot_id(system) not in (None, boot_before)
    assert window.count("POST", "ComputerSystem.Reset") == 1
    _assert_counts_match(window, session.requests)


def test_reset_without_any_evidence_is_not_confirmed_and_never_repeated(lab):
    window = LogWindow(lab)
    with RedfishSession(_endpoint(lab)) as session:
        ctx = discover(session)
        with pytest.raises(rf_power.RestartNotConfirmed) as err:
            rf_power.reset(session, ctx, graceful_timeout=1.5, force_timeout=1.5, poll=0.3)
    text = str(err.value)
    assert "restart not confirmed" in text and "no host-side boot id" in text
    assert err.value.result.sent == ["GracefulRestart"]
    assert window.count("POST", "ComputerSystem.Reset") == 1  # no ForceRestart on top
    _assert_counts_match(window, session.requests)


def test_apply_path_over_sushy_counts_match_the_access_log(lab):
    """snapshot + a raw change + restore + one reset, as bench-redfish runs it."""
    from fleet_lab.bmcsim.sushy_lab import interop_cycle

    window = LogWindow(lab)
    counts = interop_cycle(_endpoint(lab), lab, Timeouts(graceful=20, force=20, boot=30,
                                                          poll=0.2))
    assert counts["reset"]["sent"] == ["GracefulRestart"]
    _assert_counts_match(window, counts["requests"])
