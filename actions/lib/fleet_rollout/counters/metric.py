"""The drop metric: which counters make "drops", normalised by which packet count.

A profile (or a judge policy file) says it like this; every entry is ``SOURCE:NAME``::

    metric:
      drops: [netdev:rx_dropped, netdev:rx_missed_errors, ethtool:rx_discards_phy,
              softnet:dropped, snmp:Udp.RcvbufErrors]
      packets: [netdev:rx_packets]
      interfaces: {include: ["*"], exclude: [lo, "veth*"]}

Sources: ``netdev`` (/sys/class/net/IFACE/statistics/NAME, summed over the selected interfaces),
``ethtool`` (``ethtool -S`` NAME, summed over the selected interfaces; a driver that lacks the
name contributes nothing), ``softnet`` (a /proc/net/softnet_stat counter column summed over CPUs),
``snmp`` (``Proto.Field`` of /proc/net/snmp) and ``snmp6`` (a /proc/net/snmp6 name).

The judge works on each host's own pre/post ratio, so a counter that one driver lacks, or that
two sources both count, changes every window of that host alike and does not bias the test.
"""
from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping  # isinstance on typing's alias costs a call each
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.counters.collector import SOFTNET_COUNTERS
from fleet_rollout.errors import ConfigError

SOURCES = ("netdev", "ethtool", "softnet", "snmp", "snmp6")
_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]: ]+$")
_SNMP_NAME = re.compile(r"^[A-Za-z0-9]+\.[A-Za-z0-9]+$")


@dataclass(frozen=True)
class CounterTerm:
    """One counter of the metric, e.g. ``netdev:rx_dropped`` or ``snmp:Udp.RcvbufErrors``."""

    source: str
    name: str

    def __str__(self) -> str:
        return f"{self.source}:{self.name}"

    @property
    def width_bits(self) -> Optional[int]:
        """Counter width when the kernel keeps it narrower than 64 bits (so it wraps)."""
        return 32 if self.source == "softnet" else None


@functools.lru_cache(maxsize=4096)
def _selected(include: Tuple[str, ...], exclude: Tuple[str, ...], iface: str) -> bool:
    """An interface name against the metric's globs: asked for every host, snapshot and term
    with the same few names (a judge of 200 hosts asked it 10,000 times), so remembered."""
    if not any(fnmatch.fnmatchcase(iface, pattern) for pattern in include):
        return False
    return not any(fnmatch.fnmatchcase(iface, pattern) for pattern in exclude)


@dataclass(frozen=True)
class MetricDefinition:
    drops: Tuple[CounterTerm, ...]
    packets: Tuple[CounterTerm, ...]
    include: Tuple[str, ...] = ("*",)
    exclude: Tuple[str, ...] = ()

    def interface_selected(self, iface: str) -> bool:
        return _selected(self.include, self.exclude, iface)

    @property
    def terms(self) -> Tuple[CounterTerm, ...]:
        return self.drops + self.packets

    def describe(self) -> str:
        drops = " + ".join(str(term) for term in self.drops)
        packets = " + ".join(str(term) for term in self.packets)
        return f"({drops}) per ({packets})"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "drops": [str(term) for term in self.drops],
            "packets": [str(term) for term in self.packets],
            "interfaces": {"include": list(self.include), "exclude": list(self.exclude)},
        }


# Bonds, teams, VLANs and bridges repeat their members' packets; virtual and tunnel devices
# carry no NIC drops. Exclude them by default so nothing is counted twice.
DEFAULT_EXCLUDE = (
    "lo", "bond*", "team*", "br*", "virbr*", "docker*", "veth*", "cali*", "flannel*", "cni*",
    "vxlan*", "geneve*", "tun*", "tap*", "ifb*", "dummy*", "vlan*", "*.*", "wg*",
)

DEFAULT_METRIC = MetricDefinition(
    drops=(
        CounterTerm("netdev", "rx_dropped"),        # kernel/driver drops (mlx5: rx_out_of_buffer)
        CounterTerm("netdev", "rx_missed_errors"),  # NIC ran out of descriptors (ixgbe, igb)
        CounterTerm("netdev", "rx_fifo_errors"),    # NIC FIFO overrun
        CounterTerm("ethtool", "rx_discards_phy"),  # mlx5 port buffer drops, not in netdev stats
        CounterTerm("softnet", "dropped"),          # netdev_max_backlog exceeded
        CounterTerm("snmp", "Udp.RcvbufErrors"),    # UDP socket receive buffer full
    ),
    packets=(CounterTerm("netdev", "rx_packets"),),
    include=("*",),
    exclude=DEFAULT_EXCLUDE,
)


