"""Prometheus source: node_exporter metrics through /api/v1/query and /api/v1/query_range.

The server is a small in-process stand-in for Prometheus that serves real HTTP on 127.0.0.1
(no Prometheus binary exists here). It answers in Prometheus' own JSON format, evaluates the
selectors the source sends (``{__name__=~"...", instance=~"..."}``) with the 5-minute lookback,
and records every request, so the tests see what goes over the wire.
"""
from __future__ import annotations

import bisect
import json
import re
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import locations
import pytest

from fleet_rollout.counters.metric import DEFAULT_METRIC, CounterTerm, metric_from_dict
from fleet_rollout.counters.prometheus import (
    PrometheusError,
    PrometheusSource,
    node_exporter_metric,
)
from fleet_rollout.errors import ConfigError
from fleet_rollout.judge import judge, judge_input_from_dict

FIXTURES = locations.FIXTURES / "counters" / "prometheus"
LOOKBACK = 300.0
START, END, STEP = 1000.0, 4600.0, 60.0
SCRAPE = 15.0


class FakePrometheus:
    def __init__(self) -> None:
        self.series: List[Tuple[Dict[str, str], List[Tuple[float, float]]]] = []
        self.requests: List[Tuple[str, str, Dict[str, str]]] = []
        self.fail: Tuple[int, bytes] = (0, b"")

    def add(self, labels: Dict[str, str], func: Callable[[float], float],
            start: float = START - 600, end: float = END + 600) -> None:
        samples = []
        t = start
        while t <= end:
            samples.append((t, float(func(t))))
            t += SCRAPE
        self.series.append((labels, samples))

    @staticmethod
    def _matchers(query: str) -> List[Tuple[str, str]]:
        body = query.strip()
        assert body.startswith("{") and body.endswith("}"), query
        found = re.findall(r'(\w+)=~"((?:[^"\\]|\\.)*)"', body)
        return [(label, re.sub(r"\\(.)", r"\1", value)) for label, value in found]

    def select(self, query: str) -> List[Tuple[Dict[str, str], List[Tuple[float, float]]]]:
        matchers = self._matchers(query)
        return [(labels, samples) for labels, samples in self.series
                if all(re.fullmatch(rx, labels.get(label, "")) for label, rx in matchers)]

    @staticmethod
    def at(samples: List[Tuple[float, float]], t: float):
        """Value of the newest sample at or before t within the lookback (samples sorted)."""
        index = bisect.bisect_right(samples, (t + 1e-9, float("inf"))) - 1
        if index >= 0 and t - samples[index][0] <= LOOKBACK:
            return samples[index][1]
        return None

    def answer(self, path: str, form: Dict[str, str]) -> Tuple[int, dict]:
        if path == "/api/v1/query":
            t = float(form["time"])
            result = []
            for labels, samples in self.select(form["query"]):
                value = self.at(samples, t)
                if value is not None:
                    result.append({"metric": labels, "value": [t, repr(value)]})
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
        if path == "/api/v1/query_range":
            start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
            result = []
            for labels, samples in self.select(form["query"]):
                values, t = [], start
                while t <= end + 1e-9:
                    value = self.at(samples, t)
                    if value is not None:
                        values.append([t, repr(value)])
                    t += step
                if values:
                    result.append({"metric": labels, "values": values})
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return 404, {"status": "error", "errorType": "not_found", "error": path}


