"""Where a rollout reads its counter windows: the pack config's `counters` section.

    counters:
      source: collector            # the hosts sample themselves (over Ansible), the default
    counters:
      source: prometheus           # a Prometheus that scrapes node_exporter on every host
      prometheus:
        url: https://prometheus.example.net:9090
        ca_bundle: /etc/ssl/site-ca.pem   # "" : the system's CAs; TLS is always verified
        auth_header: "Bearer ..."         # secret: the Authorization header, if it asks one
        host_label: instance              # the label naming the host
        strip_port: true                  # instance="web-001:9100" is host web-001
        resolution: 15                    # seconds: its scrape interval (the query's step)
        read_delay: 30                    # seconds after a window's end before it is read
        timeout: 30                       # seconds per request

Plain http:// is refused unless the pack config's allow_insecure_http is set. The prometheus
section is read only when the source is prometheus.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from fleet_rollout.errors import ConfigError

SOURCES = ("collector", "prometheus")
KEYS = ("url", "ca_bundle", "auth_header", "host_label", "strip_port", "resolution",
        "read_delay", "timeout")


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    ca_bundle: str = ""
    auth_header: str = field(default="", repr=False)  # a secret: never shown
    host_label: str = "instance"
    strip_port: bool = True
    resolution: float = 15.0
    read_delay: float = 30.0
    timeout: float = 30.0

    def source(self, resolve: Any = None) -> Any:
        """The PrometheusSource these settings describe (`resolve`: relative paths)."""
        from fleet_rollout.counters.prometheus import PrometheusSource

        ca = resolve(self.ca_bundle) if resolve and self.ca_bundle else self.ca_bundle
        headers = {"Authorization": self.auth_header} if self.auth_header else {}
        return PrometheusSource(self.url, timeout=self.timeout, host_label=self.host_label,
                                strip_port=self.strip_port, headers=headers,
                                ca_bundle=ca or None)


@dataclass(frozen=True)
class CounterSource:
    source: str = "collector"
    prometheus: Optional[PrometheusSettings] = None


def _seconds(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not low <= value <= high:
        raise ConfigError(f"pack config: {where} must be a number of seconds from {low:g} to "
                          f"{high:g}, not {value!r}")
    return float(value)


def load_counter_source(data: Any, allow_http: bool = False) -> CounterSource:
    """The pack config's `counters` (None or missing: the collector); ConfigError names the
    field."""
    if data is None:
        return CounterSource()
    if not isinstance(data, Mapping):
        raise ConfigError("pack config: counters must be an object (source, prometheus)")
    unknown = sorted(set(data) - {"source", "prometheus"})
    if unknown:
        raise ConfigError(f"pack config: counters: unknown key(s) {', '.join(unknown)} "
                          "(allowed: source, prometheus)")
    source = data.get("source") or "collector"
    if source not in SOURCES:
        raise ConfigError(f"pack config: counters.source {source!r}: one of "
                          f"{', '.join(SOURCES)}")
    if source != "prometheus":
        # the section is read only for source prometheus: StackStorm fills a config's missing
        # keys with the schema's defaults, so an unused section holds them (and no url)
        return CounterSource(source)
    raw = data.get("prometheus")
    if raw is None:
        raise ConfigError("pack config: counters.source is prometheus but counters."
                          "prometheus.url is not set")
    if not isinstance(raw, Mapping):
        raise ConfigError("pack config: counters.prometheus must be an object (url, ...)")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"pack config: counters.prometheus: unknown key(s) "
                          f"{', '.join(unknown)} (allowed: {', '.join(KEYS)})")
    url = raw.get("url")
    parsed = urllib.parse.urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError("pack config: counters.prometheus.url must be "
                          "https://host[:port][/path]")
    if parsed.username or parsed.password:
        raise ConfigError("pack config: counters.prometheus.url must not hold credentials; "
                          "put them in counters.prometheus.auth_header (a secret)")
    if parsed.scheme == "http" and not allow_http:
        raise ConfigError("pack config: counters.prometheus.url is plain http; use https, or "
                          "set allow_insecure_http (labs only)")
    texts = {}
    for key in ("ca_bundle", "auth_header", "host_label"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"pack config: counters.prometheus.{key} must be a string")
        texts[key] = value or ""
    if any(c in texts["auth_header"] for c in "\r\n"):
        raise ConfigError("pack config: counters.prometheus.auth_header must be one line")
    strip = raw.get("strip_port", True)
    if not isinstance(strip, bool):
        raise ConfigError("pack config: counters.prometheus.strip_port must be true or false")
    settings = PrometheusSettings(
        url=url, ca_bundle=texts["ca_bundle"], auth_header=texts["auth_header"],
        host_label=texts["host_label"] or "instance", strip_port=strip,
        resolution=_seconds(raw.get("resolution", 15), "counters.prometheus.resolution",
                            0.1, 3600),
        read_delay=_seconds(raw.get("read_delay", 30), "counters.prometheus.read_delay", 0, 600),
        timeout=_seconds(raw.get("timeout", 30), "counters.prometheus.timeout", 1, 600))
    return CounterSource(source, settings)
