"""Fleet inventory: read with ansible-core's own inventory code (YAML, INI, directories, dynamic
scripts, plugins), so any inventory users already have works.

Per host: BMC address, vendor (optional: detected), credential name (credentials themselves come
from the pack config, never from the inventory), labels (site, rack, hardware model).

Loading the inventory also stores every host's resolved Ansible variables in the host-variable
cache (fleet_rollout.hostvars): the host steps that follow read only their hosts' rows instead of
parsing the whole inventory again.

A plan on an inventory whose files did not change since the cache was stored reads the hosts
and the groups' members from the cache (fingerprint match: no Ansible parse); a `limit` of
plain host and group names (`a,b`, `!x`, `&g`) is evaluated there the way Ansible does; any
other pattern (wildcards, regexes, subscripts, `@file`), an unmatched name or a stale cache
parse the inventory as before.

Everything is checked before use: host names are plain names (HOST_NAME_PATTERN; they become
Ansible --limit patterns, so `web*`, `a,b`, `!x`, `~re`, `@file` and group names are refused),
bmc_address is scheme://host[:port] with no user:password@, path, query or fragment, and labels
are short strings of safe characters. Errors name the inventory, the host and the field.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple
from urllib.parse import urlsplit

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
    # the site's time zone and maintenance hours (maintenance.py); None: the profile's
    timezone: Optional[str] = None
    maintenance_hours: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        # asdict(self), without its deep copy (20,000 hosts at plan time)
        return {"name": self.name, "bmc_address": self.bmc_address,
                "bmc_vendor": self.bmc_vendor, "bmc_credential": self.bmc_credential,
                "site": self.site, "rack": self.rack, "hardware_model": self.hardware_model,
                "groups": list(self.groups), "timezone": self.timezone,
                "maintenance_hours": self.maintenance_hours}


def _load(source: str) -> Any:
    from fleet_rollout.hostvars import load_manager

    return load_manager(source)


HOST_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z"  # \Z: no final newline
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._:+()-]{0,63}\Z"
LABELS = ("site", "rack", "hardware_model", "bmc_vendor", "bmc_credential")
_HOST_NAME = re.compile(HOST_NAME_PATTERN)
_LABEL = re.compile(LABEL_PATTERN)
_BMC_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,252})\Z")


def check_host_name(name: Any, where: str) -> str:
    """`name` if it is a plain host name (never an Ansible pattern: no `*`, `,`, `!`, `~`, `@`,
    `:`, spaces); ConfigError naming `where` otherwise."""
    if not isinstance(name, str) or not _HOST_NAME.match(name):
        shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
        raise ConfigError(f"{where}: host name {shown} is not allowed: host names must match "
                          f"{HOST_NAME_PATTERN} (letters, digits, '.', '_', '-'; no Ansible "
                          "pattern characters)")
    return name


def _check_not_a_group(name: str, groups: Iterable[str], where: str) -> None:
    if name in set(groups) | {"all", "ungrouped"}:
        raise ConfigError(f"{where}: host name {name!r} is also a group name of the inventory; "
                          "as an Ansible --limit it would select the whole group. Rename the "
                          "host or the group")


def check_label(value: Any, field_name: str, where: str, default: Optional[str]) -> Optional[str]:
    """A label (site, rack, ...) as a short string of safe characters; integers are read as
    text (rack: 12). ConfigError naming the field otherwise."""
    if value is None or value == "":
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {field_name} must be a string, not "
                          f"{type(value).__name__}")
    if not _LABEL.match(value):
        raise ConfigError(f"{where}: {field_name} {value[:80]!r} is not allowed: at most 64 "
                          "characters, letters, digits, space and . _ : + ( ) -, starting with a "
                          "letter or digit")
    return value


def check_bmc_address(address: Any, where: str) -> str:
    """An https:// (or http://, refused later unless allow_insecure_http) BMC base URL: a host,
    an optional port, nothing else. The error never shows a user:password@ part."""
    if not isinstance(address, str) or not address:
        raise ConfigError(f"{where}: bmc_address missing (e.g. https://10.0.0.5)")
    try:
        parts = urlsplit(address)
    except ValueError:
        raise ConfigError(f"{where}: bmc_address is not a URL (e.g. https://10.0.0.5)") from None
    if "@" in parts.netloc:
        raise ConfigError(f"{where}: bmc_address carries a user name or password (user:pass@); "
                          "BMC credentials belong in the pack config (bmc_credential names one)")
    shown = repr(address[:120])
    if parts.scheme not in ("https", "http"):
        raise ConfigError(f"{where}: bmc_address {shown} must start with https://")
    if any(ch.isspace() for ch in address):
        raise ConfigError(f"{where}: bmc_address {shown} contains white space")
    _check_bmc_host(parts, shown, where)
    if parts.query or parts.fragment or "?" in address or "#" in address:
        raise ConfigError(f"{where}: bmc_address {shown} must not have a query or fragment")
    if parts.path not in ("", "/"):
        raise ConfigError(f"{where}: bmc_address {shown} must not have a path (the Redfish "
                          "service is always at /redfish/v1)")
    return address


def _check_bmc_host(parts: Any, shown: str, where: str) -> None:
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"{where}: bmc_address {shown} has an invalid port (1-65535)")
    host = parts.hostname or ""
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
            return
        except ValueError:
            raise ConfigError(f"{where}: bmc_address {shown}: {host!r} is not an IPv6 "
                              "address") from None
    if not _BMC_HOST.match(host):
        raise ConfigError(f"{where}: bmc_address {shown} has no valid host name or address")


def load_inventory(source: str, limit: str = "all", cache_hostvars: bool = False,
                   cache_dir: Optional[str] = None) -> List[FleetHost]:
    """Hosts matching the Ansible pattern `limit`, validated; ConfigError names host and field.

    `cache_hostvars`: also store every host's resolved variables for the host steps (once per
    version of the inventory's files; `cache_dir` as in fleet_rollout.hostvars)."""
    return load_fleet(source, limit, cache_hostvars, cache_dir)[1]


