"""Attribute registries: every type's rules (Enumeration, Boolean, Integer, String, Password) and
the lookup of a registry by its document's own Id.

The lookup tests use a stand-in session that serves fixed JSON documents by URI (no HTTP): the
point is which documents are chosen, and that is independent of the transport; the real
transport is covered by test_redfish_sushy (misnamed file entry) and the simulator tests.
"""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout.errors import KnobError, RedfishError
from fleet_rollout.redfish.attribute_registry import _fetch_registry, parse_registry
from fleet_rollout.redfish.bios import check_writable

DOC: Dict[str, Any] = {
    "Id": "BiosAttributeRegistryX.v1_2_0",
    "RegistryEntries": {"Attributes": [
        {"AttributeName": "Mode", "Type": "Enumeration",
         "Value": [{"ValueName": "A"}, {"ValueName": "B"}]},
        {"AttributeName": "Quiet", "Type": "Boolean"},
        {"AttributeName": "Cores", "Type": "Integer", "LowerBound": 2, "UpperBound": 32,
         "ScalarIncrement": 2},
        {"AttributeName": "Tag", "Type": "String", "MinLength": 1, "MaxLength": 8,
         "ValueExpression": "[A-Z0-9-]+"},
        {"AttributeName": "Pw", "Type": "Password", "MaxLength": 4},
        {"AttributeName": "Locked", "Type": "Integer", "Immutable": True},
        {"AttributeName": "Free", "Type": "Integer"},
    ]},
}


