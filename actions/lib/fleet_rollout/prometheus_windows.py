"""Counter windows read from Prometheus (the pack config's counters.source: prometheus).

The gate keeps its timeline (the pre window before the batch is drained, the post window after
the soak, the same steps, the same collection labels); what changes is how a window is taken.
Its start runs nothing on the hosts (node_exporter is scraped all along): it records the
window's anchor for every host. Its read waits until the window's last scrape has landed
(`read_delay` after its end) and asks Prometheus for [anchor, anchor + window] in one range
query per counter term, at the configured resolution: each host's drops, packets, coverage
and per-step drops, or why its window is unusable (a reboot inside, seen as a change of
node_boot_time_seconds; no samples; a counter reset). A Prometheus that cannot be reached or
answers an error leaves every host's window missing with the error, which names the URL; the
judge then has nothing to compare (INCONCLUSIVE: an approver decides) and no host's state
changes.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.counter_source import PrometheusSettings
from fleet_rollout.counters.metric import metric_from_dict
from fleet_rollout.counters.prometheus import PrometheusError
from fleet_rollout.errors import ConfigError
from fleet_rollout.hoststeps import RolloutContext

MARK = "prometheus"  # a window start's entry for a host: read from Prometheus


def settings(ctx: RolloutContext) -> Optional[PrometheusSettings]:
    """The Prometheus this rollout reads its windows from; None: the hosts' collector."""
    counters = ctx.config.counters
    return counters.prometheus if counters.source == "prometheus" else None


def check_scraped(config: Any, hosts: List[str]) -> None:
    """At plan time, with counters from Prometheus: it answers, and node_exporter of every
    host is scraped there (node_boot_time_seconds under the host label). ConfigError naming
    the URL and the hosts it lacks (the first 10), before anything changes."""
    counters = config.counters
    if counters.source != "prometheus":
        return
    prom = counters.prometheus
    try:
        seen = set(prom.source(config.resolve).hosts_seen(hosts, time.time()))
    except PrometheusError as err:
        raise ConfigError(f"counters: {err}; nothing was changed") from None
    missing = [h for h in hosts if h not in seen]
    if missing:
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise ConfigError(
            f"counters: prometheus {prom.url} has no node_exporter series "
            f"(node_boot_time_seconds) for {len(missing)} host(s): "
            f"{', '.join(missing[:10])}{more}. Check its scrape config and "
            f"counters.prometheus.host_label ({prom.host_label}"
            f"{', port stripped' if prom.strip_port else ''}); nothing was changed")


def begin(hosts: List[str], anchor: float) -> Dict[str, Dict[str, Any]]:
    """A window's start for `hosts`: its anchor, nothing asked of any host."""
    return {host: {MARK: True, "anchor": anchor} for host in hosts}


def is_started(doc: Any) -> bool:
    """A window start's entry made by begin()."""
    return isinstance(doc, dict) and doc.get(MARK) is True


def read(ctx: RolloutContext, prom: PrometheusSettings, hosts: List[str], started: float,
         step: float, steps: int) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, str]]:
    """({host: window}, {host: why missing}) of the window [started, started + steps * step],
    read once its last scrape has landed."""
    end = started + steps * step
    left = end + prom.read_delay - time.time()
    if left > 0:
        time.sleep(left)
    if not hosts:
        return {}, {}
    canary = ctx.profile.get("canary") or {}
    metric = metric_from_dict(canary.get("metric") or None, where="profile canary.metric")
    try:
        counts = prom.source(ctx.config.resolve).step_counts(hosts, metric, started, end,
                                                             steps, prom.resolution)
    except (PrometheusError, ConfigError) as err:
        why = f"counters not read: {err}"[:600]
        return {}, {host: why for host in hosts}
    windows = {h: c.to_dict() for h, c in counts.items() if c.usable}
    errors = {h: f"prometheus {prom.url}: {c.problem or 'no samples'}"
              for h, c in counts.items() if not c.usable}
    return windows, errors
