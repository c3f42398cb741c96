"""Vendor personalities: how the logical knobs map onto each vendor's BIOS attributes.

Logical knobs (what profiles say):
  snoop_mode         early | home | cod | osb
  node_interleaving  enabled | disabled

Each personality names candidate attributes and values; the host's own attribute registry decides
which exist. Values match on ValueName or ValueDisplayName, ignoring case and punctuation, so
Supermicro's coded values ("0x01" shown as "Home Snoop") resolve too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import ConfigError, KnobError
from fleet_rollout.redfish.attribute_registry import AttributeDef, AttributeRegistry
from fleet_rollout.redfish.shape import Resource

KNOBS: Dict[str, Tuple[str, ...]] = {
    "snoop_mode": ("early", "home", "cod", "osb"),
    "node_interleaving": ("enabled", "disabled"),
}


def validate_desired(desired: Dict[str, Any], where: str = "bios") -> Dict[str, str]:
    """Check a profile's logical BIOS state; ConfigError naming the field on bad input."""
    if not isinstance(desired, dict) or not desired:
        raise ConfigError(f"{where}: expected a mapping of BIOS knobs, e.g. "
                          "{snoop_mode: home, node_interleaving: disabled}")
    out: Dict[str, str] = {}
    for knob, value in desired.items():
        if knob not in KNOBS:
            raise ConfigError(f"{where}.{knob}: unknown BIOS knob; known: {', '.join(KNOBS)}")
        text = str(value).strip().lower()
        if text not in KNOBS[knob]:
            raise ConfigError(f"{where}.{knob}: {value!r} is not one of "
                              f"{', '.join(KNOBS[knob])}")
        out[knob] = text
    return out


@dataclass(frozen=True)
class KnobMapping:
    attributes: Tuple[str, ...]  # exact names or full-match regexes, in order of preference
    values: Dict[str, Tuple[str, ...]]  # logical value -> candidate names / display names


@dataclass(frozen=True)
class Personality:
    key: str
    title: str
    knobs: Dict[str, KnobMapping]
    flat_body: bool = False
    # job | apply_time_or_job | apply_time_if_supported | reset  (see bios.commit)
    commit: str = "reset"
    dell_jobs: bool = False
    post_state_oem: Optional[str] = None  # "Hp" | "Hpe": Oem.<x>.PostState instead of BootProgress
    # the settings object lists only pending attributes (iDRAC): whatever it lists is pending,
    # even where /Bios already shows the same value (some firmware shows pending values there
    # before the config job ran)
    settings_pending_only: bool = False
    # a system profile that locks processor and memory settings unless it has this value
    # (Dell: SysProfile other than Custom); named when settings did not apply
    profile_lock: Optional[Tuple[str, str]] = None
    notes: List[str] = field(default_factory=list)


_SNOOP_DMTF = KnobMapping(
    ("SnoopMode", "ProcSnoopMode"),
    {"early": ("EarlySnoop", "Early Snoop"), "home": ("HomeSnoop", "Home Snoop"),
     "cod": ("ClusterOnDie", "Cluster on Die", "COD"),
     "osb": ("OpportunisticSnoopBroadcast", "Opportunistic Snoop Broadcast", "OSB")})
_ENABLED = {"enabled": ("Enabled", "Enable"), "disabled": ("Disabled", "Disable")}
_INVERTED = {"enabled": ("Disabled", "Disable"), "disabled": ("Enabled", "Enable")}