def load_fleet(source: str, limit: str = "all", cache_hostvars: bool = False,
               cache_dir: Optional[str] = None) -> Tuple[List[FleetHost], List[FleetHost]]:
    """(every host of the inventory, the hosts matching `limit`) from one read of it (a large
    inventory takes seconds to parse), each validated as load_inventory does.

    `cache_hostvars`: answer from the host-variable cache when it is fresh and the limit is
    plain names (fleet_from_cache), else parse and store the cache."""
    from fleet_rollout import hostvars

    digest = hostvars.fingerprint(source) if cache_hostvars and os.path.exists(source) else None
    if digest is not None:
        cached = fleet_from_cache(source, limit, cache_dir, digest)
        if cached is not None:
            return cached
    manager, loader = _load(source)
    everyone = fleet_of_manager(source, manager)
    by_name = {h.name: h for h in everyone}
    # only inventory hosts (a `localhost` limit gets Ansible's implicit localhost: none here)
    selected = [h for h in manager.get_hosts(pattern=limit or "all") if h.name in by_name]
    if not selected:
        raise ConfigError(f"inventory {source}: no host matches {limit!r}")
    if digest is not None:
        hostvars.warm(source, manager, loader, cache_dir, digest, everyone)
    return everyone, sorted((by_name[h.name] for h in selected), key=lambda h: h.name)


def fleet_of_manager(source: str, manager: Any) -> List[FleetHost]:
    """Every host of a loaded InventoryManager, validated, sorted by name (ConfigError)."""
    from ansible.inventory.helpers import get_group_vars
    from ansible.utils.vars import combine_vars

    if not manager.hosts:
        raise ConfigError(f"inventory {source}: no hosts (unparseable, or empty)")
    group_names = list(manager.groups)
    for name in sorted(manager.hosts):
        where = f"inventory {source}: host {name}"
        check_host_name(name, f"inventory {source}")
        _check_not_a_group(name, group_names, where)
    everyone: Dict[str, FleetHost] = {}
    for host in manager.get_hosts(pattern="all"):
        groups = host.get_groups()
        merged = combine_vars(get_group_vars(groups), host.get_vars())
        everyone[host.name] = _fleet_host(host.name, merged, groups,
                                          f"inventory {source}: host {host.name}")
    return sorted(everyone.values(), key=lambda h: h.name)


_PLAIN_TOKEN = re.compile(r"^[!&]?[A-Za-z0-9_][A-Za-z0-9._-]*\Z")


