"""BIOS attribute registries: what a host's BIOS accepts (names, types, values, bounds,
read-only, gray-out).

Bios.AttributeRegistry names the registry; /redfish/v1/Registries lists MessageRegistryFile
resources whose Location[].Uri serves it. The registry is the document whose own `Id` equals the
name the BIOS gives: file entries are only a way to find documents (their Id/Registry names are
tried first, but a misnamed entry does not hide the right document, and a name that merely shares
a prefix never selects another version). Dependencies of type Map can make an attribute
ReadOnly/GrayOut/Hidden depending on other attributes; they are evaluated against the values the
BIOS will have after our change.

check_value() applies the registry's type rules to a value before anything is written:
Enumeration (one of Value[].ValueName), Boolean (a JSON boolean), Integer (an integer within
LowerBound/UpperBound, on the ScalarIncrement grid), String and Password (a string within
MinLength/MaxLength, matching ValueExpression).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession
from fleet_rollout.redfish.shape import Resource, fetch


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
    immutable: bool = False
    lower_bound: Optional[int] = None
    upper_bound: Optional[int] = None
    scalar_increment: Optional[int] = None
    min_length: Optional[int] = None
    max_length: Optional[int] = None
    value_expression: Optional[str] = None

    def value_names(self) -> List[str]:
        return [v for v, _ in self.values]

    def check_value(self, value: Any) -> Optional[str]:
        """Why the registry does not allow `value` for this attribute, or None if it does."""
        kind = self.type
        if kind == "Enumeration":
            if not isinstance(value, str) or value not in self.value_names():
                return (f"value {value!r} not allowed; allowed: "
                        f"{', '.join(self.value_names()) or '(none listed)'}")
            return None
        if kind == "Boolean":
            if not isinstance(value, bool):
                return f"Boolean attribute: value {value!r} is not true or false"
            return None
        if kind == "Integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"Integer attribute: value {value!r} is not an integer"
            if self.lower_bound is not None and value < self.lower_bound:
                return f"value {value} is below LowerBound {self.lower_bound}"
            if self.upper_bound is not None and value > self.upper_bound:
                return f"value {value} is above UpperBound {self.upper_bound}"
            step = self.scalar_increment
            if step and (value - (self.lower_bound or 0)) % step:
                return (f"value {value} is not on ScalarIncrement {step} from "
                        f"{self.lower_bound or 0}")
            return None
        if kind in ("String", "Password"):
            if not isinstance(value, str):
                return f"{kind} attribute: value {value!r} is not a string"
            if self.min_length is not None and len(value) < self.min_length:
                return f"value is {len(value)} characters, MinLength is {self.min_length}"
            if self.max_length is not None and len(value) > self.max_length:
                return f"value is {len(value)} characters, MaxLength is {self.max_length}"
            if self.value_expression:
                try:
                    if re.fullmatch(self.value_expression, value) is None:
                        return f"value {value!r} does not match ValueExpression " \
                               f"{self.value_expression!r}"
                except re.error:
                    pass  # a pattern Python cannot read: the BMC checks it itself
            return None
        return f"attribute type {kind!r} is not one this tool writes"


@dataclass
class AttributeRegistry:
    id: str
    attributes: Dict[str, AttributeDef]
    dependencies: List[Dict[str, Any]] = field(default_factory=list)

    def get(self, name: str) -> Optional[AttributeDef]:
        return self.attributes.get(name)

    def _rules_that_hold(self, name: str, values: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The Map dependencies on `name` whose conditions hold for these values (one that
        reads an attribute `values` lack is left out: stage() checks again with every value
        the BIOS shows)."""
        out = []
        for dep in self.dependencies:
            rule = dep.get("Dependency") or {}
            if dep.get("Type", "Map") != "Map" or rule.get("MapToAttribute") != name:
                continue
            if _known(rule, values) and _conditions_hold(rule.get("MapFrom") or [], values):
                out.append(rule)
        return out

    def effective(self, name: str, values: Dict[str, Any]) -> AttributeDef:
        """The attribute's definition with Map dependencies applied for these attribute values."""
        base = self.attributes[name]
        out = replace(base, values=list(base.values))
        for rule in self._rules_that_hold(name, values):
            prop, target = rule.get("MapToProperty"), rule.get("MapToValue")
            if prop == "ReadOnly":
                out.read_only = bool(target)
            elif prop == "GrayOut":
                out.gray_out = bool(target)
            elif prop == "Hidden":
                out.hidden = bool(target)
        return out

    def locked_by(self, name: str, values: Dict[str, Any]) -> List[str]:
        """What makes `name` read-only or grayed out for these values, as "attribute=value" of
        the conditions of the Map dependencies that hold (empty: nothing does)."""
        out: List[str] = []
        for rule in self._rules_that_hold(name, values):
            if rule.get("MapToProperty") not in ("ReadOnly", "GrayOut") or not rule.get(
                    "MapToValue"):
                continue
            for term in rule.get("MapFrom") or []:
                source = term.get("MapFromAttribute")
                cause = f"{source}={values.get(source)}"
                if cause not in out:
                    out.append(cause)
        return out


