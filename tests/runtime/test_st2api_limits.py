"""What the runtime's APIs refuse and cap: credentials of a user removed from the users file,
passwords bcrypt cannot take whole, request bodies over the cap, connections over the cap
(fleet_runtime/st2api/http.py, fleet_runtime/api.py)."""
from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from runtime_support import engine, fixture_home
from st2api_support import RUNTIME_PACK, St2Api

from fleet_runtime.st2api import http as st2http


@pytest.fixture
def api(tmp_path: Path) -> Iterator[St2Api]:
    server = St2Api(tmp_path, [RUNTIME_PACK]).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_user_removed_from_the_users_file_loses_tokens_and_api_keys(api: St2Api) -> None:
    key = api.http("POST", "/api/v1/apikeys", user="sre-bob", json={}).json()["key"]
    token = api.token("sre-bob")
    for headers in ({"St2-Api-Key": key}, {"X-Auth-Token": token}):
        assert requests.get(api.base + "/api/v1/executions", headers=headers,
                            timeout=10).status_code == 200
    users = api.home / "st2api-users"
    users.write_text("".join(line + "\n" for line in users.read_text().splitlines()
                             if not line.startswith("sre-bob:")))
    for headers in ({"St2-Api-Key": key}, {"X-Auth-Token": token}):
        assert requests.get(api.base + "/api/v1/executions", headers=headers,
                            timeout=10).status_code == 401


def test_api_keys_expire_after_the_configured_days(tmp_path: Path) -> None:
    """Unlike st2's, an API key stops working api_key_ttl_days after its creation, and its
    view says when."""
    from fleet_runtime.st2api.credentials import Credentials

    creds = Credentials(str(tmp_path / "creds.db"), api_key_ttl=3600)
    made = creds.create_api_key("sre-bob")
    assert creds.user_for_api_key(made["key"]) == "sre-bob"
    assert made["expired"] is False and made["expires_at"] > made["created_at"]
    old = Credentials(str(tmp_path / "creds.db"), api_key_ttl=-1)  # the same key, expired
    assert old.user_for_api_key(made["key"]) is None
    assert old.api_key(made["id"])["expired"] is True


def test_the_api_key_lifetime_is_a_setting_checked_by_name(tmp_path: Path) -> None:
    import yaml

    from fleet_runtime.home import RuntimeHome
    from fleet_runtime.runtime_errors import MetadataError

    home = tmp_path / "home"
    home.mkdir()
    assert RuntimeHome(str(home)).api_key_ttl_days == 90
    (home / "config.yaml").write_text(yaml.safe_dump({"api_key_ttl_days": 7}))
    assert RuntimeHome(str(home)).api_key_ttl_days == 7
    (home / "config.yaml").write_text(yaml.safe_dump({"api_key_ttl_days": 0}))
    with pytest.raises(MetadataError, match="api_key_ttl_days"):
        print(RuntimeHome(str(home)).api_key_ttl_days)


def test_a_password_longer_than_bcrypt_takes_is_refused_clearly(api: St2Api) -> None:
    added = api.fleet(["api", "user", "long-pw"], stdin="x" * 100 + "\n", check=False)
    assert added.returncode != 0 and "longer than 72 bytes" in added.stderr
    login = requests.post(api.base + "/auth/v1/tokens", auth=("sre-bob", "y" * 100),
                          timeout=30)
    assert login.status_code == 401, login.text  # not a 500 from bcrypt


def test_the_action_api_caps_request_bodies(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rt = engine(fixture_home(tmp_path / "home", monkeypatch))
    try:
        big = {"action": "rt_test.greet", "parameters": {"name": "x" * (st2http.MAX_BODY + 1)}}
        r = requests.post(f"{rt.api.url}/executions", json=big, timeout=30,
                          headers={"X-Auth-Token": rt.api.issue_token("carol")})
        assert r.status_code == 413
    finally:
        rt.close()


def test_connections_over_the_cap_are_closed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st2http, "MAX_CONNECTIONS", 2)
    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            release.wait(20)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = st2http.BoundedHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    held = []
    try:
        for _ in range(2):
            s = socket.create_connection(server.server_address, timeout=10)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            held.append(s)
        time.sleep(0.5)
        extra = socket.create_connection(server.server_address, timeout=10)
        extra.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert extra.recv(100) == b""  # closed without an answer
        release.set()
        for s in held:
            assert s.recv(100).startswith(b"HTTP/1.0 204")
    finally:
        release.set()
        for s in held:
            s.close()
        server.shutdown()
        server.server_close()