def plain_pattern(limit: str) -> Optional[List[str]]:
    """The tokens of `limit` when it is only plain host/group names, `,`-separated, each
    optionally `!` (except) or `&` (and); None for anything else (Ansible decides those)."""
    text = limit or "all"
    raw = text.split(",") if "," in text else [text]
    tokens = [t.strip() for t in raw if t.strip()]
    if not tokens or not all(_PLAIN_TOKEN.match(t) for t in tokens):
        return None
    return tokens


def fleet_from_cache(source: str, limit: str, cache_dir: Optional[str],
                     digest: Any) -> Optional[Tuple[List[FleetHost], List[FleetHost]]]:
    """load_fleet's answer from a fresh host-variable cache, with `limit` evaluated as Ansible's
    InventoryManager.get_hosts does (plain names: a name is its group's members, recursively,
    and/or the host of that name; regular names first, then `&`, then `!`; no regular name
    means `all`). None whenever the cache cannot answer exactly: stale or missing cache, a
    pattern that is not plain names, a name that matches nothing (Ansible may warn, fail or
    invent an implicit localhost)."""
    from fleet_rollout import hostvars

    tokens = plain_pattern(limit)
    if tokens is None:
        return None
    cache = hostvars.fleet_cache(source, cache_dir, digest)
    if cache is None:
        return None
    try:
        found = cache.read(t.lstrip("!&") for t in tokens)
    except Exception:  # an unreadable cache: parse instead
        return None
    if not found or not found[0]:
        return None
    docs, members = found

    def matches(word: str) -> Optional[set]:
        if word == "all":
            return set(docs)
        found = set(members.get(word, ()))
        if word in docs:
            found.add(word)
        return found or None

    regular = [t for t in tokens if t[0] not in "!&"] or ["all"]
    chosen: set = set()
    for token in regular + [t for t in tokens if t[0] == "&"] + \
            [t for t in tokens if t[0] == "!"]:
        found = matches(token.lstrip("!&"))
        if found is None:
            return None
        if token[0] == "!":
            chosen -= found
        elif token[0] == "&":
            chosen &= found
        else:
            chosen |= found
    if not chosen.issubset(docs):
        return None  # a group member without a host row: never from one build; parse
    everyone = [FleetHost(**docs[name]) for name in sorted(docs)]
    by_name = {h.name: h for h in everyone}
    if not chosen:
        raise ConfigError(f"inventory {source}: no host matches {limit!r}")
    return everyone, [by_name[name] for name in sorted(chosen)]


def _fleet_host(name: str, merged: Dict[str, Any], groups: Any, where: str) -> FleetHost:
    leaked = [v for v in ("bmc_password", "bmc_username") if v in merged]
    if leaked:
        raise ConfigError(f"{where}: {', '.join(leaked)} set in the inventory; BMC "
                          "credentials belong in the pack config (bmc_credential names one)")
    address = check_bmc_address(merged.get("bmc_address"), where)
    labels = {field_name: check_label(merged.get(field_name), field_name, where, default)
              for field_name, default in (("site", "default"), ("rack", "default"),
                                          ("hardware_model", "unknown"), ("bmc_vendor", None),
                                          ("bmc_credential", "default"))}
    timezone, hours = _site_schedule(merged, where)
    return FleetHost(
        name=name, bmc_address=address, bmc_vendor=labels["bmc_vendor"],
        bmc_credential=labels["bmc_credential"] or "default", site=labels["site"] or "default",
        rack=labels["rack"] or "default", hardware_model=labels["hardware_model"] or "unknown",
        groups=sorted(g.name for g in groups if g.name != "all"), timezone=timezone,
        maintenance_hours=hours)


def _site_schedule(merged: Dict[str, Any], where: str) -> Tuple[Optional[str], Optional[str]]:
    """The host's `timezone` (an IANA name) and `maintenance_hours` ("01:00-06:00", or a list
    of them) variables, checked; None where the inventory gives none."""
    from fleet_rollout import maintenance

    zone = merged.get("timezone")
    if zone is not None:
        if not isinstance(zone, str):
            raise ConfigError(f"{where}: timezone must be a string (an IANA time zone name)")
        maintenance.load_zone(zone, f"{where}: timezone")
    hours = merged.get("maintenance_hours")
    if hours is None:
        return zone, None
    parsed = maintenance.parse_hours(hours, f"{where}: maintenance_hours")
    return zone, ",".join(maintenance.hours_text(parsed))
