"""Shared helpers for the Redfish tests: a simulated BMC fleet on loopback (real HTTPS)."""
from __future__ import annotations

import contextlib
import random
import socket
import tempfile
from typing import Any, Dict, Iterator, List, Optional

import requests

from fleet_lab.bmcsim.fleet import BmcFleet, FleetConfig
from fleet_rollout.redfish.client import BmcEndpoint

PASSWORD = "Sup3r-Secret-Pa55word!"


def _free_base_port(count: int) -> int:
    for _ in range(50):
        base = random.randint(20000, 60000 - count)
        try:
            sockets = []
            for port in range(base, base + count):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                sockets.append(s)
        except OSError:
            continue
        finally:
            for s in locals().get("sockets", []):
                s.close()
        return base
    raise RuntimeError("no free port range on 127.0.0.1")


@contextlib.contextmanager
def bmc_fleet(vendors: List[str], count: Optional[int] = None, reboot_seconds: float = 0.6,
              faults: Optional[Dict[str, Any]] = None, tls: bool = True,
              backend: Any = None) -> Iterator[BmcFleet]:
    with tempfile.TemporaryDirectory() as state_dir:
        n = count or len(vendors)
        config = FleetConfig(count=n, base_port=_free_base_port(n), vendors=vendors,
                             password=PASSWORD, tls=tls, state_dir=state_dir,
                             reboot_seconds=reboot_seconds, faults=dict(faults or {}))
        fleet = BmcFleet(config, backend).start_in_thread()
        try:
            yield fleet
        finally:
            fleet.stop()


def endpoint(fleet: BmcFleet, index: int = 0, **kw: Any) -> BmcEndpoint:
    opts: Dict[str, Any] = {"ca_bundle": fleet.ca_path, "backoff": 0.05, "max_backoff": 2.0,
                            "timeout": 5.0}
    opts.update(kw)
    return BmcEndpoint(fleet.bmcs[index].name, fleet.url(index), "admin", PASSWORD, **opts)


def admin(fleet: BmcFleet, index: int, method: str = "GET", path: str = "state",
          body: Any = None) -> Any:
    """The simulator's lab-only admin endpoint (faults, state), over the same HTTPS port."""
    verify: Any = fleet.ca_path if fleet.config.tls else False
    resp = requests.request(method, f"{fleet.url(index)}/_sim/{path}", json=body, verify=verify,
                            timeout=10)
    resp.raise_for_status()
    return resp.json() if resp.content else None


def set_faults(fleet: BmcFleet, index: int, **faults: Any) -> None:
    admin(fleet, index, "POST", "faults", faults)


def state(fleet: BmcFleet, index: int = 0) -> Dict[str, Any]:
    return admin(fleet, index)


def reset_counters(fleet: BmcFleet, index: int = 0) -> None:
    admin(fleet, index, "DELETE", "counters")


def writes(doc: Dict[str, Any]) -> int:
    """PATCH/POST/DELETE requests a BMC served (login and logout are counted apart)."""
    counters = doc["counters"]
    return counters.get("PATCH", 0) + counters.get("POST", 0) + counters.get("DELETE", 0)


FAST = {"graceful": 5.0, "force": 10.0, "boot": 30.0, "poll": 0.1}


def host_boot_id(fleet: BmcFleet, index: int = 0) -> Any:
    """Stand-in for the host side's OS boot id (Ansible reads /proc/sys/kernel/random/boot_id in
    a rollout): the simulator's boot counter while its OS runs, None while it is down or booting.
    """
    def probe() -> Optional[str]:
        return state(fleet, index).get("host_boot_id")
    return probe


def server_requests(doc: Dict[str, Any]) -> Dict[str, int]:
    """Requests the simulated BMC served, by method (sessions included, lab admin excluded)."""
    out: Dict[str, int] = {}
    for key, value in doc["counters"].items():
        method = key.split("_", 1)[1] if key.startswith("session_") else key
        if method in ("GET", "POST", "PATCH", "DELETE", "PUT"):
            out[method] = out.get(method, 0) + value
    return out


# ---------------------------------------------------------------- malformed answers (adversarial)
def serve_override(fleet: BmcFleet, index: int, path: str, body: Any = None,
                   raw: Optional[str] = None, pad_bytes: int = 0, status: int = 200) -> None:
    """Make every GET of `path` on BMC `index` answer `body` (any JSON value) or `raw` text."""
    import json

    # sent as text, so NaN/Infinity (which Python's json writes) reach the client as such
    text = raw if raw is not None else json.dumps(body)
    admin(fleet, index, "POST", "responses",
          {"path": path, "status": status, "pad_bytes": pad_bytes, "raw": text})


def clear_overrides(fleet: BmcFleet, index: int) -> None:
    admin(fleet, index, "DELETE", "responses")


def real_document(fleet: BmcFleet, index: int, path: str) -> Any:
    """The simulator's own answer at `path` (HTTP basic auth, a plain GET)."""
    resp = requests.get(f"{fleet.url(index)}{path}", auth=("admin", PASSWORD),
                        verify=fleet.ca_path if fleet.config.tls else False, timeout=10)
    resp.raise_for_status()
    return resp.json()


def bmc_uris(fleet: BmcFleet, index: int) -> Dict[str, str]:
    """The simulated BMC's resource URIs (root, system, bios, settings, registry_json, ...)."""
    from fleet_lab.bmcsim import payloads

    return payloads.uris(fleet.bmcs[index])


def data_writes(doc: Dict[str, Any]) -> int:
    """Write requests a BMC served other than session login/logout (PUT included)."""
    counters = doc["counters"]
    return sum(counters.get(m, 0) for m in ("POST", "PATCH", "PUT", "DELETE"))