def parse_term(text: Any, where: str) -> CounterTerm:
    """``SOURCE:NAME`` -> CounterTerm; ``where`` names the file and field for the error."""
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(
            f"{where}: {text!r} is not SOURCE:NAME (sources: {', '.join(SOURCES)})"
        )
    source, name = text.split(":", 1)
    source, name = source.strip(), name.strip()
    if source not in SOURCES:
        raise ConfigError(
            f"{where}: unknown counter source {source!r} in {text!r} "
            f"(allowed: {', '.join(SOURCES)})"
        )
    if not name or not _NAME.match(name):
        raise ConfigError(f"{where}: {text!r} has no valid counter name after the colon")
    if source == "softnet" and name not in SOFTNET_COUNTERS:
        raise ConfigError(
            f"{where}: softnet has no counter {name!r} (allowed: {', '.join(SOFTNET_COUNTERS)})"
        )
    if source == "snmp" and not _SNMP_NAME.match(name):
        raise ConfigError(
            f"{where}: snmp counters are Proto.Field, e.g. snmp:Udp.RcvbufErrors; got {text!r}"
        )
    return CounterTerm(source, name)


def _string_list(value: Any, where: str, allow_empty: bool = False) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: must be a list of strings, got {value!r}")
    if not value and not allow_empty:
        raise ConfigError(f"{where}: must not be empty")
    return value


def metric_from_dict(data: Optional[Mapping[str, Any]], where: str = "metric") -> MetricDefinition:
    """Build a metric from its profile/policy mapping; missing keys take the defaults.

    ``where`` prefixes error messages (e.g. ``"profiles/snoop.yaml: canary.metric"``).
    """
    if data is None:
        return DEFAULT_METRIC
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must be a mapping with drops/packets/interfaces")
    unknown = sorted(set(data) - {"drops", "packets", "interfaces"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: drops, packets, interfaces)"
        )
    drops = DEFAULT_METRIC.drops
    packets = DEFAULT_METRIC.packets
    if "drops" in data:
        items = _string_list(data["drops"], f"{where}.drops")
        drops = tuple(parse_term(t, f"{where}.drops[{i}]") for i, t in enumerate(items))
    if "packets" in data:
        items = _string_list(data["packets"], f"{where}.packets")
        packets = tuple(parse_term(t, f"{where}.packets[{i}]") for i, t in enumerate(items))
    overlap = {str(t) for t in drops} & {str(t) for t in packets}
    if overlap:
        raise ConfigError(f"{where}: {', '.join(sorted(overlap))} is both a drop and a packet "
                          "counter")
    include, exclude = DEFAULT_METRIC.include, DEFAULT_METRIC.exclude
    if "interfaces" in data:
        interfaces = data["interfaces"]
        if not isinstance(interfaces, Mapping):
            raise ConfigError(f"{where}.interfaces: must be a mapping with include/exclude")
        unknown = sorted(set(interfaces) - {"include", "exclude"})
        if unknown:
            raise ConfigError(f"{where}.interfaces: unknown key(s) {', '.join(unknown)} "
                              "(allowed: include, exclude)")
        if "include" in interfaces:
            include = tuple(_string_list(interfaces["include"], f"{where}.interfaces.include"))
        if "exclude" in interfaces:
            exclude = tuple(_string_list(interfaces["exclude"], f"{where}.interfaces.exclude",
                                         allow_empty=True))
    return MetricDefinition(drops, packets, include, exclude)


def series_values(snapshot: Mapping[str, Any], term: CounterTerm,
                  metric: MetricDefinition) -> Dict[str, int]:
    """The values of one term in a collector snapshot, per series.

    Series keys: the interface for netdev/ethtool, ``cpuN`` for softnet, ``""`` for snmp(6).
    A series the snapshot does not have is absent from the result.
    """
    out: Dict[str, int] = {}
    if term.source in ("netdev", "ethtool"):
        section = "statistics" if term.source == "netdev" else "ethtool"
        for iface, entry in sorted((snapshot.get("interfaces") or {}).items()):
            if not metric.interface_selected(iface) or not isinstance(entry, Mapping):
                continue
            values = entry.get(section) or {}
            if term.name in values:
                out[iface] = values[term.name]
    elif term.source == "softnet":
        for row in snapshot.get("softnet") or []:
            if term.name in row:
                out[f"cpu{row.get('cpu')}"] = row[term.name]
    elif term.source == "snmp":
        proto, field = term.name.split(".", 1)
        value = ((snapshot.get("snmp") or {}).get(proto) or {}).get(field)
        if value is not None:
            out[""] = value
    elif term.source == "snmp6":
        value = (snapshot.get("snmp6") or {}).get(term.name)
        if value is not None:
            out[""] = value
    return out
