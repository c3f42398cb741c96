"""The simulator is a live service, not a mockup: its payloads use only properties that DMTF's
CSDL schemas (in tests/fixtures/redfish_csdl) define for the declared @odata.type version, and
carry no mockup-only @Redfish.Copyright."""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from functools import lru_cache
from typing import Set, Tuple

import pytest
from locations import ROOT
from redfish_support import bmc_fleet

from fleet_lab.bmcsim import payloads
from fleet_lab.bmcsim.vendors import VENDOR_KEYS

# DMTF's CSDL files of the types the simulator serves (from DMTF's Redfish schema bundle,
# BSD-licensed: tests/fixtures/redfish_csdl/LICENSE-DMTF.md)
CSDL = os.path.join(ROOT, "tests", "fixtures", "redfish_csdl")
EDM = "{http://docs.oasis-open.org/odata/ns/edm}"


def _version(ns: str) -> Tuple[int, ...]:
    part = ns.split(".")[-1]
    if not part.startswith("v"):
        return (0,)
    return tuple(int(x) for x in part[1:].split("_"))


@lru_cache(maxsize=None)
def _schemas(family: str):
    path = os.path.join(CSDL, f"{family}_v1.xml")
    if not os.path.exists(path):
        path = os.path.join(CSDL, f"{family}.xml")
    return list(ET.parse(path).getroot().iter(f"{EDM}Schema"))


def properties(qualified: str) -> Set[str]:
    """Properties of e.g. ComputerSystem.v1_13_0.ComputerSystem incl. earlier versions/bases."""
    parts = qualified.split(".")
    family, type_name = parts[0], parts[-1]
    limit = _version(".".join(parts[:-1])) if len(parts) == 3 else (99,)
    names: Set[str] = set()
    bases = []
    for schema in _schemas(family):
        ns = schema.get("Namespace", "")
        if len(parts) == 3 and _version(ns) > limit:
            continue
        for kind in ("EntityType", "ComplexType"):
            for node in schema.findall(f"{EDM}{kind}"):
                if node.get("Name") != type_name:
                    continue
                for prop in node:
                    if prop.tag in (f"{EDM}Property", f"{EDM}NavigationProperty"):
                        names.add(prop.get("Name"))
                if node.get("BaseType"):
                    bases.append(node.get("BaseType"))
    for base in bases:
        if base.split(".")[0] != family or base.split(".")[-1] != type_name:
            names |= properties(base)
    return names


def _check(doc, where):
    kind = doc.get("@odata.type", "")
    assert "@Redfish.Copyright" not in json.dumps(doc), where
    if not kind.startswith("#") or kind.split(".")[0][1:] in ("HpBios", "DellJob",
                                                               "DellJobCollection"):
        return 0  # vendor OEM types: not in the DMTF CSDL
    allowed = properties(kind[1:])
    assert allowed, f"{where}: no CSDL for {kind}"
    unknown = [k for k in doc if "@" not in k and k not in allowed]
    assert not unknown, f"{where} ({kind}): properties not in the schema: {unknown}"
    return 1


@pytest.mark.parametrize("vendor", VENDOR_KEYS)
def test_payloads_follow_the_dmtf_schemas(vendor):
    with bmc_fleet([vendor]) as fleet:
        bmc = fleet.bmcs[0]
        docs = {
            "root": payloads.service_root(bmc), "systems": payloads.systems(bmc),
            "system": payloads.system(bmc), "bios": payloads.bios(bmc),
            "settings": payloads.settings(bmc), "registries": payloads.registries(bmc),
            "registry_file": payloads.registry_file(bmc),
            "registry": payloads.attribute_registry(bmc), "managers": payloads.managers(bmc),
            "manager": payloads.manager(bmc), "session_service": payloads.session_service(bmc),
            "sessions": payloads.sessions(bmc),
        }
        checked = sum(_check(doc, name) for name, doc in docs.items())
    assert checked >= 10


def test_checker_catches_an_unknown_property():
    with pytest.raises(AssertionError):
        _check({"@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem", "Id": "1",
                "NotARedfishProperty": 1}, "probe")
    with pytest.raises(AssertionError):  # BootProgress is newer than v1_0_0
        _check({"@odata.type": "#ComputerSystem.v1_0_0.ComputerSystem", "BootProgress": {}},
               "probe")