def _known(rule: Dict[str, Any], values: Dict[str, Any]) -> bool:
    """Whether `values` hold every attribute the rule's conditions read."""
    return all(term.get("MapFromAttribute") in values for term in rule.get("MapFrom") or [])


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


def parse_registry(doc: Dict[str, Any], host: Optional[str] = None,
                   uri: str = "attribute registry") -> AttributeRegistry:
    """The registry document as typed definitions; RedfishError naming the field otherwise."""
    res = Resource(doc, host, uri)
    registry_id = res.text("Id") or ""
    entries = res.obj("RegistryEntries")
    if not isinstance(entries.raw("Attributes"), list):
        raise RedfishError(f"attribute registry {registry_id!r} ({uri}): "
                           "RegistryEntries.Attributes missing or not a list", host)
    attributes: Dict[str, AttributeDef] = {}
    for item in entries.objects("Attributes"):
        attr = _parse_attribute(item)
        attributes[attr.name] = attr
    deps = [_parse_dependency(dep) for dep in entries.objects("Dependencies")]
    return AttributeRegistry(registry_id, attributes, deps)


def _parse_attribute(item: Resource) -> AttributeDef:
    name = item.text("AttributeName")
    if not name:
        raise item.missing("AttributeName", "a non-empty string")
    values = []
    for value in item.objects("Value"):
        value_name = value.text("ValueName")
        if value_name is None:
            continue  # an entry without a name cannot be chosen
        values.append((value_name, value.text("ValueDisplayName") or value_name))
    return AttributeDef(
        name=name, display_name=item.text("DisplayName") or "",
        type=item.text("Type") or "Enumeration", values=values,
        read_only=item.flag("ReadOnly", False), gray_out=item.flag("GrayOut", False),
        hidden=item.flag("Hidden", False), reset_required=item.flag("ResetRequired", True),
        immutable=item.flag("Immutable", False),
        lower_bound=item.integer("LowerBound"), upper_bound=item.integer("UpperBound"),
        scalar_increment=item.integer("ScalarIncrement"),
        min_length=item.integer("MinLength"), max_length=item.integer("MaxLength"),
        value_expression=item.text("ValueExpression") or None)


def _parse_dependency(dep: Resource) -> Dict[str, Any]:
    """One Dependencies entry with every field type-checked (effective() relies on it)."""
    rule = dep.obj("Dependency")
    terms = []
    for term in rule.objects("MapFrom"):
        terms.append({"MapFromAttribute": term.text("MapFromAttribute"),
                      "MapFromCondition": term.text("MapFromCondition") or "EQU",
                      "MapFromValue": term.scalar("MapFromValue"),
                      "MapTerms": term.text("MapTerms") or "AND"})
    return {"Type": dep.text("Type") or "Map",
            "Dependency": {"MapFrom": terms, "MapToAttribute": rule.text("MapToAttribute"),
                           "MapToProperty": rule.text("MapToProperty"),
                           "MapToValue": rule.scalar("MapToValue")}}


