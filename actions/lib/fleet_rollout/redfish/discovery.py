"""Find what a BMC offers: system, BIOS and settings URIs, manager, personality, registry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.attribute_registry import AttributeRegistry, fetch_registry
from fleet_rollout.redfish.client import RedfishSession
from fleet_rollout.redfish.personalities import Personality, detect, personality
from fleet_rollout.redfish.shape import Resource, fetch


@dataclass
class BmcContext:
    host: str
    personality: Personality
    detected: str  # what the service itself looks like (may differ from an override)
    system_uri: str
    bios_uri: str
    settings_uri: str
    reset_uri: str
    registry: AttributeRegistry
    reset_types: List[str] = field(default_factory=list)
    manager_uri: Optional[str] = None
    jobs_uri: Optional[str] = None
    clear_pending_uri: Optional[str] = None

    def summary(self) -> Dict[str, Any]:
        return {"host": self.host, "vendor": self.personality.key, "detected": self.detected,
                "system": self.system_uri, "bios": self.bios_uri, "settings": self.settings_uri,
                "registry": self.registry.id}


_NOT_ATTRIBUTES = {"Id", "Name", "Description", "AttributeRegistry", "Actions", "Links", "Oem",
                   "SettingsResult", "Modified", "Type"}


def attributes_of(doc: Dict[str, Any], flat: bool, host: Optional[str] = None,
                  uri: str = "BIOS resource") -> Dict[str, Any]:
    """BIOS attributes of a Bios/settings payload (HPE iLO 4 puts them at the top level, `flat`;
    a payload without `Attributes` is read that way whatever the personality says).

    Every value must be a scalar (string, number, boolean, null); RedfishError otherwise."""
    res = Resource(doc, host, uri)
    if res.has("Attributes"):
        return res.scalars("Attributes")
    top = Resource({k: v for k, v in doc.items()
                    if not k.startswith("@") and k not in _NOT_ATTRIBUTES}, host, uri)
    return top.scalars_here()


def _single_system(session: RedfishSession, systems_uri: str) -> str:
    members = fetch(session, systems_uri).members()
    if len(members) != 1:
        raise RedfishError(f"expected exactly one system under {systems_uri}, found "
                           f"{len(members)}; this BMC manages several systems (not supported)",
                           session.host)
    return members[0]


def _reset_action(system: Resource) -> Tuple[str, List[str]]:
    """(target URI, allowed reset types) of the system's ComputerSystem.Reset action."""
    reset = system.obj("Actions").obj("#ComputerSystem.Reset")
    target = reset.uri_text("target")
    if not target:
        raise RedfishError(f"{system.uri} offers no ComputerSystem.Reset action", system.host)
    return target, reset.texts("ResetType@Redfish.AllowableValues")


def _manager(session: RedfishSession, system: Resource) -> Tuple[Optional[str], Resource]:
    """The first manager of the system, and its resource (empty when it names none)."""
    managers = system.obj("Links").links("ManagedBy")
    if not managers:
        return None, Resource({}, session.host, "(no manager)")
    return managers[0], fetch(session, managers[0])


def _settings_uri(bios: Resource) -> str:
    settings_uri = bios.obj("@Redfish.Settings").link("SettingsObject")
    if not settings_uri:
        raise RedfishError(f"{bios.uri} advertises no @Redfish.Settings.SettingsObject; this "
                           "BMC cannot stage BIOS changes over Redfish", bios.host)
    return settings_uri


def _dell_jobs(manager_uri: str, manager: Resource, settings_uri: str) -> Tuple[str, str]:
    """(jobs collection URI, ClearPending action URI) of a Dell iDRAC."""
    jobs_uri = manager.obj("Oem").obj("Dell").link("Jobs") or (
        manager_uri.rstrip("/") + "/Jobs")
    return jobs_uri, settings_uri.rstrip("/") + "/Actions/Oem/DellManager.ClearPending"


def discover(session: RedfishSession, vendor: Optional[str] = None) -> BmcContext:
    host = session.host
    root = Resource(session.root, host, "/redfish/v1/")
    systems_uri = root.link("Systems")
    if not systems_uri:
        raise RedfishError("service root has no Systems collection", host)
    system_uri = _single_system(session, systems_uri)
    system = fetch(session, system_uri)
    bios_uri = system.link("Bios")
    if not bios_uri:
        raise RedfishError(f"{system_uri} has no Bios resource", host)
    reset_uri, reset_types = _reset_action(system)
    manager_uri, manager = _manager(session, system)
    detected = detect(root, system, manager)
    pers = personality(vendor or detected)
    bios = fetch(session, bios_uri)
    settings_uri = _settings_uri(bios)
    registry_id = bios.text("AttributeRegistry")
    if not registry_id:
        raise RedfishError(f"{bios_uri} names no AttributeRegistry", host)
    # one registry per model and BIOS version: the same Id from two makers (both copied DMTF's
    # mockup, say) is not the same registry, nor is it across BIOS versions (what a profile
    # locks, say, is declared by newer ones only)
    model_key = "|".join(str(x) for x in (detected, system.text("Manufacturer"),
                                          system.text("Model"), manager.text("Model"),
                                          system.text("BiosVersion")))
    registry = fetch_registry(session, registry_id, cache_key=model_key)
    jobs_uri = None
    clear_uri = None
    if pers.dell_jobs and manager_uri:
        jobs_uri, clear_uri = _dell_jobs(manager_uri, manager, settings_uri)
    return BmcContext(
        host=host, personality=pers, detected=detected, system_uri=system_uri,
        bios_uri=bios_uri, settings_uri=settings_uri, reset_uri=reset_uri,
        registry=registry, reset_types=reset_types,
        manager_uri=manager_uri, jobs_uri=jobs_uri, clear_pending_uri=clear_uri)
