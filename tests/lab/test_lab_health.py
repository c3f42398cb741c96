"""The lab guest's health check (fleet_lab/vm/guest/fleet-health.py), run on the host over
loopback: its own process (group), free port, drain flag and receiver stats file, stopped by PID.
What the lab's load balancer (fleet_lab.traffic.health_ok, http.client), the VM tests (urllib)
and the drain's connection count rely on; the guests run the same file (tests/lab/
test_lab_vm_boot.py asks a booted guest)."""
from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from fleet_lab import traffic

SERVER = Path(__file__).resolve().parents[2] / "fleet_lab/vm/guest/fleet-health.py"


@pytest.fixture
def health(tmp_path: Path) -> Iterator[Tuple[int, Path, Path]]:
    flag, stats = tmp_path / "maintenance", tmp_path / "udp.json"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--bind", "127.0.0.1", "--port", "0",
                             "--flag", str(flag), "--udp-stats", str(stats)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = int(proc.stdout.readline())
        yield port, flag, stats
    finally:
        proc.kill()
        proc.wait()


def _get(port: int, path: str, method: str = "GET") -> Tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def test_in_service_until_the_drain_flag_exists(health):
    port, flag, _stats = health
    assert _get(port, "/health")[0::2] == (200, b"ok\n")
    assert _get(port, "/")[0::2] == (200, b"ok\n")
    assert traffic.health_ok(port) is True  # the lab's load balancer
    flag.write_text("")
    assert _get(port, "/health?from=lb")[0::2] == (503, b"maintenance\n")
    assert traffic.health_ok(port) is False
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)
    assert err.value.code == 503
    flag.unlink()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
        assert reply.status == 200 and reply.read() == b"ok\n"


def test_udp_counters_as_the_receiver_wrote_them(health):
    port, _flag, stats = health
    status, _headers, body = _get(port, "/udp")
    assert status == 503 and b"not running" in body
    stats.write_text(json.dumps({"received": 1234, "rate_pps": 350}))
    status, headers, body = _get(port, "/udp")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"received": 1234, "rate_pps": 350}


def test_head_unknown_paths_other_methods_and_garbage(health):
    port, _flag, _stats = health
    status, headers, body = _get(port, "/health", "HEAD")
    assert status == 200 and headers["Content-Length"] == "3" and body == b""
    assert _get(port, "/nothing")[0] == 404
    assert _get(port, "/health", "POST")[0] == 405
    for raw in (b"hello\r\n\r\n", b"GET /health\r\n\r\n",
                b"GET /health HTTP/1.0\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(raw)
            assert sock.recv(100).startswith(b"HTTP/1.0 400 "), raw[:20]


def _drip(port: int, seconds: float) -> None:
    """A client that sends its request a byte every 0.3 s, never ending its headers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for _ in range(int(seconds / 0.3)):
                sock.sendall(b"G")
                time.sleep(0.3)
    except OSError:
        pass  # dropped by the server: what it should do


def test_a_silent_or_dripping_client_holds_the_others_only_briefly(health):
    """One thread answers every request: a client that sends nothing, or a byte at a time, is
    dropped unanswered after the server's CLIENT_SECONDS (2 s in all, not per byte) and the
    others are answered (each request here waits at most 10 s)."""
    port, _flag, _stats = health
    dripping = threading.Thread(target=_drip, args=(port, 15.0), daemon=True)
    dripping.start()
    time.sleep(0.5)  # the drip's connection first
    assert _get(port, "/health")[0] == 200  # behind the drip, which sends for 15 s
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        assert _get(port, "/health")[0] == 200  # behind the silent one
        assert silent.recv(100) == b""  # closed, unanswered
    dripping.join(20)
