"""Each vendor personality end to end against the BMC simulator: real HTTPS, the real
python-redfish-library, the simulator's vendor URIs and quirks."""
from __future__ import annotations

import pytest
from redfish_support import FAST, bmc_fleet, endpoint, reset_counters, state, writes

from fleet_lab.bmcsim.vendors import VENDOR_KEYS, sample_desired
from fleet_rollout.errors import ConfigError, KnobError
from fleet_rollout.redfish.operations import Timeouts, apply_bios, check_desired, restore_bios
from fleet_rollout.redfish.personalities import validate_desired


@pytest.fixture(scope="module")
def fleet():
    with bmc_fleet(VENDOR_KEYS) as f:
        yield f


@pytest.mark.parametrize("index,vendor", list(enumerate(VENDOR_KEYS)))
def test_apply_verify_reapply_restore(fleet, index, vendor):
    ep = endpoint(fleet, index)
    desired = sample_desired(vendor)
    before = state(fleet, index)["logical"]
    report = apply_bios(ep, desired, Timeouts(**FAST))
    assert report["vendor"] == vendor
    assert report["applied"]["ok"] is True
    assert state(fleet, index)["logical"] == {**before, **desired}
    assert state(fleet, index)["resets"][-1] == "GracefulRestart"
    assert state(fleet, index)["sessions_active"] == 0

    # a second apply changes nothing: zero writes, no reset
    reset_counters(fleet, index)
    again = apply_bios(ep, desired, Timeouts(**FAST))
    assert again["stage"]["writes"] == 0 and again["reset"] is None
    doc = state(fleet, index)
    assert writes(doc) == 0 and doc["resets"] == []

    restored = restore_bios(ep, report["snapshot"], Timeouts(**FAST))
    assert restored["applied"]["ok"] is True
    assert state(fleet, index)["logical"] == before
    assert state(fleet, index)["sessions_active"] == 0


@pytest.mark.parametrize("index,vendor", list(enumerate(VENDOR_KEYS)))
def test_vendor_detected_from_service(fleet, index, vendor):
    result = check_desired(endpoint(fleet, index), {"node_interleaving": "disabled"})
    assert result["vendor"] == vendor


def test_knob_missing_on_host_is_refused_before_any_write(fleet):
    index = VENDOR_KEYS.index("hpe-ilo5")  # Gen10: no snoop mode attribute
    reset_counters(fleet, index)
    with pytest.raises(KnobError) as err:
        apply_bios(endpoint(fleet, index), {"snoop_mode": "home"}, Timeouts(**FAST))
    text = str(err.value)
    assert fleet.bmcs[index].name in text and "snoop_mode" in text
    assert writes(state(fleet, index)) == 0


def test_value_the_host_cannot_take_names_allowed_values(fleet):
    index = VENDOR_KEYS.index("hpe-ilo4")  # QpiSnoopConfig has no OSB value
    reset_counters(fleet, index)
    with pytest.raises(KnobError) as err:
        apply_bios(endpoint(fleet, index), {"snoop_mode": "osb"}, Timeouts(**FAST))
    text = str(err.value)
    assert "QpiSnoopConfig" in text and "Standard" in text and "EarlySnoop" in text
    assert fleet.bmcs[index].name in text
    assert writes(state(fleet, index)) == 0


def test_supermicro_coded_values_and_inverted_numa(fleet):
    index = VENDOR_KEYS.index("supermicro")
    result = check_desired(endpoint(fleet, index), {"snoop_mode": "home",
                                                    "node_interleaving": "enabled"})
    assert result["targets"] == {"SnoopMode_0027": "0x01", "NUMA_002A": "Disable"}


def test_vendor_override_per_host(fleet):
    index = VENDOR_KEYS.index("generic")
    with pytest.raises(KnobError):  # forced to a personality whose attributes this host lacks
        check_desired(endpoint(fleet, index, vendor="lenovo-xcc"),
                      {"node_interleaving": "enabled"})


@pytest.mark.parametrize("bad,field", [
    ({"snoop_mode": "fast"}, "bios.snoop_mode"),
    ({"numa": "on"}, "bios.numa"),
    ({}, "bios"),
])
def test_bad_desired_state_is_a_config_error(bad, field):
    with pytest.raises(ConfigError) as err:
        validate_desired(bad)
    assert field in str(err.value)
