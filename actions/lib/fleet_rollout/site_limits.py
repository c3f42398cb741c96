"""What each site and rack allows a rollout: how many of its hosts may be out at once, and when.

A profile gives `batches.max_unavailable_per_site` and `_per_rack` as a count or as a share of
the site's or rack's hosts in the inventory ("5%": rounded down, at least 1, so that every site
can be changed); `batches.max_sites` limits the sites changing at once (0: no limit) and
`batches.parallel` the hosts in flight across the fleet. `maintenance` gives the hours a host
may start its change, in its site's time zone (the inventory's `timezone`, else the profile's),
and the dates to avoid; a site's own `maintenance_hours` in the inventory replace the profile's
hours for it.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from fleet_rollout import maintenance
from fleet_rollout.errors import ConfigError

Limit = Union[int, str]


def share(limit: Limit, total: int) -> int:
    """A limit as a host count: a count as it is; "5%" of `total` hosts rounded down, at least
    1 (a share that rounds to nothing would leave the site unchangeable)."""
    if isinstance(limit, str) and limit.endswith("%"):
        return max(1, int(math.floor(float(limit[:-1]) * total / 100.0 + 1e-9)))
    return max(1, int(limit))


@dataclass(frozen=True)
class Caps:
    """Hosts each site and rack may have out at once, from the inventory's host counts."""

    site: Mapping[str, int]
    rack: Mapping[Tuple[str, str], int]
    max_sites: int = 0  # sites changing at once; 0: no limit
    in_flight: int = 0  # hosts out at once across the fleet; 0: no limit
    default_site: int = 1  # a site or rack the inventory counts did not name
    default_rack: int = 1

    def site_cap(self, site: str) -> int:
        return int(self.site.get(site, self.default_site))

    def rack_cap(self, site: str, rack: str) -> int:
        return int(self.rack.get((site, rack), self.default_rack))


def fixed(per_site: int, per_rack: int, max_sites: int = 0) -> Caps:
    """The same count for every site and rack."""
    return Caps(site={}, rack={}, max_sites=max_sites, default_site=max(0, int(per_site)),
                default_rack=max(0, int(per_rack)))


def caps(batches: Mapping[str, Any], everyone: Iterable[Any]) -> Caps:
    """Caps for the profile's `batches` section over the inventory's hosts (each with .site
    and .rack, or a dict with those keys)."""
    sites: Counter = Counter()
    racks: Counter = Counter()
    for host in everyone:
        site, rack = _where(host)
        sites[site] += 1
        racks[(site, rack)] += 1
    per_site, per_rack = batches["max_unavailable_per_site"], batches["max_unavailable_per_rack"]
    return Caps(site={s: share(per_site, n) for s, n in sites.items()},
                rack={r: share(per_rack, n) for r, n in racks.items()},
                max_sites=int(batches.get("max_sites") or 0),
                in_flight=int(batches.get("parallel") or 0))


def _where(host: Any) -> Tuple[str, str]:
    if isinstance(host, Mapping):
        return str(host.get("site") or "default"), str(host.get("rack") or "default")
    return host.site, host.rack


def schedules(profile: Mapping[str, Any], hosts: Iterable[Any]) -> Dict[str, maintenance.Schedule]:
    """Each site's maintenance schedule: the profile's hours and avoided dates in the site's
    time zone, the site's own hours where the inventory gives them. The hosts of one site must
    agree on both (ConfigError naming the host otherwise)."""
    section = profile.get("maintenance") or {}
    hours = maintenance.parse_hours(section.get("hours") or [], "profile maintenance.hours")
    avoid = maintenance.parse_dates(section.get("avoid_dates") or [],
                                    "profile maintenance.avoid_dates")
    default_zone = str(section.get("timezone") or "UTC")
    seen: Dict[str, Tuple[str, Any, str]] = {}
    out: Dict[str, maintenance.Schedule] = {}
    for host in hosts:
        info = host if isinstance(host, Mapping) else host.to_dict()
        site = str(info.get("site") or "default")
        zone = info.get("timezone") or default_zone
        own = info.get("maintenance_hours")
        key = (zone, own)
        if site in seen and seen[site][:2] != key:
            raise ConfigError(
                f"inventory: host {info.get('name')}: site {site} has timezone {zone} and "
                f"maintenance_hours {own or '(the profile`s)'}, but host {seen[site][2]} of the "
                f"same site has {seen[site][0]} and {seen[site][1] or '(the profile`s)'}: the "
                "hosts of a site share one maintenance window")
        if site in seen:
            continue
        seen[site] = (zone, own, str(info.get("name")))
        site_hours = maintenance.parse_hours(own.split(","), f"site {site} maintenance_hours") \
            if own else hours
        out[site] = maintenance.Schedule(timezone=zone, hours=site_hours, avoid=avoid)
    return out


def plan_schedules(profile: Mapping[str, Any], infos: Mapping[str, Any],
                   names: Optional[Iterable[str]] = None) -> Dict[str, maintenance.Schedule]:
    """schedules() of a plan's hosts (`infos`: plan["hosts"], host name -> info): of `names`
    only (each read on its own from a stored plan), or of every host."""
    chosen = list(infos) if names is None else list(names)
    return schedules(profile, [dict(infos.get(h) or {}, name=h) for h in chosen])


def restricted(schedules_by_site: Mapping[str, maintenance.Schedule]) -> bool:
    """Whether any site has a maintenance window (else every site is always open)."""
    return any(not s.always_open for s in schedules_by_site.values())


def window_groups(schedules_by_site: Mapping[str, maintenance.Schedule], start: float,
                  days: int = 14) -> Dict[str, int]:
    """Site -> group number: sites whose windows open and close at the same moments over the
    next `days` days (the same hours in time zones of one offset) are one group; a batch takes
    hosts of one group only, so that all of its sites are open together."""
    keys: Dict[Tuple[Tuple[float, float], ...], int] = {}
    out: Dict[str, int] = {}
    for site in sorted(schedules_by_site):
        found = tuple(maintenance.intervals(schedules_by_site[site], start,
                                            start + days * 86400.0))
        out[site] = keys.setdefault(found, len(keys))
    return out


def over_limit(batch_hosts: List[Mapping[str, Any]], out_already: List[Mapping[str, Any]],
               limits: Caps) -> List[str]:
    """What a batch would exceed with the hosts of the rollout still out (failed, left drained,
    being restored): each site or rack over its cap, as text; [] when it fits."""
    sites: Counter = Counter()
    racks: Counter = Counter()
    for info in list(batch_hosts) + list(out_already):
        site, rack = _where(info)
        sites[site] += 1
        racks[(site, rack)] += 1
    found = [f"site {s}: {n} host(s) out, at most {limits.site_cap(s)}"
             for s, n in sorted(sites.items()) if n > limits.site_cap(s)]
    found += [f"rack {r} of site {s}: {n} host(s) out, at most {limits.rack_cap(s, r)}"
              for (s, r), n in sorted(racks.items()) if n > limits.rack_cap(s, r)]
    return found
