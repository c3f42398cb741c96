"""Fleet inventory: read with ansible-core's own inventory code (YAML, INI, directories, dynamic
scripts, plugins), so any inventory users already have works.

Per host: BMC address, vendor (optional: detected), credential name (credentials themselves come
from the pack config, never from the inventory), labels (site, rack, hardware model).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from fleet_rollout.errors import ConfigError


@dataclass
class FleetHost:
    name: str
    bmc_address: str
    bmc_vendor: Optional[str] = None
    bmc_credential: str = "default"
    site: str = "default"
    rack: str = "default"
    hardware_model: str = "unknown"
    groups: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _load(source: str) -> Any:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    if not os.path.exists(source):
        raise ConfigError(f"inventory {source}: no such file or directory")
    manager = InventoryManager(loader=DataLoader(), sources=[source])
    return manager


def load_inventory(source: str, limit: str = "all") -> List[FleetHost]:
    """Hosts matching the Ansible pattern `limit`, validated; ConfigError names host and field."""
    from ansible.inventory.helpers import get_group_vars
    from ansible.utils.vars import combine_vars

    manager = _load(source)
    if not manager.hosts:
        raise ConfigError(f"inventory {source}: no hosts (unparseable, or empty)")
    hosts = manager.get_hosts(pattern=limit or "all")
    if not hosts:
        raise ConfigError(f"inventory {source}: no host matches {limit!r}")
    out: List[FleetHost] = []
    for host in hosts:
        groups = host.get_groups()
        merged = combine_vars(get_group_vars(groups), host.get_vars())
        where = f"inventory {source}: host {host.name}"
        leaked = [v for v in ("bmc_password", "bmc_username") if v in merged]
        if leaked:
            raise ConfigError(f"{where}: {', '.join(leaked)} set in the inventory; BMC "
                              "credentials belong in the pack config (bmc_credential names one)")
        address = merged.get("bmc_address")
        if not address or not isinstance(address, str):
            raise ConfigError(f"{where}: bmc_address missing (e.g. https://10.0.0.5)")
        if not address.startswith(("https://", "http://")):
            raise ConfigError(f"{where}: bmc_address {address!r} must start with https://")
        out.append(FleetHost(
            name=host.name, bmc_address=address,
            bmc_vendor=str(merged["bmc_vendor"]) if merged.get("bmc_vendor") else None,
            bmc_credential=str(merged.get("bmc_credential") or "default"),
            site=str(merged.get("site") or "default"), rack=str(merged.get("rack") or "default"),
            hardware_model=str(merged.get("hardware_model") or "unknown"),
            groups=sorted(g.name for g in groups if g.name != "all")))
    return sorted(out, key=lambda h: h.name)
