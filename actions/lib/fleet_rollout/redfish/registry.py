"""BIOS attribute registries: what a host's BIOS accepts (names, values, read-only, gray-out).

Bios.AttributeRegistry names the registry; /redfish/v1/Registries lists MessageRegistryFile
resources whose Location[].Uri serves it. Dependencies of type Map can make an attribute
ReadOnly/GrayOut/Hidden depending on other attributes; they are evaluated against the values the
BIOS will have after our change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession, odata_id


@dataclass
class AttributeDef:
    name: str
    display_name: str = ""
    type: str = "Enumeration"
    values: List[Tuple[str, str]] = field(default_factory=list)  # (ValueName, ValueDisplayName)
    read_only: bool = False
    gray_out: bool = False
    hidden: bool = False
    reset_required: bool = True

    def value_names(self) -> List[str]:
        return [v for v, _ in self.values]


@dataclass
class AttributeRegistry:
    id: str
    attributes: Dict[str, AttributeDef]
    dependencies: List[Dict[str, Any]] = field(default_factory=list)

    def get(self, name: str) -> Optional[AttributeDef]:
        return self.attributes.get(name)

    def effective(self, name: str, values: Dict[str, Any]) -> AttributeDef:
        """The attribute's definition with Map dependencies applied for these attribute values."""
        base = self.attributes[name]
        out = AttributeDef(base.name, base.display_name, base.type, list(base.values),
                           base.read_only, base.gray_out, base.hidden, base.reset_required)
        for dep in self.dependencies:
            if dep.get("Type", "Map") != "Map":
                continue
            rule = dep.get("Dependency") or {}
            if rule.get("MapToAttribute") != name:
                continue
            if not _conditions_hold(rule.get("MapFrom") or [], values):
                continue
            prop, target = rule.get("MapToProperty"), rule.get("MapToValue")
            if prop == "ReadOnly":
                out.read_only = bool(target)
            elif prop == "GrayOut":
                out.gray_out = bool(target)
            elif prop == "Hidden":
                out.hidden = bool(target)
        return out


_CONDITIONS = {
    "EQU": lambda a, b: a == b,
    "NEQ": lambda a, b: a != b,
    "GTR": lambda a, b: a is not None and b is not None and a > b,
    "GEQ": lambda a, b: a is not None and b is not None and a >= b,
    "LSS": lambda a, b: a is not None and b is not None and a < b,
    "LEQ": lambda a, b: a is not None and b is not None and a <= b,
}


def _conditions_hold(terms: List[Dict[str, Any]], values: Dict[str, Any]) -> bool:
    result: Optional[bool] = None
    for term in terms:
        compare = _CONDITIONS.get(str(term.get("MapFromCondition", "EQU")), _CONDITIONS["EQU"])
        try:
            holds = bool(compare(values.get(term.get("MapFromAttribute")),
                                 term.get("MapFromValue")))
        except TypeError:
            holds = False
        joiner = term.get("MapTerms", "AND")
        if result is None:
            result = holds
        elif joiner == "OR":
            result = result or holds
        else:
            result = result and holds
    return bool(result)


def parse_registry(doc: Dict[str, Any], host: Optional[str] = None) -> AttributeRegistry:
    entries = (doc.get("RegistryEntries") or {})
    raw = entries.get("Attributes")
    if not isinstance(raw, list):
        raise RedfishError(f"attribute registry {doc.get('Id')!r}: RegistryEntries.Attributes "
                           "missing or not a list", host)
    attributes: Dict[str, AttributeDef] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not item.get("AttributeName"):
            raise RedfishError(f"attribute registry {doc.get('Id')!r}: entry {index} has no "
                               "AttributeName", host)
        values = []
        for value in item.get("Value") or []:
            if isinstance(value, dict) and "ValueName" in value:
                values.append((str(value["ValueName"]),
                               str(value.get("ValueDisplayName") or value["ValueName"])))
        attributes[item["AttributeName"]] = AttributeDef(
            name=item["AttributeName"], display_name=str(item.get("DisplayName") or ""),
            type=str(item.get("Type") or "Enumeration"), values=values,
            read_only=bool(item.get("ReadOnly", False)), gray_out=bool(item.get("GrayOut", False)),
            hidden=bool(item.get("Hidden", False)),
            reset_required=bool(item.get("ResetRequired", True)))
    deps = [d for d in entries.get("Dependencies") or [] if isinstance(d, dict)]
    return AttributeRegistry(str(doc.get("Id") or ""), attributes, deps)


_CACHE: Dict[Tuple[str, str], AttributeRegistry] = {}
_CACHE_MAX = 64


def fetch_registry(session: RedfishSession, registry_id: str,
                   cache_key: Optional[str] = None) -> AttributeRegistry:
    """The attribute registry `registry_id` of this service.

    A registry id names one version of one vendor's registry, so hosts of the same model share
    it: with a cache_key (the vendor personality), it is fetched once per process.
    """
    key = (cache_key or session.endpoint.address, registry_id)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    registry = _fetch_registry(session, registry_id)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = registry
    return registry


def _fetch_registry(session: RedfishSession, registry_id: str) -> AttributeRegistry:
    registries_uri = odata_id(session.root.get("Registries")) or "/redfish/v1/Registries"
    listing = session.get(registries_uri).body
    members = [odata_id(m) for m in listing.get("Members") or []]
    members = [m for m in members if m]
    # the member named after the registry first; then every other one
    members.sort(key=lambda m: 0 if registry_id.split(".")[0] in m else 1)
    for member in members:
        entry = session.get(member).body
        names = {str(entry.get("Registry") or ""), str(entry.get("Id") or "")}
        if registry_id not in names and not any(n and registry_id.startswith(n) for n in names):
            continue
        locations = entry.get("Location") or []
        locations.sort(key=lambda loc: 0 if str(loc.get("Language", "")).startswith("en") else 1)
        for location in locations:
            uri = location.get("Uri")
            if uri:
                return parse_registry(session.get(uri).body, session.host)
        raise RedfishError(f"registry {registry_id} at {member} has no Location Uri the BMC "
                           "serves itself", session.host)
    raise RedfishError(f"attribute registry {registry_id} not found under {registries_uri}",
                       session.host)