@pytest.fixture()
def prom() -> Iterator[Tuple[FakePrometheus, str]]:
    fake = FakePrometheus()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            fake.requests.append(("POST", self.path, form))
            if fake.fail[0]:
                status, body = fake.fail
            else:
                status, payload = fake.answer(self.path, form)
                body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def add_host(fake: FakePrometheus, host: str, drop_rate: float = 0.01,
             boot: Optional[Callable] = None, packets: Optional[Callable] = None,
             softnet_offset: float = 0.0, **window) -> None:
    instance = {"instance": f"{host}:9100", "job": "node"}
    pk = packets or (lambda t: 1_000_000 + 100 * t)
    fake.add({"__name__": "node_network_receive_packets_total", "device": "eth0", **instance},
             pk, **window)
    fake.add({"__name__": "node_network_receive_packets_total", "device": "lo", **instance},
             lambda t: 10**9 + 10**4 * t, **window)
    fake.add({"__name__": "node_network_receive_drop_total", "device": "eth0", **instance},
             lambda t: int(drop_rate * t), **window)
    fake.add({"__name__": "node_network_receive_drop_total", "device": "lo", **instance},
             lambda t: int(t), **window)
    fake.add({"__name__": "node_network_receive_fifo_total", "device": "eth0", **instance},
             lambda t: 0, **window)
    fake.add({"__name__": "node_ethtool_received_discards_phy", "device": "eth0", **instance},
             lambda t: int(t // 600), **window)
    for cpu in ("0", "1"):
        fake.add({"__name__": "node_softnet_dropped_total", "cpu": cpu, **instance},
                 lambda t: (int(softnet_offset + t // 100)) % 2**32, **window)
    fake.add({"__name__": "node_netstat_Udp_RcvbufErrors", **instance},
             lambda t: int(t // 1000), **window)
    fake.add({"__name__": "node_boot_time_seconds", **instance}, boot or (lambda t: 1.7e9),
             **window)


def reset_at_3000(t: float) -> float:
    """A packet counter that is reset (driver reload) at t=3000 without a reboot."""
    return 1_000_000 + 100 * t if t < 3000 else 100 * (t - 3000)


def expected_drops(drop_rate: float = 0.01) -> int:
    netdev = int(drop_rate * END) - int(drop_rate * START)
    ethtool = int(END // 600) - int(START // 600)
    softnet = 2 * (int(END // 100) - int(START // 100))
    udp = int(END // 1000) - int(START // 1000)
    return netdev + ethtool + softnet + udp


def test_node_exporter_names() -> None:
    names = {str(t): node_exporter_metric(t) for t in DEFAULT_METRIC.terms}
    assert names["netdev:rx_dropped"] == ("node_network_receive_drop_total", "device")
    assert names["netdev:rx_packets"] == ("node_network_receive_packets_total", "device")
    assert names["netdev:rx_fifo_errors"] == ("node_network_receive_fifo_total", "device")
    assert names["netdev:rx_missed_errors"][0] == "node_network_receive_missed_errors_total"
    assert names["softnet:dropped"] == ("node_softnet_dropped_total", "cpu")
    assert names["snmp:Udp.RcvbufErrors"] == ("node_netstat_Udp_RcvbufErrors", None)
    assert names["ethtool:rx_discards_phy"][0] == "node_ethtool_received_discards_phy(_total)?"
    assert node_exporter_metric(CounterTerm("ethtool", "port.rx_dropped"))[0] == \
        "node_ethtool_port_received_dropped(_total)?"
    assert node_exporter_metric(CounterTerm("snmp6", "Udp6RcvbufErrors"))[0] == \
        "node_netstat_Udp6_RcvbufErrors"
    with pytest.raises(ConfigError, match="does not export softnet cpu_collision"):
        node_exporter_metric(CounterTerm("softnet", "cpu_collision"))


def test_range_window_counts(prom) -> None:
    fake, url = prom
    add_host(fake, "web-001")
    add_host(fake, "web-002", drop_rate=0.05, softnet_offset=2**32 - 20)  # softnet wraps
    add_host(fake, "other-9", drop_rate=1.0)  # not asked for
    counts = PrometheusSource(url).window_counts(["web-001", "web-002"], DEFAULT_METRIC,
                                                 START, END, STEP)
    assert set(counts) == {"web-001", "web-002"}
    one, two = counts["web-001"], counts["web-002"]
    assert one.usable and one.coverage == 1.0
    assert one.packets == 100 * (END - START)  # eth0 only: lo is excluded by the metric
    assert one.drops == expected_drops()
    assert two.drops == expected_drops(0.05) and two.wraps == 2 and two.resets == 0
    # the wire: POSTed form queries against the range API, one selector per term + boot time
    paths = {path for _, path, _ in fake.requests}
    assert paths == {"/api/v1/query_range"}
    queries = [form["query"] for _, _, form in fake.requests]
    assert len(queries) == len(DEFAULT_METRIC.terms) + 1
    assert any('__name__=~"node_boot_time_seconds"' in q for q in queries)
    assert all(r'instance=~"(web\\-001|web\\-002)(:[0-9]+)?"' in q for q in queries)


def test_range_window_reboot_gap_reset_and_missing(prom) -> None:
    fake, url = prom
    add_host(fake, "web-003", boot=lambda t: 1.7e9 if t < 2500 else 1.7e9 + 2500)
    add_host(fake, "web-004", start=START - 600, end=2800)  # exporter gone halfway
    add_host(fake, "web-005", packets=reset_at_3000)
    counts = PrometheusSource(url).window_counts(
        ["web-003", "web-004", "web-005", "web-404"], DEFAULT_METRIC, START, END, STEP)
    assert "reboot" in counts["web-003"].problem
    gap = counts["web-004"]
    assert gap.usable and 0.55 < gap.coverage < 0.6  # samples up to 2800 + 5 min lookback
    reset = counts["web-005"]
    assert reset.usable and reset.resets == 1
    assert reset.packets == 100 * (2980 - START) + 100 * (END - 3000)  # lost: 2980..3000
    assert counts["web-404"].problem == "no packet counter samples in Prometheus for this host"


def test_instant_window_matches_range(prom) -> None:
    fake, url = prom
    add_host(fake, "web-001")
    add_host(fake, "web-005", packets=reset_at_3000)
    source = PrometheusSource(url)
    instant = source.window_counts(["web-001", "web-005"], DEFAULT_METRIC, START, END,
                                   method="instant")
    assert {path for _, path, _ in fake.requests} == {"/api/v1/query"}
    assert instant["web-001"].drops == expected_drops()
    assert instant["web-001"].packets == 100 * (END - START)
    assert "counter reset without reboot" in instant["web-005"].problem


def test_prometheus_judge_input_end_to_end(prom) -> None:
    fake, url = prom
    canary = [f"c{i}" for i in range(4)]
    control = [f"k{i}" for i in range(8)]
    for host in canary + control:
        add_host(fake, host, drop_rate=0.02, start=START - 600, end=2 * END + 600)
    pre, post = (START, END), (END, 2 * END - START)
    doc = PrometheusSource(url).judge_input(canary, control, pre, post, DEFAULT_METRIC,
                                            rollout="r1", batch=1)
    json.dumps(doc)
    verdict = judge(judge_input_from_dict(doc))
    assert verdict.verdict == "PASS"
    assert verdict.summary["canary"]["usable"] == 4


def test_prometheus_api_error_is_clear(prom) -> None:
    fake, url = prom
    fake.fail = (400, (FIXTURES / "error-bad-data.json").read_bytes())
    with pytest.raises(PrometheusError, match=r"HTTP 400: bad_data: invalid parameter"):
        PrometheusSource(url).window_counts(["web-001"], DEFAULT_METRIC, START, END)
    fake.fail = (200, b"<html>proxy login</html>")
    with pytest.raises(PrometheusError, match="answer is not JSON"):
        PrometheusSource(url).query("up", START)
    fake.fail = (503, b"upstream unavailable")
    with pytest.raises(PrometheusError, match="HTTP 503: upstream unavailable"):
        PrometheusSource(url).query("up", START)


def test_prometheus_recorded_answers_parse(prom) -> None:
    """Answers in the exact shape Prometheus 2.x sends (recorded format, fixed values)."""
    fake, url = prom
    fake.fail = (200, (FIXTURES / "query_range-drop.json").read_bytes())
    result = PrometheusSource(url).query_range("node_network_receive_drop_total", START, END, STEP)
    assert result[0]["metric"]["device"] == "eno1" and result[0]["values"][0][1] == "1027"
    with pytest.raises(PrometheusError, match="resultType 'matrix', expected 'vector'"):
        PrometheusSource(url).query("node_network_receive_drop_total", START)


def test_prometheus_unreachable_and_bad_url() -> None:
    with socket.socket() as sock:  # a loopback port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match="cannot connect"):
        PrometheusSource(f"http://127.0.0.1:{port}", timeout=5).query("up", START)
    with pytest.raises(ConfigError, match="must be http"):
        PrometheusSource("127.0.0.1:9090")
    with pytest.raises(ConfigError, match="end 1.0 is not after start 2.0"):
        PrometheusSource("http://127.0.0.1:1").window_counts(["h"], DEFAULT_METRIC, 2.0, 1.0)


def test_custom_metric_and_host_label(prom) -> None:
    fake, url = prom
    fake.add({"__name__": "node_netstat_Udp_RcvbufErrors", "host": "gw-1"}, lambda t: int(t))
    fake.add({"__name__": "node_netstat_Udp_InDatagrams", "host": "gw-1"}, lambda t: int(50 * t))
    metric = metric_from_dict({"drops": ["snmp:Udp.RcvbufErrors"],
                               "packets": ["snmp:Udp.InDatagrams"]})
    source = PrometheusSource(url, host_label="host", strip_port=False)
    counts = source.window_counts(["gw-1"], metric, START, END, STEP)["gw-1"]
    assert counts.drops == END - START and counts.packets == 50 * (END - START)