@pytest.mark.parametrize("name,value,problem", [
    ("Mode", "A", None),
    ("Mode", "C", "not allowed; allowed: A, B"),
    ("Mode", 1, "not allowed"),
    ("Quiet", True, None),
    ("Quiet", "true", "not true or false"),
    ("Quiet", 1, "not true or false"),
    ("Cores", 2, None),
    ("Cores", 32, None),
    ("Cores", 0, "below LowerBound 2"),
    ("Cores", 34, "above UpperBound 32"),
    ("Cores", 7, "not on ScalarIncrement 2"),
    ("Cores", "8", "not an integer"),
    ("Cores", True, "not an integer"),
    ("Cores", 8.0, "not an integer"),
    ("Free", -5, None),
    ("Tag", "AB-12", None),
    ("Tag", "", "MinLength is 1"),
    ("Tag", "ABCDEFGHI", "MaxLength is 8"),
    ("Tag", "ab", "does not match ValueExpression"),
    ("Tag", 12, "not a string"),
    ("Pw", "abcd", None),
    ("Pw", "abcde", "MaxLength is 4"),
])
def test_every_type_is_checked(name, value, problem):
    attr = parse_registry(DOC).get(name)
    found = attr.check_value(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


class _Ctx:
    host = "h1"

    def __init__(self) -> None:
        self.registry = parse_registry(DOC)


def test_check_writable_names_host_attribute_type_and_rule():
    with pytest.raises(KnobError) as err:
        check_writable(_Ctx(), {"Cores": 40}, {})
    text = str(err.value)
    assert text.startswith("h1:") and "Cores (Integer" in text and "UpperBound 32" in text
    with pytest.raises(KnobError) as err:
        check_writable(_Ctx(), {"Locked": 3}, {})
    assert "immutable" in str(err.value)
    check_writable(_Ctx(), {"Cores": 16, "Quiet": False, "Tag": "R7-01", "Mode": "B"}, {})


class _Endpoint:
    address = "https://bmc.example"


class FakeSession:
    """Stand-in: serves fixed documents by URI and records what was fetched."""

    host = "h1"
    endpoint = _Endpoint()

    def __init__(self, docs: Dict[str, Dict[str, Any]]) -> None:
        self.docs = docs
        self.root = {"Registries": {"@odata.id": "/redfish/v1/Registries"}}
        self.fetched: List[str] = []

    def get(self, uri: str, ok: Any = (200,)) -> Any:
        self.fetched.append(uri)

        class R:
            body = self.docs.get(uri, {})
        return R()


def _listing(*members: str) -> Dict[str, Any]:
    return {"Members": [{"@odata.id": f"/redfish/v1/Registries/{m}"} for m in members]}


def _entry(name: str, registry: str, uri: str) -> Dict[str, Any]:
    return {"Id": name, "Registry": registry, "Location": [{"Language": "en", "Uri": uri}]}


def _doc(doc_id: str) -> Dict[str, Any]:
    return {"Id": doc_id, "RegistryEntries": {"Attributes": [
        {"AttributeName": "Mode", "Type": "Enumeration", "Value": [{"ValueName": "A"}]}]}}


def test_misnamed_file_entry_with_the_right_document_is_found():
    """sushy-tools' shape: the entry is called BiosAttributeRegistry.v1_0_0 / Registry
    BiosAttributeRegistry1.0, the document it points at is BiosAttributeRegistryP89.v1_0_0."""
    session = FakeSession({
        "/redfish/v1/Registries": _listing("Messages", "BiosAttributeRegistry.v1_0_0"),
        "/redfish/v1/Registries/Messages": _entry("Messages", "Base.1.0", "/m"),
        "/m": {"Id": "Base.1.0.0"},
        "/redfish/v1/Registries/BiosAttributeRegistry.v1_0_0": _entry(
            "BiosAttributeRegistry.v1_0_0", "BiosAttributeRegistry1.0", "/bios"),
        "/bios": _doc("BiosAttributeRegistryP89.v1_0_0"),
    })
    registry = _fetch_registry(session, "BiosAttributeRegistryP89.v1_0_0")
    assert registry.id == "BiosAttributeRegistryP89.v1_0_0"
    assert "/m" not in session.fetched  # the closest name was opened first


def test_a_prefix_never_picks_another_version():
    session = FakeSession({
        "/redfish/v1/Registries": _listing("BiosReg.v1_1", "BiosReg.v1_2"),
        "/redfish/v1/Registries/BiosReg.v1_1": _entry("BiosReg.v1_1", "BiosReg.v1_1", "/v11"),
        "/v11": _doc("BiosReg.v1_1"),
        "/redfish/v1/Registries/BiosReg.v1_2": _entry("BiosReg.v1_2", "BiosReg.v1_2", "/v12"),
        "/v12": _doc("BiosReg.v1_2"),
    })
    assert _fetch_registry(session, "BiosReg.v1_2").id == "BiosReg.v1_2"
    # the entry named like the registry is tried first: the collection is not even read
    assert session.fetched == ["/redfish/v1/Registries/BiosReg.v1_2", "/v12"]
    with pytest.raises(RedfishError) as err:
        _fetch_registry(FakeSession({
            "/redfish/v1/Registries": _listing("BiosReg"),
            "/redfish/v1/Registries/BiosReg": _entry("BiosReg", "BiosReg", "/v11"),
            "/v11": _doc("BiosReg.v1_1"),
        }), "BiosReg.v1_2")
    assert "BiosReg.v1_2 not found" in str(err.value) and "BiosReg.v1_1 at /v11" in str(err.value)


def test_an_entry_named_like_the_registry_but_holding_another_falls_back_to_the_collection():
    """The direct guess is only a guess: its document's Id decides, then the collection."""
    session = FakeSession({
        "/redfish/v1/Registries": _listing("BiosReg.v1_2", "Other"),
        "/redfish/v1/Registries/BiosReg.v1_2": _entry("BiosReg.v1_2", "BiosReg.v1_2", "/old"),
        "/old": _doc("BiosReg.v1_1"),
        "/redfish/v1/Registries/Other": _entry("Other", "BiosReg.v1_2", "/v12"),
        "/v12": _doc("BiosReg.v1_2"),
    })
    assert _fetch_registry(session, "BiosReg.v1_2").id == "BiosReg.v1_2"
    assert session.fetched == ["/redfish/v1/Registries/BiosReg.v1_2", "/old",
                               "/redfish/v1/Registries", "/redfish/v1/Registries/Other", "/v12"]


def test_a_registry_id_that_is_no_plain_name_is_never_put_in_a_path():
    session = FakeSession({
        "/redfish/v1/Registries": _listing("Entry"),
        "/redfish/v1/Registries/Entry": _entry("Entry", "x", "/doc"),
        "/doc": _doc("../Bios Reg?x=1"),
    })
    assert _fetch_registry(session, "../Bios Reg?x=1").id == "../Bios Reg?x=1"
    assert session.fetched == ["/redfish/v1/Registries", "/redfish/v1/Registries/Entry", "/doc"]
