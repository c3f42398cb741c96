"""Drop-counter windows from a Prometheus server that scrapes node_exporter.

For sites that already scrape their fleet: the same metric definition (``netdev:rx_dropped``...)
is mapped to node_exporter metric names and read through the HTTP API:

* ``/api/v1/query_range`` (default): every sample in the window, so a counter reset or a 32-bit
  wrap inside the window is seen, and the share of the window that has data (coverage) is known.
* ``/api/v1/query`` at the window's start and end: two instant samples per series, like two
  collector snapshots; cheaper for very large fleets.

A reboot is seen as a change of ``node_boot_time_seconds``; such a window is unusable. Hosts are
matched on the ``instance`` label with the ``:port`` suffix removed (configurable). Only the
standard library is used (urllib), so nothing beyond the pack's requirements is needed.
"""
from __future__ import annotations

import json
import math
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from fleet_rollout.counters.deltas import CounterReset, WindowCounts, counter_delta, series_increase
from fleet_rollout.counters.metric import CounterTerm, MetricDefinition
from fleet_rollout.errors import ConfigError, FleetRolloutError

MAX_BODY_BYTES = 16 * 1024 * 1024  # a 100-host chunk of a day's range query is far below this
MAX_ERROR_BODY_BYTES = 64 * 1024
_READ_CHUNK = 256 * 1024
BOOT_TIME_METRIC = "node_boot_time_seconds"
BOOT_TIME_TOLERANCE_S = 60.0  # node_boot_time_seconds moves by a second or so with NTP steps
HOSTS_PER_QUERY = 100

# netdev statistics file -> node_exporter netdev suffix (/proc/net/dev names for the classic
# ones; the rest are the netlink "detailed" names).
_NETDEV_SUFFIX = {
    "packets": "packets", "bytes": "bytes", "dropped": "drop", "errors": "errs",
    "fifo_errors": "fifo", "frame_errors": "frame", "compressed": "compressed",
    "multicast": "multicast", "carrier_errors": "carrier",
}
_SOFTNET_METRIC = {
    "processed": "node_softnet_processed_total",
    "dropped": "node_softnet_dropped_total",
    "time_squeeze": "node_softnet_times_squeezed_total",
    "received_rps": "node_softnet_received_rps_total",
    "flow_limit_count": "node_softnet_flow_limit_count_total",
}


class PrometheusError(FleetRolloutError):
    """The Prometheus server could not be reached or answered an error."""


def node_exporter_metric(term: CounterTerm) -> Tuple[str, Optional[str]]:
    """(regex matching the metric name, label that tells the series apart) for one term."""
    if term.source == "netdev":
        direction, _, rest = term.name.partition("_")
        if direction not in ("rx", "tx") or not rest:
            return f"node_network_{re.escape(term.name)}_total", "device"
        prefix = "receive" if direction == "rx" else "transmit"
        suffix = _NETDEV_SUFFIX.get(rest, rest)
        return f"node_network_{prefix}_{re.escape(suffix)}_total", "device"
    if term.source == "ethtool":
        # node_exporter's ethtool collector: sanitise, lower-case, rx -> received, tx -> transmitted
        name = re.sub(r"_*[^0-9A-Za-z_]+_*", "_", term.name).lower().lstrip("_")
        name = re.sub(r"(^|_)rx(_|$)", r"\1received\2", name)
        name = re.sub(r"(^|_)tx(_|$)", r"\1transmitted\2", name)
        return f"node_ethtool_{re.escape(name)}(_total)?", "device"
    if term.source == "softnet":
        metric = _SOFTNET_METRIC.get(term.name)
        if metric is None:
            raise ConfigError(f"metric term {term}: node_exporter does not export softnet "
                              f"{term.name} (available: {', '.join(_SOFTNET_METRIC)})")
        return metric, "cpu"
    if term.source == "snmp":
        proto, field = term.name.split(".", 1)
        return f"node_netstat_{proto}_{field}", None
    if term.source == "snmp6":
        match = re.match(r"^(Ip6|Icmp6|Udp6|UdpLite6)(.+)$", term.name)
        if match is None:
            raise ConfigError(f"metric term {term}: cannot map to a node_netstat_*6 metric")
        return f"node_netstat_{match.group(1)}_{match.group(2)}", None
    raise ConfigError(f"metric term {term}: no node_exporter metric for source {term.source}")


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for index in range(0, len(items), size):
        yield items[index:index + size]


