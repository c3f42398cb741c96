"""Settings a BMC takes and then does not apply, and changes it aborts (as Ironic and
Metal3 users report): never a false "applied", an error naming the setting and the cause, the host
restored by the restore the rollout runs, and a repeat after the fix that writes and resets
nothing.

Real HTTPS between the real Redfish client and the BMC simulator, every personality:

- value_ignored: the BIOS keeps its own value of one attribute at POST, no message, the job
  completes, the other values apply (a half-applied BIOS);
- invalid_accepted: the settings PATCH answers 200 with an error in @Message.ExtendedInfo for
  one attribute and stages only the others;
- job_aborted (iDRAC): the config job ends Failed ("Job aborted") and the staged values stay
  pending, for whatever job comes next to apply.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import pytest
from redfish_support import FAST, bmc_fleet, endpoint, reset_counters, set_faults, state, writes

from fleet_lab.bmcsim.vendors import VENDOR_KEYS, sample_desired, vendor
from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.operations import Timeouts, apply_bios, restore_bios, take_snapshot

T = Timeouts(**FAST)
VENDORS = list(VENDOR_KEYS)
DELL = ["dell-idrac8", "dell-idrac9"]


@pytest.fixture(scope="module")
def fleet():
    with bmc_fleet(VENDORS) as f:
        yield f


def _change(key: str) -> Tuple[Dict[str, str], str, Dict[str, str]]:
    """The change (logical knobs), the interleave attribute the fault hits, and the attribute
    -> new value the change means on this personality."""
    desired = sample_desired(key)
    spec = vendor(key)
    targets = {}
    for knob, logical in desired.items():
        attr = spec.knob_attribute(knob)
        assert attr is not None
        targets[attr.name] = next(v for v, name in attr.logical.items() if name == logical)
    return desired, spec.knob_attribute("node_interleaving").name, targets


def _knobs(doc: Dict[str, Any], names) -> Dict[str, Any]:
    return {k: doc["current"].get(k) for k in names}


def _restored(fleet, index: int, snap: Dict[str, Any], targets) -> None:
    """The restore the rollout runs for a failed host: back to the snapshot, nothing pending."""
    restore_bios(endpoint(fleet, index), snap, T)
    doc = state(fleet, index)
    assert _knobs(doc, targets) == {k: snap["attributes"][k] for k in targets}
    assert doc["pending"] == {}


def _fixed_then_repeat_is_a_no_op(fleet, index: int, snap, desired, targets, **fault_off
                                  ) -> None:
    """The fix, the change applied, a repeat that writes and resets nothing; then the BMC is
    put back as the test found it (the fleet serves the whole module)."""
    set_faults(fleet, index, **fault_off)
    report = apply_bios(endpoint(fleet, index), desired, T)
    assert report["applied"]["ok"] and _knobs(state(fleet, index), targets) == targets
    reset_counters(fleet, index)
    before = list(state(fleet, index)["resets"])
    again = apply_bios(endpoint(fleet, index), desired, T)
    assert again["reset"] is None and again["stage"]["writes"] == 0
    assert writes(state(fleet, index)) == 0 and state(fleet, index)["resets"] == before
    restore_bios(endpoint(fleet, index), snap, T)


def _apply_fails(fleet, key: str, fault: str, hit_attribute: bool = True):
    """Snapshot, set `fault` (on the interleave attribute, or true), apply the change: it must
    fail naming the host. Returns index, desired, the attribute hit, targets, snapshot, the
    error text and the resets before the apply."""
    index = VENDORS.index(key)
    desired, attribute, targets = _change(key)
    snap = take_snapshot(endpoint(fleet, index))
    set_faults(fleet, index, **{fault: attribute if hit_attribute else True})
    resets = list(state(fleet, index)["resets"])
    with pytest.raises(RedfishError) as err:
        apply_bios(endpoint(fleet, index), desired, T)
    text = str(err.value)
    assert fleet.bmcs[index].name in text
    return index, desired, attribute, targets, snap, text, resets


@pytest.mark.parametrize("key", VENDORS)
def test_a_value_the_bios_ignores_is_named_and_the_host_restored(fleet, key: str):
    index, desired, ignored, targets, snap, text, _ = _apply_fails(fleet, key, "value_ignored")
    assert (f"{ignored} is {snap['attributes'][ignored]!r}, wanted {targets[ignored]!r}"
            in text), text
    doc = state(fleet, index)
    assert doc["current"][ignored] == snap["attributes"][ignored]
    others = sorted(k for k in targets if k != ignored)
    if others:  # half applied: the other value took, and the error says so
        assert f"half applied: {', '.join(others)} took the new value" in text, text
        assert all(doc["current"][k] == targets[k] for k in others)
    _restored(fleet, index, snap, targets)
    _fixed_then_repeat_is_a_no_op(fleet, index, snap, desired, targets, value_ignored=False)


@pytest.mark.parametrize("key", VENDORS)
def test_a_value_refused_in_a_200_answer_is_named_before_any_reset(fleet, key: str):
    index, desired, refused, targets, snap, text, resets = _apply_fails(
        fleet, key, "invalid_accepted")
    assert f"does not show them pending: {refused}={targets[refused]}" in text, text
    assert (f"its answer said: Base.1.8.PropertyValueNotInList (/Attributes/{refused}): "
            f"The value {targets[refused]} for the property {refused} is not supported") in text
    assert "nothing was reset" in text
    doc = state(fleet, index)
    assert doc["resets"] == resets and refused not in doc["pending"]
    assert _knobs(doc, targets) == {k: snap["attributes"][k] for k in targets}
    _restored(fleet, index, snap, targets)  # cancels whatever else was staged
    assert state(fleet, index)["resets"] == resets  # nothing applied: nothing to reset
    _fixed_then_repeat_is_a_no_op(fleet, index, snap, desired, targets, invalid_accepted=False)


@pytest.mark.parametrize("key", DELL)
def test_an_aborted_config_job_is_reported_and_its_pending_values_cancelled(fleet, key: str):
    """The hazard: the values an aborted job left pending would apply with the next job anyone
    creates, weeks later. The restore cancels them; a repeat after the fix applies the change."""
    index, desired, _, targets, snap, text, _ = _apply_fails(fleet, key, "job_aborted",
                                                             hit_attribute=False)
    listing = ", ".join(f"{k}={v}" for k, v in sorted(targets.items()))
    if key == "dell-idrac8":  # a config job of ours
        assert "is Failed: Job aborted" in text, text
    else:  # iDRAC 9 takes an apply time: the job it makes itself is not ours to read
        assert f"still pending after the reset: {listing}" in text, text
    doc = state(fleet, index)
    assert doc["pending"] == targets  # the hazard is there
    assert _knobs(doc, targets) == {k: snap["attributes"][k] for k in targets}
    resets = list(doc["resets"])
    _restored(fleet, index, snap, targets)
    assert state(fleet, index)["resets"] == resets  # cancelled, not applied and undone
    _fixed_then_repeat_is_a_no_op(fleet, index, snap, desired, targets, job_aborted=False)
