"""fleet_rollout.probe.verify on recorded probe outputs, one per BIOS state."""
from __future__ import annotations

import copy
import json
from typing import Dict

import locations
import pytest

from fleet_rollout.errors import ConfigError
from fleet_rollout.probe import (
    VerifyPolicy,
    expected_node_count,
    fingerprint_record,
    parse_output,
    verify,
)

FIXTURES = locations.FIXTURES / "probe"

# fixture -> the BIOS state it was recorded in (snoop_mode, node_interleaving, sockets)
RECORDED = {
    "sim-early-interleave-off.json": ("early", "disabled", 2),
    "sim-home-interleave-off.json": ("home", "disabled", 2),
    "sim-osb-interleave-off.json": ("osb", "disabled", 2),
    "sim-cod-interleave-off.json": ("cod", "disabled", 2),
    "sim-home-interleave-on.json": ("home", "enabled", 2),
    "sim-cod-interleave-on.json": ("cod", "enabled", 2),
    "synthetic-2s-xeon-home-off.json": ("home", "disabled", 2),
    "local-real.json": ("home", "enabled", 1),
}
STATES = [(s, i) for s in ("early", "home", "cod", "osb") for i in ("enabled", "disabled")]


def load(name: str) -> Dict:
    return parse_output((FIXTURES / name).read_text(), name)


def test_expected_node_counts() -> None:
    assert expected_node_count("home", "enabled", 2) == 1
    assert expected_node_count("cod", "enabled", 2) == 1
    assert expected_node_count("early", "disabled", 2) == 2
    assert expected_node_count("cod", "disabled", 2) == 4
    assert expected_node_count("osb", "disabled", 4) == 4


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_each_recorded_state_passes_its_own_state(name: str) -> None:
    snoop, interleave, sockets = RECORDED[name]
    doc = load(name)
    result = verify(doc, snoop, interleave, sockets)
    assert result.ok, result.reasons
    assert result.reasons == []
    assert result.numbers["nodes"] == {"expected": expected_node_count(snoop, interleave,
                                                                        sockets),
                                       "seen": doc["topology"]["node_count"]}
    assert json.loads(json.dumps(result.to_dict()))["ok"] is True


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_states_with_another_node_count_fail(name: str) -> None:
    """Every BIOS state that gives another node count is rejected with a node-count reason;
    states with the same node count (early/home/osb) pass: snoop mode is not visible here."""
    _, _, sockets = RECORDED[name]
    doc = load(name)
    for snoop, interleave in STATES:
        result = verify(doc, snoop, interleave, sockets)
        same = expected_node_count(snoop, interleave, sockets) == doc["topology"]["node_count"]
        assert result.ok == same, (snoop, interleave, result.reasons)
        if not same:
            assert any(r.startswith("node count:") for r in result.reasons), result.reasons


def test_sim_outputs_are_modelled_and_say_so() -> None:
    result = verify(load("sim-home-interleave-off.json"), "home", "disabled", 2)
    assert result.numbers["latency_source"] == "model"
    assert result.numbers["ratio_used"] == pytest.approx(2.1)
    assert any("modelled" in n for n in result.notes)


def test_cod_distances() -> None:
    doc = load("sim-cod-interleave-off.json")
    result = verify(doc, "cod", "disabled", 2)
    assert result.numbers["distance_same_socket_max"] == 11
    assert result.numbers["distance_cross_socket_min"] == 21
    bad = copy.deepcopy(doc)
    for i, j in ((0, 1), (1, 0), (2, 3), (3, 2)):
        bad["topology"]["distances"][i][j] = 21
    result = verify(bad, "cod", "disabled", 2)
    assert not result.ok
    assert any("other half of a die" in r for r in result.reasons)


def test_broken_distances() -> None:
    doc = load("synthetic-2s-xeon-home-off.json")
    doc["topology"]["distances"] = [[10, 10], [12, 10]]
    result = verify(doc, "home", "disabled", 2)
    assert "distances: node 0->1 is 10, expected > 10 for a remote node" in result.reasons
    assert any("not symmetric" in r for r in result.reasons)


def test_socket_count_mismatch() -> None:
    result = verify(load("synthetic-2s-xeon-home-off.json"), "home", "disabled", 4)
    assert "sockets: the probe sees 2, the inventory says 4" in result.reasons


def test_interleaving_off_needs_a_clear_ratio() -> None:
    doc = load("synthetic-2s-xeon-home-off.json")
    doc["derived"]["remote_local_ratio"] = doc["derived"]["cross_socket_ratio"] = 1.03
    result = verify(doc, "home", "disabled", 2)
    assert not result.ok
    assert any(r.startswith("latency: remote/local ratio 1.03 is below 1.15")
               for r in result.reasons)
    # on a VM (QEMU lab) every node is the same host memory: a note, unless enforced
    doc["topology"]["virtualized"] = True
    result = verify(doc, "home", "disabled", 2)
    assert result.ok and any("advisory only" in n for n in result.notes)
    result = verify(doc, "home", "disabled", 2, policy=VerifyPolicy(ratio_on_virtual="enforce"))
    assert not result.ok


def test_interleaving_on_needs_one_node_with_every_cpu() -> None:
    doc = load("sim-home-interleave-on.json")
    doc["topology"]["nodes"][0]["cpus"] = [0, 1]
    result = verify(doc, "home", "enabled", 2)
    assert "node 0: holds 2 of 4 CPUs, expected all (interleaving)" in result.reasons


def test_node_spanning_two_sockets_with_interleaving_off() -> None:
    doc = load("sim-home-interleave-off.json")
    doc["topology"]["nodes"][0]["sockets"] = [0, 1]
    result = verify(doc, "home", "disabled", 2)
    assert "node 0: spans sockets [0, 1], expected one" in result.reasons


