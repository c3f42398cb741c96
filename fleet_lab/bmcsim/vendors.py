"""Vendor personalities of the simulated BMCs: URIs, BIOS attribute registries and quirks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

# (ValueName, ValueDisplayName)
Values = List[Tuple[str, str]]


@dataclass(frozen=True)
class AttributeSpec:
    name: str
    display_name: str
    values: Values
    default: str
    read_only: bool = False
    gray_out: bool = False
    # logical meaning, for the host hook: which knob and value each ValueName stands for
    knob: Optional[str] = None
    logical: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VendorSpec:
    key: str
    manufacturer: str
    model: str
    manager_model: str
    firmware: str
    system_id: str
    manager_id: str
    bios_path: str  # relative to the system URI
    settings_path: str  # relative to the system URI
    registry_id: str
    attributes: List[AttributeSpec]
    oem_key: Optional[str] = None  # key under ServiceRoot.Oem / ComputerSystem.Oem
    flat_body: bool = False  # HPE iLO 4: attributes at the top level, no "Attributes" wrapper
    settings_full_copy: bool = False  # settings object lists every attribute, not only pending
    # when staged settings take effect at a reset: "reset" (always), "job" (only with a scheduled
    # config job), "job_or_applytime" (a job, or a PATCH that carried SettingsApplyTime OnReset)
    commit: str = "reset"
    supports_apply_time: bool = False
    requires_if_match: bool = False
    rejects_apply_time: bool = False
    post_state: str = "bootprogress"  # bootprogress | hp | hpe
    patch_returns_task: bool = False
    bios_odata_type: str = "#Bios.v1_2_0.Bios"
    # attributes a system profile locks unless it is PROFILE_UNLOCKED (Dell: SysProfile other
    # than Custom locks the processor and memory settings); the registry declares it (Map
    # dependencies, ReadOnly) unless the fault undeclared_locks is set
    profile_locks: Tuple[str, ...] = ()

    def attribute(self, name: str) -> Optional[AttributeSpec]:
        for attr in self.attributes:
            if attr.name == name:
                return attr
        return None

    def knob_attribute(self, knob: str) -> Optional[AttributeSpec]:
        for attr in self.attributes:
            if attr.knob == knob:
                return attr
        return None


def _enabled_disabled(name: str, default: str = "Disabled", inverse: bool = False,
                      display: str = "") -> AttributeSpec:
    logical = {"Enabled": "enabled", "Disabled": "disabled"}
    if inverse:
        logical = {"Enabled": "disabled", "Disabled": "enabled"}
    return AttributeSpec(name, display or name, [("Enabled", "Enabled"), ("Disabled", "Disabled")],
                         default, knob="node_interleaving", logical=logical)


_COMMON = [
    AttributeSpec("BootMode", "Boot Mode", [("Uefi", "UEFI"), ("Bios", "Legacy BIOS")], "Uefi"),
    AttributeSpec("ProcHyperthreading", "Hyper-Threading",
                  [("Enabled", "Enabled"), ("Disabled", "Disabled")], "Enabled"),
    AttributeSpec("ProcTurboMode", "Turbo Mode", [("Enabled", "Enabled"), ("Disabled", "Disabled")],
                  "Enabled"),
]

_DMTF_SNOOP = AttributeSpec(
    "SnoopMode", "Snoop Mode",
    [("EarlySnoop", "Early Snoop"), ("HomeSnoop", "Home Snoop"), ("ClusterOnDie", "Cluster on Die"),
     ("OpportunisticSnoopBroadcast", "Opportunistic Snoop Broadcast")],
    "EarlySnoop", knob="snoop_mode",
    logical={"EarlySnoop": "early", "HomeSnoop": "home", "ClusterOnDie": "cod",
             "OpportunisticSnoopBroadcast": "osb"})

PROFILE_ATTRIBUTE, PROFILE_UNLOCKED = "SysProfile", "Custom"
_DELL_SYSPROFILE = AttributeSpec(
    PROFILE_ATTRIBUTE, "System Profile",
    [("PerfPerWattOptimizedDapc", "Performance Per Watt (DAPC)"),
     ("PerfPerWattOptimizedOs", "Performance Per Watt (OS)"),
     ("PerfOptimized", "Performance"), (PROFILE_UNLOCKED, "Custom")], PROFILE_UNLOCKED)

# A deliberately bad knob for the lab: slows the guest's packet processing (the lab's drop
# model, docs/bmc-simulator.md).
_LAB_SLOWDOWN = AttributeSpec(
    "LabReceiveSlowdown", "Lab: slow packet processing (test only)",
    [("Disabled", "Disabled"), ("Enabled", "Enabled")], "Disabled")

VENDORS: Dict[str, VendorSpec] = {
    "dell-idrac8": VendorSpec(
        key="dell-idrac8", manufacturer="Dell Inc.", model="PowerEdge R630",
        manager_model="13G Monolithic", firmware="2.75.75.75", system_id="System.Embedded.1",
        manager_id="iDRAC.Embedded.1", bios_path="Bios", settings_path="Bios/Settings",
        registry_id="BiosAttributeRegistry.v1_0_0", oem_key="Dell", commit="job",
        attributes=[*_COMMON, _DMTF_SNOOP, _enabled_disabled("NodeInterleave"), _DELL_SYSPROFILE,
                    _LAB_SLOWDOWN],
        profile_locks=("SnoopMode", "NodeInterleave"),
    ),
    "dell-idrac9": VendorSpec(
        key="dell-idrac9", manufacturer="Dell Inc.", model="PowerEdge R640",
        manager_model="14G Monolithic", firmware="4.40.00.00", system_id="System.Embedded.1",
        manager_id="iDRAC.Embedded.1", bios_path="Bios", settings_path="Bios/Settings",
        registry_id="BiosAttributeRegistry.v1_0_0", oem_key="Dell", commit="job_or_applytime",
        supports_apply_time=True,
        attributes=[*_COMMON, _enabled_disabled("NodeInterleave"),
                    AttributeSpec("SubNumaCluster", "Sub NUMA Cluster",
                                  [("Enabled", "Enabled"), ("Disabled", "Disabled")], "Disabled"),
                    _DELL_SYSPROFILE, _LAB_SLOWDOWN],
        profile_locks=("NodeInterleave", "SubNumaCluster"),
    ),
    "hpe-ilo4": VendorSpec(
        key="hpe-ilo4", manufacturer="HP", model="ProLiant DL360 Gen9", manager_model="iLO 4",
        firmware="2.80 Jan 25 2022", system_id="1", manager_id="1", bios_path="bios",
        settings_path="bios/Settings", registry_id="HpBiosAttributeRegistryP89.1.1.00",
        oem_key="Hp", flat_body=True, settings_full_copy=True, post_state="hp",
        bios_odata_type="#HpBios.1.2.0.HpBios",
        attributes=[*_COMMON,
                    AttributeSpec("QpiSnoopConfig", "QPI Snoop Configuration",
                                  [("Standard", "Standard"), ("EarlySnoop", "Early Snoop"),
                                   ("ClusterOnDie", "Cluster on Die")], "EarlySnoop",
                                  knob="snoop_mode",
                                  logical={"Standard": "home", "EarlySnoop": "early",
                                           "ClusterOnDie": "cod"}),
                    _enabled_disabled("NodeInterleaving"), _LAB_SLOWDOWN],
    ),
    "hpe-ilo5": VendorSpec(
        key="hpe-ilo5", manufacturer="HPE", model="ProLiant DL360 Gen10", manager_model="iLO 5",
        firmware="2.72 Sep 04 2022", system_id="1", manager_id="1", bios_path="bios",
        settings_path="bios/settings", registry_id="BiosAttributeRegistryU32.v1_2_68",
        oem_key="Hpe", settings_full_copy=True, post_state="hpe",
        attributes=[*_COMMON, _enabled_disabled("NodeInterleaving"),
                    AttributeSpec("SubNumaClustering", "Sub-NUMA Clustering",
                                  [("Enabled", "Enabled"), ("Disabled", "Disabled")], "Disabled"),
                    _LAB_SLOWDOWN],
    ),
    "lenovo-xcc": VendorSpec(
        key="lenovo-xcc", manufacturer="Lenovo", model="ThinkSystem SR650",
        manager_model="Lenovo XClarity Controller", firmware="CDI3A4E 8.88", system_id="1",
        manager_id="1", bios_path="Bios", settings_path="Bios/Pending",
        registry_id="BiosAttributeRegistry.1.0.0", oem_key="Lenovo", settings_full_copy=True,
        requires_if_match=True,
        attributes=[*_COMMON,
                    AttributeSpec("Processors_SNC", "SNC", [("Disabled", "Disabled"),
                                                            ("Enabled", "Enabled")], "Disabled",
                                  knob="snoop_mode", logical={"Enabled": "cod"}),
                    AttributeSpec("Memory_SocketInterleave", "Socket Interleave",
                                  [("NUMA", "NUMA"), ("NonNUMA", "Non-NUMA")], "NUMA",
                                  knob="node_interleaving",
                                  logical={"NUMA": "disabled", "NonNUMA": "enabled"}),
                    _LAB_SLOWDOWN],
    ),
    "supermicro": VendorSpec(
        key="supermicro", manufacturer="Supermicro", model="SYS-1029U-TRT",
        manager_model="ASPEED", firmware="01.73.12", system_id="1", manager_id="1",
        bios_path="Bios", settings_path="Bios/SD", registry_id="BiosAttributeRegistry.1.0.0",
        oem_key="Supermicro", settings_full_copy=True, rejects_apply_time=True,
        attributes=[*_COMMON,
                    AttributeSpec("SnoopMode_0027", "Snoop Mode",
                                  [("0x00", "Early Snoop"), ("0x01", "Home Snoop"),
                                   ("0x02", "COD"), ("0x03", "Home Snoop with OSB")], "0x00",
                                  knob="snoop_mode",
                                  logical={"0x00": "early", "0x01": "home", "0x02": "cod",
                                           "0x03": "osb"}),
                    AttributeSpec("NUMA_002A", "NUMA", [("Enable", "Enabled"),
                                                        ("Disable", "Disabled")], "Enable",
                                  knob="node_interleaving",
                                  logical={"Enable": "disabled", "Disable": "enabled"}),
                    _LAB_SLOWDOWN],
    ),
    "generic": VendorSpec(
        key="generic", manufacturer="Contoso", model="3500", manager_model="Contoso BMC",
        firmware="1.45", system_id="437XR1138R2", manager_id="BMC", bios_path="Bios",
        settings_path="Bios/Settings", registry_id="BiosAttributeRegistryP89.v1_0_0",
        supports_apply_time=True, patch_returns_task=True,
        attributes=[*_COMMON, _DMTF_SNOOP, _enabled_disabled("NodeInterleaving"), _LAB_SLOWDOWN],
    ),
}

VENDOR_KEYS = sorted(VENDORS)


def vendor(key: str) -> VendorSpec:
    try:
        return VENDORS[key]
    except KeyError:
        raise ValueError(f"unknown BMC vendor {key!r}; known: {', '.join(VENDOR_KEYS)}") from None


def sample_desired(key: str) -> Dict[str, str]:
    """A change every personality can take: interleaving on, and Home Snoop where it exists."""
    desired = {"node_interleaving": "enabled"}
    snoop = vendor(key).knob_attribute("snoop_mode")
    if snoop is not None and "home" in snoop.logical.values():
        desired["snoop_mode"] = "home"
    return desired
