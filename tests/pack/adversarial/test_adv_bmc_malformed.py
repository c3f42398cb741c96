"""Adversarial: a BMC that answers malformed JSON, over real HTTPS from the BMC simulator.

Each case is an answer the review found to raise AttributeError/KeyError/TypeError (the host then
stayed "running" and the plan precheck died with a traceback). Now every one is a RedfishError
naming the host, the resource URI and the field, and the plan precheck lists it per host.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterator, Tuple

import pytest
from redfish_support import (
    PASSWORD,
    bmc_fleet,
    bmc_uris,
    clear_overrides,
    data_writes,
    endpoint,
    real_document,
    serve_override,
    state,
)

from fleet_lab.bmcsim.fleet import BmcFleet
from fleet_rollout.errors import RedfishError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import precheck_hosts
from fleet_rollout.redfish import attribute_registry as rf_registry
from fleet_rollout.redfish.client import MAX_BODY_BYTES, RedfishSession
from fleet_rollout.redfish.operations import check_desired, take_snapshot

DESIRED = {"node_interleaving": "disabled"}


@pytest.fixture(scope="module")
def lab() -> Iterator[BmcFleet]:
    with bmc_fleet(["generic", "dell-idrac8"]) as fleet:
        yield fleet


@pytest.fixture(autouse=True)
def _clean(lab: BmcFleet) -> Iterator[None]:
    rf_registry._CACHE.clear()
    yield
    for index in range(len(lab.bmcs)):
        clear_overrides(lab, index)
    rf_registry._CACHE.clear()


def _mutated(lab: BmcFleet, index: int, key: str, change: Any) -> Tuple[str, Dict[str, Any]]:
    path = bmc_uris(lab, index)[key]
    doc = copy.deepcopy(real_document(lab, index, path))
    change(doc)
    serve_override(lab, index, path, doc)
    return path, doc


def _refused(lab: BmcFleet, index: int, *words: str) -> str:
    ep = endpoint(lab, index, get_retries=0)
    with pytest.raises(RedfishError) as err:
        check_desired(ep, DESIRED)
    text = str(err.value)
    assert text.startswith(f"{lab.bmcs[index].name}: "), text
    assert PASSWORD not in text
    for word in words:
        assert word in text, text
    assert data_writes(state(lab, index)) == 0
    return text


def test_actions_as_a_list_names_the_field(lab: BmcFleet) -> None:
    path, _ = _mutated(lab, 0, "system", lambda d: d.__setitem__("Actions", [1, 2]))
    _refused(lab, 0, path, "field Actions", "an array, expected an object")


def test_links_as_a_string_on_the_service_root(lab: BmcFleet) -> None:
    _mutated(lab, 0, "root", lambda d: d.__setitem__("Links", "Sessions"))
    _refused(lab, 0, "/redfish/v1/", "field Links", "a string, expected an object")


def test_redfish_settings_as_a_list(lab: BmcFleet) -> None:
    path, _ = _mutated(lab, 0, "bios", lambda d: d.__setitem__("@Redfish.Settings", ["x"]))
    _refused(lab, 0, path, "@Redfish.Settings")


def test_members_not_a_list(lab: BmcFleet) -> None:
    path, _ = _mutated(lab, 0, "systems", lambda d: d.__setitem__("Members", {"a": 1}))
    _refused(lab, 0, path, "field Members", "expected an array")


def test_member_without_odata_id(lab: BmcFleet) -> None:
    _mutated(lab, 0, "systems", lambda d: d.__setitem__("Members", [{"id": "/x"}]))
    _refused(lab, 0, "Members[0].@odata.id", "missing")


def test_attributes_not_an_object(lab: BmcFleet) -> None:
    path, _ = _mutated(lab, 0, "bios", lambda d: d.__setitem__("Attributes", ["NodeInterleave"]))
    _refused(lab, 0, path, "field Attributes")


def test_attribute_value_of_the_wrong_type(lab: BmcFleet) -> None:
    def change(doc: Dict[str, Any]) -> None:
        name = sorted(doc["Attributes"])[0]
        doc["Attributes"][name] = {"nested": True}
    path, _ = _mutated(lab, 0, "bios", change)
    _refused(lab, 0, path, "Attributes.", "expected a string, number, boolean or null")


def test_registry_flag_as_a_string_is_not_read_as_true(lab: BmcFleet) -> None:
    def change(doc: Dict[str, Any]) -> None:
        doc["RegistryEntries"]["Attributes"][0]["ReadOnly"] = "false"
    path, _ = _mutated(lab, 0, "registry_json", change)
    _refused(lab, 0, path, "ReadOnly", "expected true or false")


def test_registry_dependency_of_the_wrong_shape(lab: BmcFleet) -> None:
    def change(doc: Dict[str, Any]) -> None:
        doc["RegistryEntries"]["Dependencies"] = [{"Dependency": ["MapFrom"], "Type": "Map"}]
    _mutated(lab, 0, "registry_json", change)
    _refused(lab, 0, "Dependencies[0].Dependency")


def test_bogus_odata_id_is_never_requested(lab: BmcFleet) -> None:
    _mutated(lab, 0, "system", lambda d: d["Bios"].__setitem__(
        "@odata.id", "https://evil.example/redfish/v1/Bios"))
    before = state(lab, 0)["counters"].get("GET", 0)
    _refused(lab, 0, "Bios.@odata.id", "not an absolute path")
    # discovery stopped at the bad link: root, Systems, the system, nothing after
    assert state(lab, 0)["counters"].get("GET", 0) - before <= 3


def test_dotdot_odata_id_is_refused(lab: BmcFleet) -> None:
    _mutated(lab, 0, "system", lambda d: d["Bios"].__setitem__(
        "@odata.id", "/redfish/v1/../../etc/passwd"))
    _refused(lab, 0, "Bios.@odata.id", "'..'")


def test_wrong_scalar_type(lab: BmcFleet) -> None:
    path, _ = _mutated(lab, 0, "bios", lambda d: d.__setitem__("AttributeRegistry", 42))
    _refused(lab, 0, path, "field AttributeRegistry", "a number, expected a string")


def test_non_json_body(lab: BmcFleet) -> None:
    path = bmc_uris(lab, 0)["system"]
    serve_override(lab, 0, path, raw="<html>login</html>", )
    _refused(lab, 0, path, "not JSON")


def test_body_that_is_an_array(lab: BmcFleet) -> None:
    path = bmc_uris(lab, 0)["bios"]
    serve_override(lab, 0, path, body=[{"Attributes": {}}])
    _refused(lab, 0, path, "an array, expected a JSON object")


def test_absurdly_nested_body(lab: BmcFleet) -> None:
    path = bmc_uris(lab, 0)["system"]
    serve_override(lab, 0, path, raw="[" * 200_000 + "]" * 200_000)
    _refused(lab, 0, path, "not JSON")


def test_huge_body_is_refused_while_reading(lab: BmcFleet) -> None:
    path = bmc_uris(lab, 0)["system"]
    doc = real_document(lab, 0, path)
    serve_override(lab, 0, path, body=doc, pad_bytes=MAX_BODY_BYTES + 1)
    _refused(lab, 0, path, f"larger than {MAX_BODY_BYTES} bytes")


def test_dell_job_list_of_strings(lab: BmcFleet) -> None:
    _mutated(lab, 1, "jobs", lambda d: d.__setitem__("Members", ["JID_1"]))
    _refused(lab, 1, "Members[0]", "a string, expected a link object")


def test_power_state_of_the_wrong_type_in_snapshot_and_boot_marker(lab: BmcFleet) -> None:
    from fleet_rollout.redfish.power import boot_marker

    path, doc = _mutated(lab, 0, "system", lambda d: d.__setitem__("BootProgress", "OSRunning"))
    with pytest.raises(RedfishError, match="field BootProgress"):
        boot_marker(doc, None, "h1", path)
    ep = endpoint(lab, 0, get_retries=0)
    take_snapshot(ep)  # the snapshot does not read BootProgress: it still works


def test_task_monitor_answer_of_the_wrong_shape(lab: BmcFleet) -> None:
    from fleet_rollout.redfish.client import Response

    path = "/redfish/v1/TaskService/TaskMonitors/fake"
    serve_override(lab, 0, path, body={"TaskState": ["Exception"]})
    with RedfishSession(endpoint(lab, 0, get_retries=0), sleep=lambda s: None) as session:
        with pytest.raises(RedfishError, match="field TaskState"):
            session.wait_task(Response(202, {"location": path}, None, ""))
        with pytest.raises(RedfishError, match="another server"):
            session.wait_task(Response(202, {"location": "https://evil.example" + path}, None,
                                       ""))
    assert data_writes(state(lab, 0)) == 0


def test_plan_precheck_lists_the_host_instead_of_a_traceback(lab: BmcFleet) -> None:
    _mutated(lab, 0, "system", lambda d: d.__setitem__("Actions", "reset"))
    hosts = [FleetHost(b.name, lab.url(i)) for i, b in enumerate(lab.bmcs)]
    endpoints = {b.name: endpoint(lab, i, get_retries=0) for i, b in enumerate(lab.bmcs)}
    result = precheck_hosts(hosts, lambda h: check_desired(endpoints[h.name], DESIRED))
    bad, good = lab.bmcs[0].name, lab.bmcs[1].name
    assert "error" in result[bad] and "field Actions" in result[bad]["error"]
    assert "internal error" not in result[bad]["error"]
    assert "compliant" in result[good]


def test_plan_precheck_safety_net_turns_any_exception_into_the_host_error() -> None:
    def check(host: FleetHost) -> Dict[str, Any]:
        if host.name == "h1":
            raise KeyError("Actions")
        return {"compliant": True}

    result = precheck_hosts([FleetHost("h1", "https://a"), FleetHost("h2", "https://b")], check)
    assert result["h1"] == {"error": "internal error while reading the BMC: KeyError: 'Actions'"}
    assert result["h2"] == {"compliant": True}