def _number(text: Any) -> Optional[float]:
    """A sample's float; None for NaN/+Inf/-Inf (Prometheus' encodings of "no number")."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (dict, "an object"), (list, "an array"),
                       (str, "a string"), ((int, float), "a number")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def read_capped(response: Any, limit: int, where: str) -> bytes:
    """The body of an HTTP response, read in chunks; PrometheusError past `limit` bytes."""
    chunks: List[bytes] = []
    size = 0
    while True:
        chunk = response.read(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise PrometheusError(f"{where}: answer larger than {limit} bytes; refused (narrow "
                                  "the window, raise the step or use method 'instant')")
        chunks.append(chunk)


def check_sample(point: Any, where: str) -> Tuple[float, Optional[float]]:
    """(time, value) of one [t, "v"] sample; value None for NaN/Inf; PrometheusError when the
    sample is not a pair of a numeric time and a numeric string."""
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        raise PrometheusError(f"{where}: sample is {_json_type(point)}, expected a "
                              "[time, \"value\"] pair")
    when, value = point
    if isinstance(when, bool) or not isinstance(when, (int, float)) or _number(when) is None:
        raise PrometheusError(f"{where}: sample time is {_json_type(when)}, expected a finite "
                              "number")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PrometheusError(f"{where}: sample value is {_json_type(value)}, expected a "
                              "numeric string")
    try:
        float(value)
    except (ValueError, OverflowError):
        raise PrometheusError(f"{where}: sample value {str(value)[:40]!r} is not a "
                              "number") from None
    return float(when), _number(value)


def check_series(item: Any, index: int, where: str) -> Dict[str, Any]:
    """One series of a vector/matrix result, every field type-checked."""
    here = f"{where}: data.result[{index}]"
    if not isinstance(item, dict):
        raise PrometheusError(f"{here} is {_json_type(item)}, expected an object")
    labels = item.get("metric")
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise PrometheusError(f"{here}.metric is not an object of string labels")
    host = labels.get("instance")
    here = f"{here} ({host})" if host else here
    if "values" in item:
        if not isinstance(item["values"], list):
            raise PrometheusError(f"{here}.values is {_json_type(item['values'])}, expected "
                                  "an array of samples")
        for point in item["values"]:
            check_sample(point, f"{here}.values")
    elif "value" in item:
        check_sample(item["value"], f"{here}.value")
    else:
        raise PrometheusError(f"{here} has neither value nor values")
    return item


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """Prometheus' own errorType/error of an HTTP error answer (bounded)."""
    try:
        raw = exc.read(MAX_ERROR_BODY_BYTES)
    except OSError:
        return ""
    try:
        payload = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return f": {raw[:200].decode('utf-8', 'replace')}"
    if not isinstance(payload, dict):
        return f": {raw[:200].decode('utf-8', 'replace')}"
    return f": {str(payload.get('errorType', 'error'))[:80]}: {str(payload.get('error', ''))[:200]}"


