"""Adversarial: Prometheus answers and host-side counter snapshots of the wrong shape. Each is
a clear PrometheusError / ConfigError naming the query or snapshot field (and the host when
known), bodies are read with a cap, and NaN/Inf samples are missing samples, not numbers.

The answers come from a stand-in HTTP server: a real Prometheus never sends them (malformed
JSON, wrong types, huge bodies).
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest

from fleet_rollout.counters import prometheus
from fleet_rollout.counters.collector import SCHEMA
from fleet_rollout.counters.deltas import window_from_snapshots
from fleet_rollout.counters.metric import DEFAULT_METRIC
from fleet_rollout.counters.prometheus import PrometheusError, PrometheusSource
from fleet_rollout.errors import ConfigError

START, END = 1000.0, 1600.0


class Served:
    """What the stand-in Prometheus answers next (a body, or `size` bytes of padding)."""

    def __init__(self) -> None:
        self.body: bytes = b""
        self.size = 0
        self.sent = 0


@pytest.fixture()
def prom() -> Iterator[Any]:
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()  # no Content-Length: the client must stop by itself
            try:
                if served.size:
                    chunk = b" " * 65536
                    while served.sent < served.size:
                        self.wfile.write(chunk)
                        served.sent += len(chunk)
                else:
                    self.wfile.write(served.body)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _answer(data: Any) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


def _matrix(result: Any) -> Any:
    return {"resultType": "matrix", "result": result}


def _series(values: Any, instance: Any = "web-1:9100", **labels: Any) -> Dict[str, Any]:
    metric = {"__name__": "node_network_receive_packets_total", "device": "eth0",
              "instance": instance}
    metric.update(labels)
    return {"metric": metric, "values": values}


BAD_ANSWERS: List[Any] = [
    (["not", "an", "object"], "data is an array"),
    (_matrix({"web-1": []}), "data.result is an object"),
    (_matrix(["series"]), "data.result[0] is a string"),
    (_matrix([{"metric": ["x"], "values": []}]), "metric is not an object of string labels"),
    (_matrix([_series([], instance=5)]), "metric is not an object of string labels"),
    (_matrix([_series({"t": 1})]), "values is an object"),
    (_matrix([_series([[1000, "1", "extra"]])]), "expected a [time, \"value\"] pair"),
    (_matrix([_series(["1000"])]), "expected a [time, \"value\"] pair"),
    (_matrix([_series([["1000", "1"]])]), "sample time is a string"),
    (_matrix([_series([[1000, "lots"]])]), "'lots' is not a number"),
    (_matrix([_series([[1000, None]])]), "sample value is null"),
    (_matrix([_series([[1000, ["1"]]])]), "sample value is an array"),
    (_matrix([{"metric": {"instance": "web-1:9100"}}]), "has neither value nor values"),
]


@pytest.mark.parametrize("data,why", BAD_ANSWERS)
def test_wrong_types_are_clear_errors(prom: Any, data: Any, why: str) -> None:
    served, url = prom
    served.body = _answer(data)
    with pytest.raises(PrometheusError) as err:
        PrometheusSource(url).window_counts(["web-1"], DEFAULT_METRIC, START, END)
    text = str(err.value)
    assert why in text, text
    assert "query {__name__=~" in text  # names the query it was answering


def test_non_object_answers(prom: Any) -> None:
    served, url = prom
    for body, why in ((b"[1, 2]", "answer is an array"), (b"[" * 100000, "not JSON"),
                      (b'{"status": ["success"]}', "status"),
                      (b'{"status": "success", "data": null}', "data is null")):
        served.body = body
        with pytest.raises(PrometheusError, match=r"\(query up\)"):
            with pytest.raises(PrometheusError, match=why):
                PrometheusSource(url).query("up", START)
            raise PrometheusError("(query up)")


def test_series_error_names_the_host(prom: Any) -> None:
    served, url = prom
    served.body = _answer(_matrix([_series([[1000, {"v": 1}]])]))
    with pytest.raises(PrometheusError, match=r"\(web-1:9100\)"):
        PrometheusSource(url).window_counts(["web-1"], DEFAULT_METRIC, START, END)


def test_nan_and_inf_samples_are_missing_not_numbers(prom: Any) -> None:
    served, url = prom
    values = [[1000 + 60 * i, v] for i, v in enumerate(["NaN", "+Inf", "-Inf", "5"])]
    served.body = _answer(_matrix([_series(values)]))
    counts = PrometheusSource(url).window_counts(["web-1"], DEFAULT_METRIC, START, END)
    window = counts["web-1"]
    # only the "5" sample of the 11 expected counts; NaN/Inf are neither numbers nor errors
    assert window.coverage == pytest.approx(1 / 11)
    assert window.packets == 0 and window.drops == 0


def test_huge_answer_is_refused_while_streaming(prom: Any, monkeypatch: Any) -> None:
    served, url = prom
    monkeypatch.setattr(prometheus, "MAX_BODY_BYTES", 1024 * 1024)
    served.size = 8 * 1024 * 1024
    with pytest.raises(PrometheusError, match="answer larger than 1048576 bytes"):
        PrometheusSource(url).query("up", START)
    assert served.sent < 8 * 1024 * 1024  # the client hung up; it did not read it all


def test_default_cap_is_16_mib() -> None:
    assert prometheus.MAX_BODY_BYTES == 16 * 1024 * 1024


# ------------------------------------------------------------------ host-side snapshots
def _snapshot(**changes: Any) -> Dict[str, Any]:
    doc: Dict[str, Any] = {
        "schema": SCHEMA, "host": "web-1", "boot_id": "b1", "time": 1000.0,
        "interfaces": {"eth0": {"statistics": {"rx_packets": 10, "rx_dropped": 1},
                                "ethtool": None}},
        "softnet": [{"cpu": 0, "processed": 5, "dropped": 0}],
        "snmp": {"Udp": {"RcvbufErrors": 0}}, "snmp6": None, "errors": [],
    }
    doc.update(changes)
    return doc


@pytest.mark.parametrize("changes,why", [
    ({"interfaces": {"eth0": ["statistics"]}}, "interfaces.eth0 must be an object"),
    ({"interfaces": {"eth0": {"statistics": ["rx_packets"]}}}, "statistics must be an object"),
    ({"interfaces": {"eth0": {"statistics": {"rx_packets": "10"}}}},
     "statistics.rx_packets must be an integer"),
    ({"interfaces": {"eth0": {"statistics": {"rx_packets": True}}}},
     "statistics.rx_packets must be an integer"),
    ({"softnet": {"cpu0": 1}}, "softnet must be a list"),
    ({"softnet": ["0 0 0"]}, "softnet[0] must be an object"),
    ({"snmp": {"Udp": [1]}}, "snmp.Udp must be an object"),
    ({"snmp": "Udp"}, "snmp must be an object"),
    ({"snmp6": {"Ip6InDiscards": 1.5}}, "snmp6.Ip6InDiscards must be an integer"),
    ({"time": float("inf")}, "time must be a number"),
    ({"host": ["web-1"]}, "host must be a string"),
])
def test_snapshot_fields_are_type_checked(changes: Dict[str, Any], why: str) -> None:
    start = _snapshot()
    end = _snapshot(time=1600.0)
    end.update(changes)
    with pytest.raises(ConfigError) as err:
        window_from_snapshots(start, end, DEFAULT_METRIC, where="hosts.web-1.post")
    assert "hosts.web-1.post.end" in str(err.value) and why in str(err.value), str(err.value)


def test_good_snapshots_still_difference() -> None:
    end = _snapshot(time=1600.0, interfaces={"eth0": {"statistics": {"rx_packets": 110,
                                                                     "rx_dropped": 3},
                                                      "ethtool": None}})
    counts = window_from_snapshots(_snapshot(), end, DEFAULT_METRIC)
    assert counts.packets == 100 and counts.drops == 2
