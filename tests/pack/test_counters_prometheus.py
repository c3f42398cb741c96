"""Prometheus source: node_exporter metrics through /api/v1/query and /api/v1/query_range of a
real Prometheus (Debian's prometheus), the series each test writes backfilled into its TSDB with
promtool (tests/prometheus_support.py); its query log shows what went over the wire. Answers a
real server never gives (a proxy's HTML page, a 503 from a load balancer, recorded bodies) come
from a stand-in HTTP server that says so.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

import locations
import pytest
from prometheus_support import BackfilledPrometheus

from fleet_rollout.counters.metric import DEFAULT_METRIC, CounterTerm, metric_from_dict
from fleet_rollout.counters.prometheus import (
    PrometheusError,
    PrometheusSource,
    node_exporter_metric,
)
from fleet_rollout.errors import ConfigError
from fleet_rollout.judge import judge, judge_input_from_dict

FIXTURES = locations.FIXTURES / "counters" / "prometheus"
# recent times (hour-aligned, a day ago): the series as a real fleet's, within any retention
BASE = float((int(time.time()) // 7200 - 12) * 7200)
START, END, STEP = BASE + 1000.0, BASE + 4600.0, 60.0
SCRAPE = 15.0


class Series:
    """The series a test writes, with the window around START..END by default."""

    def __init__(self, server: BackfilledPrometheus) -> None:
        self.server = server

    def add(self, labels, func, start: float = START - 600, end: float = END + 600) -> None:
        self.server.add(labels, func, start, end, SCRAPE)


@pytest.fixture()
def prom(tmp_path: Path) -> Iterator[Tuple[Series, BackfilledPrometheus]]:
    server = BackfilledPrometheus(tmp_path / "prometheus")
    try:
        yield Series(server), server
    finally:
        server.stop()


@pytest.fixture()
def stand_in() -> Iterator[Tuple[list, str]]:
    """An HTTP server answering every POST with the (status, body) the test sets: answers a
    real Prometheus never gives."""
    answer: list = [200, b""]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(answer[0])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer[1])))
            self.end_headers()
            self.wfile.write(answer[1])

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield answer, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def add_host(fake: Series, host: str, drop_rate: float = 0.01,
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
                 lambda t: (int(softnet_offset + (t - BASE) // 100)) % 2**32, **window)
    fake.add({"__name__": "node_netstat_Udp_RcvbufErrors", **instance},
             lambda t: int(t // 1000), **window)
    fake.add({"__name__": "node_boot_time_seconds", **instance}, boot or (lambda t: 1.7e9),
             **window)


def reset_at_3000(t: float) -> float:
    """A packet counter that is reset (driver reload) at BASE + 3000 without a reboot."""
    return 1_000_000 + 100 * t if t < BASE + 3000 else 100 * (t - BASE - 3000)


def expected_drops(drop_rate: float = 0.01) -> int:
    netdev = int(drop_rate * END) - int(drop_rate * START)
    ethtool = int(END // 600) - int(START // 600)
    softnet = 2 * (int((END - BASE) // 100) - int((START - BASE) // 100))
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
    fake, server = prom
    add_host(fake, "web-001")
    add_host(fake, "web-002", drop_rate=0.05, softnet_offset=2**32 - 20)  # softnet wraps
    add_host(fake, "other-9", drop_rate=1.0)  # not asked for
    counts = PrometheusSource(server.url).window_counts(["web-001", "web-002"],
                                                        DEFAULT_METRIC, START, END, STEP)
    assert set(counts) == {"web-001", "web-002"}
    one, two = counts["web-001"], counts["web-002"]
    assert one.usable and one.coverage == 1.0
    assert one.packets == 100 * (END - START)  # eth0 only: lo is excluded by the metric
    assert one.drops == expected_drops()
    assert two.drops == expected_drops(0.05) and two.wraps == 2 and two.resets == 0
    # the wire: POSTed form queries against the range API, one selector per term + boot time
    log = server.queries()
    assert {(q["httpRequest"]["method"], q["httpRequest"]["path"]) for q in log} == {
        ("POST", "/api/v1/query_range")}
    queries = [q["params"]["query"] for q in log]
    assert len(queries) == len(DEFAULT_METRIC.terms) + 1
    assert any('__name__=~"node_boot_time_seconds"' in q for q in queries)
    assert all(r'instance=~"(web\\-001|web\\-002)(:[0-9]+)?"' in q for q in queries)


def test_range_window_reboot_gap_reset_and_missing(prom) -> None:
    fake, server = prom
    add_host(fake, "web-003", boot=lambda t: 1.7e9 if t < BASE + 2500 else 1.7e9 + 2500)
    add_host(fake, "web-004", start=START - 600, end=BASE + 2800)  # exporter gone halfway
    add_host(fake, "web-005", packets=reset_at_3000)
    counts = PrometheusSource(server.url).window_counts(
        ["web-003", "web-004", "web-005", "web-404"], DEFAULT_METRIC, START, END, STEP)
    assert "reboot" in counts["web-003"].problem
    gap = counts["web-004"]
    assert gap.usable and 0.55 < gap.coverage < 0.6  # samples up to 2800 + 5 min lookback
    reset = counts["web-005"]
    assert reset.usable and reset.resets == 1
    # lost: BASE + 2980..3000, from the last point of the query's 60 s grid before the reset
    assert reset.packets == 100 * (BASE + 2980 - START) + 100 * (END - BASE - 3000)
    assert counts["web-404"].problem == "no packet counter samples in Prometheus for this host"


def test_instant_window_matches_range(prom) -> None:
    fake, server = prom
    add_host(fake, "web-001")
    add_host(fake, "web-005", packets=reset_at_3000)
    source = PrometheusSource(server.url)
    instant = source.window_counts(["web-001", "web-005"], DEFAULT_METRIC, START, END,
                                   method="instant")
    assert {q["httpRequest"]["path"] for q in server.queries()} == {"/api/v1/query"}
    assert instant["web-001"].drops == expected_drops()
    assert instant["web-001"].packets == 100 * (END - START)
    assert "counter reset without reboot" in instant["web-005"].problem


def test_prometheus_judge_input_end_to_end(prom) -> None:
    fake, server = prom
    canary = [f"c{i}" for i in range(4)]
    control = [f"k{i}" for i in range(8)]
    for host in canary + control:
        add_host(fake, host, drop_rate=0.02, start=START - 600, end=2 * END - START + 600)
    pre, post = (START, END), (END, 2 * END - START)
    doc = PrometheusSource(server.url).judge_input(canary, control, pre, post, DEFAULT_METRIC,
                                                   rollout="r1", batch=1)
    json.dumps(doc)
    verdict = judge(judge_input_from_dict(doc))
    assert verdict.verdict == "PASS"
    assert verdict.summary["canary"]["usable"] == 4


def test_prometheus_api_error_is_clear(prom, stand_in) -> None:
    _fake, server = prom
    # the real server's own error for a query it cannot parse
    with pytest.raises(PrometheusError, match=r"HTTP 400: bad_data: invalid parameter"):
        PrometheusSource(server.url).query("node_network_receive_drop_total{", START)
    # what a proxy or a load balancer in front of it answers
    answer, url = stand_in
    answer[:] = [200, b"<html>proxy login</html>"]
    with pytest.raises(PrometheusError, match="answer is not JSON"):
        PrometheusSource(url).query("up", START)
    answer[:] = [503, b"upstream unavailable"]
    with pytest.raises(PrometheusError, match="HTTP 503: upstream unavailable"):
        PrometheusSource(url).query("up", START)
    answer[:] = [400, (FIXTURES / "error-bad-data.json").read_bytes()]
    with pytest.raises(PrometheusError, match=r"HTTP 400: bad_data: invalid parameter"):
        PrometheusSource(url).window_counts(["web-001"], DEFAULT_METRIC, START, END)


def test_prometheus_recorded_answers_parse(stand_in) -> None:
    """Answers in the exact shape Prometheus 2.x sends (recorded format, fixed values)."""
    answer, url = stand_in
    answer[:] = [200, (FIXTURES / "query_range-drop.json").read_bytes()]
    result = PrometheusSource(url).query_range("node_network_receive_drop_total", START, END, STEP)
    assert result[0]["metric"]["device"] == "eno1" and result[0]["values"][0][1] == "1027"
    with pytest.raises(PrometheusError, match="resultType 'matrix', expected 'vector'"):
        PrometheusSource(url).query("node_network_receive_drop_total", START)


def test_prometheus_unreachable_and_bad_url() -> None:
    with socket.socket() as sock:  # a loopback port held bound, nobody listening on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(PrometheusError, match="cannot connect"):
            PrometheusSource(f"http://127.0.0.1:{port}", timeout=5).query("up", START)
    with pytest.raises(ConfigError, match="must be http"):
        PrometheusSource("127.0.0.1:9090")
    with pytest.raises(ConfigError, match="end 1.0 is not after start 2.0"):
        PrometheusSource("http://127.0.0.1:1").window_counts(["h"], DEFAULT_METRIC, 2.0, 1.0)


def test_custom_metric_and_host_label(prom) -> None:
    fake, server = prom
    fake.add({"__name__": "node_netstat_Udp_RcvbufErrors", "host": "gw-1"}, lambda t: int(t))
    fake.add({"__name__": "node_netstat_Udp_InDatagrams", "host": "gw-1"}, lambda t: int(50 * t))
    metric = metric_from_dict({"drops": ["snmp:Udp.RcvbufErrors"],
                               "packets": ["snmp:Udp.InDatagrams"]})
    source = PrometheusSource(server.url, host_label="host", strip_port=False)
    counts = source.window_counts(["gw-1"], metric, START, END, STEP)["gw-1"]
    assert counts.drops == END - START and counts.packets == 50 * (END - START)


def test_per_step_drops_add_up_to_the_window(prom) -> None:
    fake, server = prom
    add_host(fake, "web-001")
    add_host(fake, "web-003", boot=lambda t: 1.7e9 if t < BASE + 2500 else 1.7e9 + 2500)
    counts = PrometheusSource(server.url).step_counts(["web-001", "web-003"], DEFAULT_METRIC,
                                                      START, END, 4, SCRAPE)
    one = counts["web-001"]
    assert one.usable and one.steps is not None and len(one.steps) == 4
    assert sum(one.steps) == one.drops == expected_drops()
    assert one.packets == 100 * (END - START)
    assert one.to_dict()["steps"] == one.steps
    assert "reboot" in counts["web-003"].problem and counts["web-003"].steps is None