PERSONALITIES: Dict[str, Personality] = {
    p.key: p for p in [
        Personality("dell-idrac8", "Dell 13G (iDRAC 8)",
                    {"snoop_mode": _SNOOP_DMTF,
                     "node_interleaving": KnobMapping(("NodeInterleave",), _ENABLED)},
                    commit="job", dell_jobs=True, settings_pending_only=True,
                    profile_lock=("SysProfile", "Custom")),
        Personality("dell-idrac9", "Dell 14G+ (iDRAC 9)",
                    {"node_interleaving": KnobMapping(("NodeInterleave",), _ENABLED)},
                    commit="apply_time_or_job", dell_jobs=True, settings_pending_only=True,
                    profile_lock=("SysProfile", "Custom"),
                    notes=["no snoop mode on 14G+ (SubNumaCluster is a separate knob)"]),
        Personality("hpe-ilo4", "HPE Gen9 (iLO 4)",
                    {"snoop_mode": KnobMapping(
                        ("QpiSnoopConfig",),
                        {"early": ("EarlySnoop",), "home": ("Standard", "HomeSnoop"),
                         "cod": ("ClusterOnDie",)}),
                     "node_interleaving": KnobMapping(("NodeInterleaving",), _ENABLED)},
                    flat_body=True, post_state_oem="Hp"),
        Personality("hpe-ilo5", "HPE Gen10 (iLO 5)",
                    {"node_interleaving": KnobMapping(("NodeInterleaving",), _ENABLED)},
                    post_state_oem="Hpe",
                    notes=["no snoop mode on Gen10 (SubNumaClustering is a separate knob)"]),
        Personality("lenovo-xcc", "Lenovo XClarity Controller",
                    {"snoop_mode": KnobMapping(("Processors_SNC",), {"cod": ("Enabled",)}),
                     "node_interleaving": KnobMapping(
                         ("Memory_SocketInterleave",),
                         {"enabled": ("NonNUMA", "Non-NUMA"), "disabled": ("NUMA",)})}),
        Personality("supermicro", "Supermicro",
                    {"snoop_mode": KnobMapping(
                        (r"SnoopMode(_[0-9A-Fa-f]+)?", r"SNCSnoopMode(_[0-9A-Fa-f]+)?"),
                        {"early": ("Early Snoop",), "home": ("Home Snoop",),
                         "cod": ("COD", "Cluster on Die"),
                         "osb": ("Home Snoop with OSB", "OSB")}),
                     "node_interleaving": KnobMapping((r"NUMA(_[0-9A-Fa-f]+)?",), _INVERTED)},
                    notes=["NUMA Enabled means node interleaving disabled"]),
        Personality("generic", "DMTF generic",
                    {"snoop_mode": _SNOOP_DMTF,
                     "node_interleaving": KnobMapping(("NodeInterleaving", "NodeInterleave"),
                                                      _ENABLED)},
                    commit="apply_time_if_supported"),
    ]
}


def personality(key: str) -> Personality:
    try:
        return PERSONALITIES[key]
    except KeyError:
        raise ConfigError(f"unknown BMC vendor {key!r}; known: "
                          f"{', '.join(sorted(PERSONALITIES))}") from None


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _find_attribute(mapping: KnobMapping, registry: AttributeRegistry) -> Optional[AttributeDef]:
    for pattern in mapping.attributes:
        if pattern in registry.attributes:
            return registry.attributes[pattern]
        regex = re.compile(pattern)
        for name in sorted(registry.attributes):
            if regex.fullmatch(name):
                return registry.attributes[name]
    return None


def _match_value(attr: AttributeDef, candidates: Tuple[str, ...]) -> Optional[str]:
    wanted = [_norm(c) for c in candidates]
    for want in wanted:  # candidate order is preference order
        for name, display in attr.values:
            if _norm(name) == want or _norm(display) == want:
                return name
    return None


def supported_values(pers: Personality, registry: AttributeRegistry, knob: str) -> List[str]:
    mapping = pers.knobs.get(knob)
    attr = _find_attribute(mapping, registry) if mapping else None
    if attr is None:
        return []
    return [v for v, cands in mapping.values.items() if _match_value(attr, cands)]


@dataclass(frozen=True)
class KnobTarget:
    knob: str
    logical: str
    attribute: str
    value: str


