"""OpenStack's sushy-tools Redfish emulator as a second, independent BMC for interop tests.

We did not write it: its Redfish behaviour is what it is (plain http, HTTP basic auth only, no
sessions, no Links.Sessions, BIOS settings applied at once, no BootProgress/LastResetTime, a
GracefulRestart of the libvirt `test:///default` domain keeps PowerState On). It runs as a
subprocess on 127.0.0.1 with its own config file and htpasswd, in its own process group, and is
stopped by its PID.

One lab-only addition runs inside the emulator's process and does not touch its Redfish code: a
host-side stand-in, the OS boot id of each libvirt domain, new whenever the domain is started or
rebooted (observed by wrapping libvirt's virDomain.create/reboot/destroy/shutdown there), served on
a second port as `GET /boot_id/<domain uuid>` (503 while the domain is down or "booting" for
`boot_seconds` after a restart). In a rollout this is the OS boot id that Ansible reads.

Requests are counted from the emulator's own access log (werkzeug's), which `access_log()` parses.

    python -m fleet_lab.bmcsim.sushy_lab --serve CONFIG HOST_PORT BOOT_SECONDS
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

ACCESS_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+(?:\x1b\[[0-9;]*m)*" '
                         r'(\d{3})')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def available() -> Optional[str]:
    """None if sushy-tools and libvirt-python can run here, else why not."""
    try:
        import libvirt  # noqa: F401
        import sushy_tools.emulator.main  # noqa: F401
    except Exception as err:  # ImportError, or libvirt's shared library missing
        return f"sushy-tools/libvirt-python not importable: {err}"
    return None


class SushyLab:
    """One sushy-tools emulator (libvirt test:///default, basic auth) plus the host stand-in."""

    def __init__(self, username: str = "admin", password: str = "sushy-Pa55word!",
                 boot_seconds: float = 0.0) -> None:
        self.username = username
        self.password = password
        self.boot_seconds = boot_seconds
        self.port = 0
        self.host_port = 0
        self.proc: Optional[subprocess.Popen] = None
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self.log_path = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SushyLab:
        import bcrypt

        self._tmp = tempfile.TemporaryDirectory(prefix="sushy-lab-")
        tmp = self._tmp.name
        htpasswd = os.path.join(tmp, "htpasswd")
        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        with open(htpasswd, "w") as handle:
            handle.write(f"{self.username}:{digest}\n")
        self.port, self.host_port = free_port(), free_port()
        config = os.path.join(tmp, "emulator.conf")
        with open(config, "w") as handle:
            handle.write(f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
                         f"SUSHY_EMULATOR_LISTEN_PORT = {self.port}\n"
                         f"SUSHY_EMULATOR_LIBVIRT_URI = 'test:///default'\n"
                         f"SUSHY_EMULATOR_AUTH_FILE = {htpasswd!r}\n"
                         f"SUSHY_EMULATOR_STATE_DIR = {tmp!r}\n")
        self.log_path = os.path.join(tmp, "emulator.log")
        from fleet_runtime.paths import REPO_ROOT

        root = str(REPO_ROOT)
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("SUSHY_EMULATOR_CONFIG", None)
        env["TMPDIR"] = tmp  # sushy's memoize keeps its databases under the temp directory
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleet_lab.bmcsim.sushy_lab", "--serve", config,
                 str(self.host_port), str(self.boot_seconds)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=tmp)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"sushy-emulator exited: {self.log()[-2000:]}")
            try:
                requests.get(f"http://127.0.0.1:{self.host_port}/ready", timeout=2)
                requests.get(f"{self.url}/redfish/v1/", timeout=2).raise_for_status()
                return
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("sushy-emulator did not answer within 60 s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # its own group: its PID is the group id
                proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> SushyLab:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ observing it
    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def access_log(self) -> List[Tuple[str, str, int]]:
        """(method, path, status) of every request the emulator logged, in order."""
        return [(m.group(1), m.group(2).split("?", 1)[0], int(m.group(3)))
                for m in ACCESS_LINE.finditer(self.log())]

    def host_boot_id(self, system: str) -> Optional[str]:
        """Host-side stand-in: the domain's OS boot id, None while it is down or booting."""
        import requests

        try:
            resp = requests.get(f"http://127.0.0.1:{self.host_port}/boot_id/{system}", timeout=5)
        except requests.RequestException:
            return None
        if resp.status_code != 200:
            return None
        return str(resp.json()["boot_id"])


def interop_cycle(endpoint: Any, lab: SushyLab, timeouts: Any) -> Dict[str, Any]:
    """What bench-redfish and the interop tests run against the emulator, in one session:
    discover, snapshot, a raw attribute change (ProcTurboMode), commit, one reset confirmed by
    the host-side stand-in, verify the values, then put the attribute back (no second reset)."""
    from fleet_rollout.redfish import bios as rf_bios
    from fleet_rollout.redfish import power as rf_power
    from fleet_rollout.redfish.client import RedfishSession
    from fleet_rollout.redfish.discovery import discover

    with RedfishSession(endpoint) as session:
        ctx = discover(session)
        system = ctx.system_uri.rstrip("/").rsplit("/", 1)[-1]
        snap = rf_bios.snapshot(session, ctx)
        current = rf_bios.read_state(session, ctx).current
        old = current.get("ProcTurboMode")
        targets = {"ProcTurboMode": "Disabled" if old == "Enabled" else "Enabled"}
        staged = rf_bios.stage(session, ctx, targets)
        committed = rf_bios.commit(session, ctx, staged)
        reset = rf_power.reset(session, ctx, timeouts.graceful, timeouts.force, timeouts.poll,
                               host_boot_id=lambda: lab.host_boot_id(system))
        applied = rf_power.wait_applied(session, ctx, targets, snap.settings_time, [],
                                        timeouts.boot, timeouts.poll)
        restored = rf_bios.stage(session, ctx, {"ProcTurboMode": old})
    return {"requests": dict(session.requests), "sent": list(session.sent),
            "reset": reset.to_dict(), "commit": committed.method, "applied": applied.ok,
            "restored": restored.changed}


# ---------------------------------------------------------------------- inside the emulator
def _install_host_standin(host_port: int, boot_seconds: float) -> None:
    import http.server

    import libvirt

    boots: Dict[str, Dict[str, Any]] = {}
    lock = threading.Lock()
    conn = libvirt.open("test:///default")  # one connection for the stand-in's lifetime

    def booted(domain: Any) -> None:
        with lock:
            boots[domain.UUIDString()] = {"boot_id": str(uuid.uuid4()),
                                          "up_at": time.monotonic() + boot_seconds}

    def stopped(domain: Any) -> None:
        with lock:
            boots[domain.UUIDString()] = {"boot_id": None, "up_at": 0.0}

    def wrap(name: str, after: Any) -> None:
        original = getattr(libvirt.virDomain, name)

        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            after(self)
            return result

        setattr(libvirt.virDomain, name, wrapped)

    wrap("create", booted)
    wrap("reboot", booted)
    wrap("destroy", stopped)
    wrap("shutdown", stopped)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the emulator's log its own
            return

        def do_GET(self) -> None:
            if self.path == "/ready":
                return self._send(200, {"ready": True})
            if not self.path.startswith("/boot_id/"):
                return self._send(404, {"error": "unknown"})
            key = self.path.rsplit("/", 1)[-1]
            try:
                try:
                    domain = conn.lookupByUUIDString(key)
                except libvirt.libvirtError:
                    domain = conn.lookupByName(key)
                active = bool(domain.isActive())
                with lock:
                    info = boots.setdefault(domain.UUIDString(), {"boot_id": str(uuid.uuid4()),
                                                                  "up_at": 0.0})
            except libvirt.libvirtError as err:
                return self._send(404, {"error": str(err)})
            if not active or not info["boot_id"] or time.monotonic() < info["up_at"]:
                return self._send(503, {"boot_id": None})
            return self._send(200, {"boot_id": info["boot_id"]})

        def _send(self, status: int, body: Dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", host_port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def _serve(config: str, host_port: int, boot_seconds: float) -> int:
    _install_host_standin(host_port, boot_seconds)
    from sushy_tools.emulator import main as emulator

    sys.argv = ["sushy-emulator", "--config", config]
    return int(emulator.main() or 0)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        sys.exit(_serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
    print(__doc__)
    sys.exit(2)