_CACHE: Dict[Tuple[str, str], AttributeRegistry] = {}
_PLAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_CACHE_MAX = 64
_CACHE_LOCK = threading.Lock()
_FETCHING: Dict[Tuple[str, str], threading.Lock] = {}  # key -> lock held while one fetches it


def fetch_registry(session: RedfishSession, registry_id: str,
                   cache_key: Optional[str] = None) -> AttributeRegistry:
    """The attribute registry `registry_id` of this service.

    A registry id names one version of one vendor's registry, so hosts of the same model share
    it: with a cache_key (personality, maker and model: two makers may reuse an Id, as DMTF's
    mockup and sushy-tools do), it is fetched once per process.
    """
    key = (cache_key or session.endpoint.address, registry_id)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    with _CACHE_LOCK:
        lock = _FETCHING.setdefault(key, threading.Lock())
    # sessions of the same model at once (a fleet in a thread pool) wait for one fetch instead of
    # all fetching it; if that fetch fails, the next one tries on its own
    with lock:
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        registry = _fetch_registry(session, registry_id)
        with _CACHE_LOCK:
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = registry
            _FETCHING.pop(key, None)
    return registry


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.lower(), b.lower()):
        if x != y:
            break
        n += 1
    return n


def _member_rank(registry_id: str, member: str) -> Tuple[int, int]:
    """Which file entries to open first: the one named like the registry, then the longest
    shared prefix. Only an order: the document's own Id decides."""
    name = member.rstrip("/").rsplit("/", 1)[-1]
    return (0 if name == registry_id else 1), -_common_prefix(registry_id, name)


def _fetch_registry(session: RedfishSession, registry_id: str) -> AttributeRegistry:
    root = Resource(session.root, session.host, "/redfish/v1/")
    registries_uri = root.link("Registries") or "/redfish/v1/Registries"
    seen: List[str] = []
    opened: Dict[str, bool] = {}

    def open_entry(entry: Resource) -> Optional[AttributeRegistry]:
        for uri in _location_uris(entry):
            if uri in opened:
                continue
            opened[uri] = True
            doc = fetch(session, uri, ok=(200, 404))
            doc_id = doc.text("Id") or ""
            if doc_id == registry_id:
                return parse_registry(doc.body, session.host, uri)
            seen.append(f"{doc_id or '(no Id)'} at {uri}")
            break  # other languages of the same entry hold the same registry
        return None

    # most services name the file entry after the registry (DSP0266 mockups, iLO, iDRAC): try it
    # first, which saves reading the collection; only the document's own Id decides, and the
    # collection is searched when the guess is absent or holds another registry
    direct = registries_uri.rstrip("/") + "/" + registry_id
    if _PLAIN_ID.match(registry_id):
        found = open_entry(fetch(session, direct, ok=(200, 404)))
        if found is not None:
            return found
    members = [m for m in fetch(session, registries_uri).members()
               if m.rstrip("/") != direct]
    members.sort(key=lambda m: _member_rank(registry_id, m))
    for member in members:
        found = open_entry(fetch(session, member))
        if found is not None:
            return found
    found = "; found: " + ", ".join(seen) if seen else ""
    raise RedfishError(f"attribute registry {registry_id} not found under {registries_uri} (no "
                       f"registry document with that Id{found})", session.host)


def _location_uris(entry: Resource) -> List[str]:
    """Location[].Uri of a registry file entry, English first (ArchiveUri/PublicationUri are
    not served by the BMC)."""
    locations = entry.objects("Location")
    locations.sort(key=lambda loc: 0 if (loc.text("Language") or "").startswith("en") else 1)
    return [uri for uri in (loc.uri_text("Uri") for loc in locations) if uri]
