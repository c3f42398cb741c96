"""Find what a BMC offers: system, BIOS and settings URIs, manager, personality, registry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession, odata_id
from fleet_rollout.redfish.personalities import Personality, detect, personality
from fleet_rollout.redfish.registry import AttributeRegistry, fetch_registry


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


def attributes_of(doc: Dict[str, Any], flat: bool) -> Dict[str, Any]:
    """BIOS attributes of a Bios/settings payload (HPE iLO 4 puts them at the top level)."""
    if not flat and isinstance(doc.get("Attributes"), dict):
        return dict(doc["Attributes"])
    if isinstance(doc.get("Attributes"), dict):
        return dict(doc["Attributes"])
    skip = {"Id", "Name", "Description", "AttributeRegistry", "Actions", "Links", "Oem",
            "SettingsResult", "Modified", "Type"}
    return {k: v for k, v in doc.items() if not k.startswith("@") and k not in skip}


def discover(session: RedfishSession, vendor: Optional[str] = None) -> BmcContext:
    host = session.host
    systems_uri = odata_id(session.root.get("Systems"))
    if not systems_uri:
        raise RedfishError("service root has no Systems collection", host)
    members = [odata_id(m) for m in session.get(systems_uri).body.get("Members") or []]
    members = [m for m in members if m]
    if len(members) != 1:
        raise RedfishError(f"expected exactly one system under {systems_uri}, found "
                           f"{len(members)}; this BMC manages several systems (not supported)",
                           host)
    system_uri = members[0]
    system = session.get(system_uri).body
    bios_uri = odata_id(system.get("Bios"))
    if not bios_uri:
        raise RedfishError(f"{system_uri} has no Bios resource", host)
    reset = (system.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
    if not reset.get("target"):
        raise RedfishError(f"{system_uri} offers no ComputerSystem.Reset action", host)
    managers = (system.get("Links") or {}).get("ManagedBy") or []
    manager_uri = odata_id(managers[0]) if managers else None
    manager = session.get(manager_uri).body if manager_uri else {}
    detected = detect(session.root, system, manager)
    pers = personality(vendor or detected)
    bios = session.get(bios_uri).body
    settings = (bios.get("@Redfish.Settings") or {}).get("SettingsObject")
    settings_uri = odata_id(settings)
    if not settings_uri:
        raise RedfishError(f"{bios_uri} advertises no @Redfish.Settings.SettingsObject; this "
                           "BMC cannot stage BIOS changes over Redfish", host)
    registry_id = bios.get("AttributeRegistry")
    if not registry_id:
        raise RedfishError(f"{bios_uri} names no AttributeRegistry", host)
    # one registry per model: the same Id from two makers (both copied DMTF's mockup, say) is
    # not the same registry
    model_key = "|".join(str(x) for x in (detected, system.get("Manufacturer"),
                                          system.get("Model"), manager.get("Model")))
    registry = fetch_registry(session, str(registry_id), cache_key=model_key)
    jobs_uri = None
    clear_uri = None
    if pers.dell_jobs and manager_uri:
        jobs_uri = odata_id(((manager.get("Oem") or {}).get("Dell") or {}).get("Jobs")) or (
            manager_uri.rstrip("/") + "/Jobs")
        clear_uri = settings_uri.rstrip("/") + "/Actions/Oem/DellManager.ClearPending"
    return BmcContext(
        host=host, personality=pers, detected=detected, system_uri=system_uri,
        bios_uri=bios_uri, settings_uri=settings_uri, reset_uri=reset["target"],
        registry=registry, reset_types=list(reset.get("ResetType@Redfish.AllowableValues") or []),
        manager_uri=manager_uri, jobs_uri=jobs_uri, clear_pending_uri=clear_uri)