def test_bad_quality_fails_unless_waived() -> None:
    doc = load("synthetic-2s-xeon-home-off.json")
    doc["quality"]["ok"] = False
    doc["quality"]["warnings"] = ["latency CV 0.400 is above the limit 0.200: unstable host"]
    result = verify(doc, "home", "disabled", 2)
    assert any(r.startswith("probe quality not ok (latency CV 0.400") for r in result.reasons)
    assert verify(doc, "home", "disabled", 2, policy=VerifyPolicy(require_quality=False)).ok


def _control(doc: Dict, host: str, scale: float) -> Dict:
    c = copy.deepcopy(doc)
    c["host"] = host
    for key in ("local_ns", "remote_ns", "cross_socket_ns"):
        c["derived"][key] = round(c["derived"][key] * scale, 2)
    for key in ("within_socket", "across_sockets"):
        c["c2c_ns"][key]["median"] = round(c["c2c_ns"][key]["median"] * scale, 2)
    return c


def test_fingerprint_against_control_hosts() -> None:
    host = load("synthetic-2s-xeon-home-off.json")
    controls = [_control(host, "ctl-1", 0.97), _control(host, "ctl-2", 1.02),
                _control(host, "ctl-3", 1.00)]
    result = verify(host, "home", "disabled", 2, controls=controls)
    assert result.ok, result.reasons
    fp = result.numbers["fingerprint"]
    assert fp["controls_used"] == 3
    assert fp["metrics"]["local_ns"]["outside"] is False
    assert fp["metrics"]["local_ns"]["low"] == pytest.approx(88.75 * 0.97 * 0.9, abs=0.01)
    # a host whose local latency moved (e.g. another snoop mode) is flagged
    odd = _control(host, "odd-1", 1.0)
    odd["derived"]["local_ns"] = 112.0
    result = verify(odd, "home", "disabled", 2, controls=controls)
    assert not result.ok
    assert any(r.startswith("fingerprint: local_ns 112.0 ns is outside the spread of 3 control")
               for r in result.reasons), result.reasons
    assert result.numbers["fingerprint"]["metrics"]["local_ns"]["outside"] is True


def test_fingerprint_leaves_out_unlike_controls() -> None:
    host = load("synthetic-2s-xeon-home-off.json")
    other_model = _control(host, "ctl-amd", 1.5)
    other_model["cpu_model"] = "AMD EPYC 7543"
    modelled = load("sim-home-interleave-off.json")
    one_node = load("sim-home-interleave-on.json")
    result = verify(host, "home", "disabled", 2,
                    controls=[other_model, modelled, one_node, _control(host, "ctl-1", 1.0)])
    assert result.ok
    assert result.numbers["fingerprint"]["controls_used"] == 1
    assert any("ctl-amd left out: CPU model" in n for n in result.notes)
    assert any("skipped, 1 usable control hosts (need 2)" in n for n in result.notes)


def test_fingerprint_records_stand_in_for_whole_documents() -> None:
    host = load("synthetic-2s-xeon-home-off.json")
    docs = [_control(host, f"ctl-{i}", scale) for i, scale in enumerate((0.97, 1.02, 1.0))]
    records = [fingerprint_record(doc, doc["host"], batch=0) for doc in docs]
    assert all(len(json.dumps(r)) < 600 for r in records)
    assert records[0]["batch"] == 0 and records[0]["cpu_model"] == host["cpu_model"]
    odd = _control(host, "odd-1", 1.0)
    odd["c2c_ns"]["across_sockets"]["median"] *= 1.5
    whole, small = verify(odd, "home", "disabled", 2, controls=docs), verify(
        odd, "home", "disabled", 2, controls=records)
    assert whole.numbers["fingerprint"] == small.numbers["fingerprint"]
    assert whole.reasons == small.reasons and not small.ok
    assert "c2c_across_ns" in small.reasons[0]


def test_fingerprint_on_a_virtual_machine_is_advisory_unless_enforced() -> None:
    host = load("synthetic-2s-xeon-home-off.json")
    controls = [_control(host, "ctl-1", 1.0), _control(host, "ctl-2", 1.03)]
    odd = _control(host, "vm-1", 1.0)
    odd["derived"]["local_ns"] = 140.0
    odd["topology"]["virtualized"] = "kvm"
    advisory = verify(odd, "home", "disabled", 2, controls=controls)
    assert advisory.ok, advisory.reasons
    assert any(n.startswith("fingerprint: local_ns 140.0 ns is outside") and
               n.endswith("advisory only on a virtual machine") for n in advisory.notes)
    enforced = verify(odd, "home", "disabled", 2, controls=controls,
                      policy=VerifyPolicy(fingerprint_on_virtual="enforce"))
    assert not enforced.ok
    assert any(r.startswith("fingerprint: local_ns 140.0 ns") for r in enforced.reasons)
    with pytest.raises(ConfigError, match="fingerprint_on_virtual"):
        verify(odd, "home", "disabled", 2, policy=VerifyPolicy(fingerprint_on_virtual="x"))


def test_bad_expected_state_is_a_config_error() -> None:
    doc = load("sim-home-interleave-on.json")
    with pytest.raises(ConfigError, match="snoop_mode: 'cluster' is not one of early, home, "
                                          "cod, osb"):
        verify(doc, "cluster", "enabled", 2)
    with pytest.raises(ConfigError, match="node_interleaving: 'on' is not one of enabled"):
        verify(doc, "home", "on", 2)
    with pytest.raises(ConfigError, match="sockets"):
        verify(doc, "home", "enabled", 0)
    with pytest.raises(ConfigError, match="ratio_on_virtual"):
        verify(doc, "home", "enabled", 2, policy=VerifyPolicy(ratio_on_virtual="maybe"))