def resolve(pers: Personality, registry: AttributeRegistry, knob: str, logical: str,
            host: Optional[str] = None) -> KnobTarget:
    """The attribute and ValueName that give `knob = logical` on this host, or KnobError."""
    mapping = pers.knobs.get(knob)
    attr = _find_attribute(mapping, registry) if mapping else None
    if attr is None:
        tried = ", ".join(mapping.attributes) if mapping else "none for this vendor"
        raise KnobError(f"BIOS knob {knob} is not available on this {pers.title} host: its "
                        f"registry {registry.id} has no attribute for it (looked for: {tried})",
                        host)
    candidates = mapping.values.get(logical, ())
    value = _match_value(attr, candidates) if candidates else None
    if value is None:
        allowed = supported_values(pers, registry, knob)
        raise KnobError(f"{knob}={logical} is not possible: attribute {attr.name} allows "
                        f"{', '.join(attr.value_names())} (as {knob}: "
                        f"{', '.join(allowed) or 'none'})", host)
    return KnobTarget(knob, logical, attr.name, value)


def to_logical(pers: Personality, registry: AttributeRegistry, knob: str,
               raw_value: Any) -> Optional[str]:
    """Logical value of a raw attribute value (None when it has no logical meaning)."""
    mapping = pers.knobs.get(knob)
    attr = _find_attribute(mapping, registry) if mapping else None
    if attr is None or raw_value is None:
        return None
    for logical, candidates in mapping.values.items():
        if _match_value(attr, candidates) == str(raw_value):
            return logical
    return None


def knob_attribute(pers: Personality, registry: AttributeRegistry, knob: str) -> Optional[str]:
    mapping = pers.knobs.get(knob)
    attr = _find_attribute(mapping, registry) if mapping else None
    return attr.name if attr else None


def _as_resource(doc: Any, what: str) -> Resource:
    return doc if isinstance(doc, Resource) else Resource(doc if doc is not None else {}, None,
                                                          what)


def detect(root: Any, system: Any, manager: Any) -> str:
    """Personality key from the service root, the system and its manager (dicts or Resources;
    a field of the wrong type is a RedfishError naming it)."""
    root_r = _as_resource(root, "/redfish/v1/")
    system_r = _as_resource(system, "system")
    manager_r = _as_resource(manager, "manager")
    oem = set(root_r.obj("Oem").body) | set(system_r.obj("Oem").body)
    maker = " ".join(x for x in (root_r.text("Vendor"), system_r.text("Manufacturer")) if x)
    maker_l = maker.lower()
    model = system_r.text("Model") or ""
    mgr_model = manager_r.text("Model") or ""
    firmware = manager_r.text("FirmwareVersion") or ""
    if "Dell" in oem or "dell" in maker_l:
        return _dell_generation(model, mgr_model, firmware)
    if "Hp" in oem or "Hpe" in oem or maker_l.startswith(("hp", "hewlett")):
        if "iLO 4" in mgr_model or "Gen9" in model or ("Hp" in oem and "Hpe" not in oem):
            return "hpe-ilo4"
        return "hpe-ilo5"
    if "Lenovo" in oem or "lenovo" in maker_l:
        return "lenovo-xcc"
    if "Supermicro" in oem or "supermicro" in maker_l:
        return "supermicro"
    return "generic"


def _dell_generation(model: str, mgr_model: str, firmware: str) -> str:
    gen = re.search(r"(\d\d)G", mgr_model)
    if gen:
        return "dell-idrac8" if int(gen.group(1)) <= 13 else "dell-idrac9"
    pe = re.search(r"[RTMC]\d(\d)\d", model)  # PowerEdge R630 -> 3 -> 13G
    if pe:
        return "dell-idrac8" if int(pe.group(1)) <= 3 else "dell-idrac9"
    major = re.match(r"(\d+)\.", firmware)
    return "dell-idrac8" if major and int(major.group(1)) <= 2 else "dell-idrac9"