def parse_answer(raw: bytes, where: str, result_type: str) -> List[Dict[str, Any]]:
    """The checked data.result of a Prometheus API answer; PrometheusError naming the field."""
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise PrometheusError(f"{where}: answer is not JSON: {raw[:120]!r}") from None
    if not isinstance(payload, dict):
        raise PrometheusError(f"{where}: answer is {_json_type(payload)}, expected a JSON "
                              "object")
    if payload.get("status") != "success":
        raise PrometheusError(f"{where}: status {str(payload.get('status'))[:40]!r}: "
                              f"{str(payload.get('errorType', ''))[:80]} "
                              f"{str(payload.get('error', ''))[:200]}")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"{where}: data is {_json_type(data)}, expected an object")
    if data.get("resultType") != result_type:
        raise PrometheusError(f"{where}: resultType {str(data.get('resultType'))[:40]!r}, "
                              f"expected {result_type!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(f"{where}: data.result is {_json_type(result)}, expected a list")
    return [check_series(item, index, where) for index, item in enumerate(result)]


class PrometheusSource:
    """Reads counter windows for hosts from one Prometheus server."""

    def __init__(self, url: str, timeout: float = 30.0, host_label: str = "instance",
                 strip_port: bool = True, headers: Optional[Dict[str, str]] = None,
                 ca_bundle: Optional[str] = None) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"prometheus url {url!r}: must be http(s)://host[:port][/path]")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.host_label = host_label
        self.strip_port = strip_port
        # sent on this server's requests only, never to where a redirect points (secrets)
        self.headers = dict(headers or {})
        # TLS is verified: against `ca_bundle` when given, else the system's CAs
        try:
            self.context = ssl.create_default_context(cafile=ca_bundle or None) \
                if parsed.scheme == "https" else None
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(f"prometheus {self.url}: ca_bundle {ca_bundle}: cannot read "
                              f"the CA certificates: {getattr(err, 'strerror', None) or err}"
                              ) from None

    # -- HTTP API ----------------------------------------------------------------------------

    def _api(self, endpoint: str, params: Dict[str, str], result_type: str) -> List[Dict[str, Any]]:
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/{endpoint}", data=body, method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json"},
        )
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)
        where = (f"prometheus {self.url} /api/v1/{endpoint} "
                 f"(query {params.get('query', '')[:160]})")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self.context) as response:
                raw = read_capped(response, MAX_BODY_BYTES, where)
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{where}: HTTP {exc.code}{_error_detail(exc)}") from None
        except urllib.error.URLError as exc:
            raise PrometheusError(f"{where}: cannot connect: {exc.reason}") from None
        except OSError as exc:  # timeouts and resets
            raise PrometheusError(f"{where}: {exc}") from None
        return parse_answer(raw, where, result_type)

    def query(self, expr: str, at: float) -> List[Dict[str, Any]]:
        """Instant query: [{metric: {labels}, value: [t, "v"]}, ...]."""
        return self._api("query", {"query": expr, "time": f"{at:.3f}"}, "vector")

    def query_range(self, expr: str, start: float, end: float,
                    step: float) -> List[Dict[str, Any]]:
        """Range query: [{metric: {labels}, values: [[t, "v"], ...]}, ...]."""
        return self._api("query_range", {"query": expr, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": f"{step:g}"}, "matrix")

    # -- hosts ---------------------------------------------------------------------------------

    def _host_of(self, labels: Dict[str, str]) -> Optional[str]:
        value = labels.get(self.host_label)
        if value is None:
            return None
        if self.strip_port:
            value = re.sub(r":\d+$", "", value)
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
        return value

    def _selector(self, name_regex: str, hosts: Sequence[str]) -> str:
        alternatives = "|".join(re.escape(host) for host in hosts)
        host_regex = f"({alternatives})" + (r"(:[0-9]+)?" if self.strip_port else "")
        return (f"{{__name__=~{_promql_string(name_regex)}, "
                f"{self.host_label}=~{_promql_string(host_regex)}}}")

    def _series(self, term_regex: str, hosts: Sequence[str], fetch) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        for chunk in _chunks(list(hosts), HOSTS_PER_QUERY):
            out.extend(fetch(self._selector(term_regex, chunk)))
        return out

    def hosts_seen(self, hosts: Sequence[str], at: float) -> List[str]:
        """The hosts of `hosts` with a node_boot_time_seconds series at `at` (node_exporter
        scraped within the lookback), in chunks of HOSTS_PER_QUERY."""
        seen = set()
        for item in self._series(BOOT_TIME_METRIC, list(dict.fromkeys(hosts)),
                                 lambda selector: self.query(selector, at)):
            host = self._host_of(item.get("metric") or {})
            if host is not None:
                seen.add(host)
        return [h for h in hosts if h in seen]

    # -- windows ---------------------------------------------------------------------------------

    def window_counts(self, hosts: Sequence[str], metric: MetricDefinition, start: float,
                      end: float, step: float = 60.0,
                      method: str = "range") -> Dict[str, WindowCounts]:
        """Drops and packets per host over [start, end] (unix seconds)."""
        hosts = list(dict.fromkeys(hosts))
        samples = self.samples(hosts, metric, start, end, step, method)
        expected_points = (int((end - start) // step) + 1) if method == "range" else 2
        counts = {host: WindowCounts(seconds=end - start) for host in hosts}
        for host in hosts:
            self._reduce(host, metric, samples[host], counts[host], expected_points, method)
        return counts

    def step_counts(self, hosts: Sequence[str], metric: MetricDefinition, start: float,
                    end: float, steps: int, resolution: float) -> Dict[str, WindowCounts]:
        """window_counts over [start, end] from one range query per term, with each host's
        drops in each of `steps` equal steps (`WindowCounts.steps`, when every step has them;
        the window's drops are then their sum). The query's resolution is `resolution` or
        less, so that every step's bounds are points of its grid: consecutive steps share
        their bound's sample, and their increases add up to the window's."""
        if steps < 1:
            raise ConfigError(f"prometheus window: steps {steps} is not 1 or more")
        length = (end - start) / steps
        per_step = max(1, math.ceil(length / max(resolution, 1e-3) - 1e-9))
        grid = length / per_step
        hosts = list(dict.fromkeys(hosts))
        samples = self.samples(hosts, metric, start, end, grid, "range")
        counts = {host: WindowCounts(seconds=end - start) for host in hosts}
        for host in hosts:
            self._reduce(host, metric, samples[host], counts[host], steps * per_step + 1, "range")
            if steps == 1 or not counts[host].usable:
                continue
            drops: List[int] = []
            for number in range(steps):
                low, high = start + number * length, start + (number + 1) * length
                part = {term: {key: [p for p in points if low - grid / 2 < p[0] < high + grid / 2]
                               for key, points in series.items()}
                        for term, series in samples[host].items()}
                piece = WindowCounts(seconds=length)
                self._reduce(host, metric, part, piece, per_step + 1, "range")
                if piece.drops is None:
                    break
                drops.append(piece.drops)
            if len(drops) == steps:
                counts[host].steps = drops
                counts[host].drops = sum(drops)
        return counts

    def samples(self, hosts: Sequence[str], metric: MetricDefinition, start: float,
                end: float, step: float,
                method: str) -> Dict[str, Dict[str, Dict[str, List[Tuple[float, float]]]]]:
        """host -> term -> series key -> [(time, value)] of every term of `metric` and of
        node_boot_time_seconds over [start, end] (NaN/Inf samples left out)."""
        if end <= start:
            raise ConfigError(f"prometheus window: end {end} is not after start {start}")
        if method not in ("range", "instant"):
            raise ConfigError(f"prometheus window method {method!r}: use 'range' or 'instant'")
        hosts = list(dict.fromkeys(hosts))
        wanted = set(hosts)
        samples: Dict[str, Dict[str, Dict[str, List[Tuple[float, float]]]]] = {
            host: {} for host in hosts
        }

        def fetch(selector: str) -> List[Dict[str, Any]]:
            if method == "range":
                return self.query_range(selector, start, end, step)
            series = self.query(selector, start) + [
                dict(item, _end=True) for item in self.query(selector, end)
            ]
            return series

        terms: List[Tuple[CounterTerm, str, Optional[str]]] = []
        for term in metric.terms:
            regex, label = node_exporter_metric(term)
            terms.append((term, regex, label))
        for term, regex, label in terms + [(None, BOOT_TIME_METRIC, None)]:
            for item in self._series(regex, hosts, fetch):
                labels = item.get("metric") or {}
                host = self._host_of(labels)
                if host not in wanted:
                    continue
                key = labels.get(label, "") if label else ""
                if label == "device" and not metric.interface_selected(key):
                    continue
                if label:  # keep series of different names (ethtool _total or not) apart
                    key = f"{labels.get('__name__', '')}/{key}"
                term_key = str(term) if term is not None else BOOT_TIME_METRIC
                points = samples[host].setdefault(term_key, {}).setdefault(key, [])
                if "values" in item:
                    raw_points = item["values"]
                else:
                    raw_points = [item.get("value")]
                for point in raw_points:
                    when, value = check_sample(point, f"prometheus {self.url}: {host} {term_key}")
                    if value is None:
                        continue  # NaN/Inf: no usable sample (lowers coverage)
                    if method == "instant":
                        when = end if item.get("_end") else start
                    points.append((when, value))
        for per_term in samples.values():
            for series in per_term.values():
                for points in series.values():
                    points.sort()
        return samples

    def _reduce(self, host: str, metric: MetricDefinition,
                per_term: Dict[str, Dict[str, List[Tuple[float, float]]]], counts: WindowCounts,
                expected_points: int, method: str) -> None:
        boot = [value for series in per_term.get(BOOT_TIME_METRIC, {}).values()
                for _, value in series]
        if boot and max(boot) - min(boot) > BOOT_TIME_TOLERANCE_S:
            counts.problem = "reboot inside the window (node_boot_time_seconds changed)"
            return
        sums: Dict[str, List[float]] = {"drops": [], "packets": []}
        coverage = 0.0
        for group, terms in (("drops", metric.drops), ("packets", metric.packets)):
            for term in terms:
                series = per_term.get(str(term))
                if not series:
                    continue
                total = 0.0
                for key, points in sorted(series.items()):
                    values = [int(round(v)) for _, v in points]
                    if group == "packets":
                        coverage = max(coverage, min(1.0, len(values) / expected_points))
                    if len(values) < 2:
                        continue
                    if method == "instant":
                        try:
                            delta, wrapped = counter_delta(values[0], values[-1], term.width_bits)
                        except CounterReset as exc:
                            counts.problem = (f"counter reset without reboot: {term} "
                                              f"{key.split('/')[-1]} {exc}").strip()
                            return
                        counts.wraps += int(wrapped)
                        total += delta
                    else:
                        increase = series_increase(values, term.width_bits)
                        counts.wraps += increase.wraps
                        counts.resets += increase.resets
                        total += increase.increase
                counts.detail[str(term)] = int(total)
                sums[group].append(total)
        counts.coverage = coverage
        if not sums["packets"]:
            counts.problem = "no packet counter samples in Prometheus for this host"
            return
        if not sums["drops"]:
            counts.problem = "no drop counter samples in Prometheus for this host"
            return
        counts.drops = int(sum(sums["drops"]))
        counts.packets = int(sum(sums["packets"]))

    def judge_input(self, canary: Sequence[str], control: Sequence[str],
                    pre: Tuple[float, float], post: Tuple[float, float],
                    metric: MetricDefinition, step: float = 60.0, method: str = "range",
                    rollout: Optional[str] = None, batch: Optional[int] = None) -> Dict[str, Any]:
        """The judge's input document (see docs/judge.md) for these hosts and windows."""
        hosts = list(dict.fromkeys(list(canary) + list(control)))
        windows = {}
        for name, (start, end) in (("pre", pre), ("post", post)):
            windows[name] = self.window_counts(hosts, metric, start, end, step, method)
        doc: Dict[str, Any] = {
            "schema_version": 1,
            "windows": {"pre": {"start": pre[0], "end": pre[1]},
                        "post": {"start": post[0], "end": post[1]}},
            "canary": list(canary),
            "control": list(control),
            "hosts": {},
        }
        if rollout is not None:
            doc["rollout"] = rollout
        if batch is not None:
            doc["batch"] = batch
        for host in hosts:
            entry: Dict[str, Any] = {}
            for name in ("pre", "post"):
                window = windows[name][host]
                entry[name] = window.to_dict() if window.usable else None
                if not window.usable:
                    entry.setdefault("note", f"{name}: {window.problem}")
            doc["hosts"][host] = entry
        return doc
