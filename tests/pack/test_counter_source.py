"""The pack config's `counters` section: the collector by default, a Prometheus with its URL,
TLS, secret auth header and instance label mapping; each mistake named by its field before
anything is read. The auth header goes to that server only, never along a redirect."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest

from fleet_rollout.config import load_pack_config
from fleet_rollout.counter_source import CounterSource, load_counter_source
from fleet_rollout.counters.prometheus import PrometheusError
from fleet_rollout.errors import ConfigError

CREDS = {"lab": {"username": "u", "password": "p"}}
GOOD = {"source": "prometheus",
        "prometheus": {"url": "https://prom.example.net:9090", "auth_header": "Bearer s3cr3t",
                       "ca_bundle": "/etc/ssl/site.pem", "host_label": "fleet_host",
                       "strip_port": False, "resolution": 30, "read_delay": 45}}


def test_the_collector_is_the_default_and_prometheus_is_read_whole() -> None:
    assert load_pack_config({"credentials": CREDS}).counters == CounterSource("collector")
    config = load_pack_config({"credentials": CREDS, "counters": GOOD})
    prom = config.counters.prometheus
    assert config.counters.source == "prometheus" and prom is not None
    assert (prom.url, prom.host_label, prom.strip_port, prom.resolution, prom.read_delay,
            prom.timeout) == ("https://prom.example.net:9090", "fleet_host", False, 30.0, 45.0,
                              30.0)
    # the secret header is never shown
    assert "s3cr3t" not in repr(config.counters) and "s3cr3t" not in repr(config)
    with pytest.raises(ConfigError, match="ca_bundle /etc/ssl/site.pem: cannot read"):
        prom.source()
    source = load_pack_config({"credentials": CREDS, "counters": dict(GOOD, prometheus=dict(
        GOOD["prometheus"], ca_bundle=""))}).counters.prometheus.source()
    assert source.headers == {"Authorization": "Bearer s3cr3t"}
    assert source.host_label == "fleet_host" and source.strip_port is False


@pytest.mark.parametrize("counters,field", [
    ({"source": "graphite"}, "counters.source 'graphite'"),
    ({"source": "prometheus"}, "counters.prometheus.url is not set"),
    ({"source": "prometheus", "prometheus": {"url": "prom:9090"}}, "counters.prometheus.url"),
    ({"source": "prometheus", "prometheus": {"url": "http://prom:9090"}},
     "plain http; use https"),
    ({"source": "prometheus", "prometheus": {"url": "https://u:pw@prom:9090"}},
     "must not hold credentials"),
    ({"source": "prometheus", "prometheus": {"url": "https://prom", "resolution": 0}},
     "counters.prometheus.resolution must be a number of seconds"),
    ({"source": "prometheus", "prometheus": {"url": "https://prom", "read_delay": "30"}},
     "counters.prometheus.read_delay"),
    ({"source": "prometheus", "prometheus": {"url": "https://prom", "strip_port": "yes"}},
     "counters.prometheus.strip_port must be true or false"),
    ({"source": "prometheus", "prometheus": {"url": "https://prom",
                                             "auth_header": "Bearer x\r\nX-Evil: 1"}},
     "auth_header must be one line"),
    ({"source": "prometheus", "prometheus": {"url": "https://prom", "token": "x"}},
     "unknown key\\(s\\) token"),
    ({"sources": "prometheus"}, "counters: unknown key\\(s\\) sources"),
])
def test_mistakes_are_named_by_their_field(counters: Dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        load_pack_config({"credentials": CREDS, "counters": counters})


def test_an_unused_prometheus_section_with_st2s_defaults_is_left_alone() -> None:
    """StackStorm fills a config's missing keys with the schema's defaults: a collector
    config then holds a prometheus section without a url, which is not read."""
    defaults = {"ca_bundle": "", "auth_header": "", "host_label": "instance",
                "strip_port": True, "resolution": 15, "read_delay": 30, "timeout": 30}
    config = load_pack_config({"credentials": CREDS, "counters": {
        "source": "collector", "prometheus": defaults}})
    assert config.counters == CounterSource("collector")
    with pytest.raises(ConfigError, match="counters.prometheus.url must be"):
        load_pack_config({"credentials": CREDS, "counters": {
            "source": "prometheus", "prometheus": defaults}})


def test_plain_http_only_where_the_config_allows_it() -> None:
    lab = {"source": "prometheus", "prometheus": {"url": "http://127.0.0.1:9090"}}
    assert load_counter_source(lab, allow_http=True).prometheus.url == "http://127.0.0.1:9090"


@pytest.fixture()
def redirecting() -> Iterator[Dict[str, Any]]:
    """Two stand-in servers (a redirect is not an answer a Prometheus gives): the first
    redirects every query to the second; both record the Authorization header they got."""
    seen: Dict[str, List[Any]] = {"first": [], "second": []}

    def handler(name: str, target: List[str]) -> Any:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen[name].append(self.headers.get("Authorization"))
                if target:
                    self.send_response(307)
                    self.send_header("Location", target[0] + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass
        return Handler

    target: List[str] = []
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler("first", target)),
               ThreadingHTTPServer(("127.0.0.1", 0), handler("second", []))]
    target.append(f"http://127.0.0.1:{servers[1].server_address[1]}")
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
    try:
        yield {"url": f"http://127.0.0.1:{servers[0].server_address[1]}", "seen": seen}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_the_auth_header_never_follows_a_redirect(redirecting: Dict[str, Any]) -> None:
    settings = load_counter_source({"source": "prometheus", "prometheus": {
        "url": redirecting["url"], "auth_header": "Bearer s3cr3t"}}, allow_http=True)
    try:
        settings.prometheus.source().query("up", 1.0)
    except PrometheusError as err:  # whatever the answer, the secret is not in the error
        assert "s3cr3t" not in str(err)
    assert redirecting["seen"]["first"] == ["Bearer s3cr3t"]
    assert redirecting["seen"]["second"] in ([], [None])
