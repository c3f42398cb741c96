"""The lab's monitoring: a real node_exporter for every server and one real Prometheus.

Sim servers: one node_exporter (Debian's prometheus-node-exporter) per server, reading the
server's own tree (`--path.procfs`, `--path.sysfs`) on a port of its own on 127.0.0.1. VM
guests: node_exporter runs inside the guest (the lab image has it) and QEMU forwards its port.
Prometheus (Debian's prometheus) scrapes them every SCRAPE_SECONDS; its data lives under the
lab's state dir. It serves its API over TLS with the lab CA's certificate and asks for HTTP
basic auth (its web config), as a site's Prometheus would; the credentials are in a 0600 file
and in the pack config the lab writes with `--counters prometheus`.

Each target carries `instance="<host>:9100"` (what a fleet's scrape config gives a server's
node_exporter) and the host's site and rack as labels. `lab up` starts it all, `lab down`
stops it by PID (each PID checked against its command line first).
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import requests
import yaml

from fleet_lab.chatops import procs

EXPORTER = "/usr/bin/prometheus-node-exporter"
PROMETHEUS = "/usr/bin/prometheus"
SCRAPE_SECONDS = 1.0
# a VM guest's node_exporter is scraped less often: under TCG each scrape costs the guest
# emulated CPU time its traffic receiver needs
VM_SCRAPE_SECONDS = 5.0
EXPORTER_PORT = 9100  # node_exporter's port inside a VM guest, and in the instance label
USERNAME = "fleet"
# the collectors a counter window reads (netdev from /proc/net/dev, so that a sim server's
# tree is read rather than the machine's interfaces over netlink), boot time from /proc/stat
EXPORTER_FLAGS = ["--collector.disable-defaults", "--collector.netdev",
                  "--no-collector.netdev.netlink", "--collector.netstat", "--collector.softnet",
                  "--collector.stat", "--collector.netdev.device-exclude=^lo$"]
Progress = Callable[[str], None]


def exporter_argv(listen: str, procfs: str = "/proc", sysfs: str = "/sys") -> List[str]:
    """node_exporter reading `procfs`/`sysfs`, serving on `listen` (host:port)."""
    return [EXPORTER, f"--web.listen-address={listen}", f"--path.procfs={procfs}",
            f"--path.sysfs={sysfs}"] + EXPORTER_FLAGS


def dirs(state_dir: str) -> Dict[str, Path]:
    base = Path(state_dir) / "prometheus"
    return {"base": base, "data": base / "data", "config": base / "prometheus.yml",
            "web": base / "web.yml", "info": base / "monitoring.json",
            "logs": base / "logs"}


def missing_binaries() -> List[str]:
    return [path for path in (EXPORTER, PROMETHEUS) if not os.access(path, os.X_OK)]


def scrape_config(targets: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    """prometheus.yml: one static target per server (`address`, labels `instance`, `site`,
    `rack`), sim servers in job `node`, VM guests in job `node-vm` (scraped less often)."""
    jobs = []
    for job, kind, seconds in (("node", "sim", SCRAPE_SECONDS),
                               ("node-vm", "vm", VM_SCRAPE_SECONDS)):
        static = [{"targets": [t["address"]],
                   "labels": {"instance": f"{host}:{EXPORTER_PORT}", "site": t["site"],
                              "rack": t["rack"]}}
                  for host, t in sorted(targets.items()) if t["kind"] == kind]
        if static:
            jobs.append({"job_name": job, "scrape_interval": f"{seconds:g}s",
                         "scrape_timeout": f"{seconds:g}s", "static_configs": static})
    return {"global": {"scrape_interval": f"{SCRAPE_SECONDS:g}s"}, "scrape_configs": jobs}


def scrape_seconds(targets: Dict[str, Dict[str, str]]) -> float:
    """The longest scrape interval of these targets (a window's read resolution)."""
    return VM_SCRAPE_SECONDS if any(t["kind"] == "vm" for t in targets.values()) \
        else SCRAPE_SECONDS


def _write_private(path: Path, text: str) -> None:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def start(state_dir: str, manifest: Dict[str, Any], progress: Progress = print,
          timeout: float = 60.0) -> Dict[str, Any]:
    """Start an exporter for every sim server and Prometheus over every server; waits until
    every target has been scraped once. Returns the info stop() and the pack config read."""
    missing = missing_binaries()
    if missing:
        raise RuntimeError(f"lab monitoring needs {', '.join(missing)} (Debian packages "
                           "prometheus and prometheus-node-exporter: see system-packages.txt)")
    d = dirs(state_dir)
    for name in ("base", "data", "logs"):
        d[name].mkdir(parents=True, exist_ok=True)
    info: Dict[str, Any] = {"exporters": {}, "targets": {}}
    try:
        for host in manifest["hosts"]:
            labels = {"site": str(host["site"]), "rack": str(host["rack"])}
            kind = str(host.get("backend") or manifest.get("backend"))
            labels["kind"] = kind
            if kind == "vm":
                address = f"127.0.0.1:{host['exporter_port']}"
            else:
                port = procs.free_port()
                address = f"127.0.0.1:{port}"
                tree = str(host["sysroot"])
                pid = procs.spawn(exporter_argv(address, os.path.join(tree, "proc"),
                                                os.path.join(tree, "sys")),
                                  d["logs"] / f"exporter-{host['name']}.log")
                info["exporters"][host["name"]] = pid
                _save(d["info"], info)
            info["targets"][host["name"]] = dict(labels, address=address)
        progress(f"node_exporter: {len(info['exporters'])} on sim servers, "
                 f"{len(info['targets']) - len(info['exporters'])} in VM guests")
        password = secrets.token_urlsafe(18)
        import bcrypt

        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
        tls = Path(manifest["ca"]).parent
        _write_private(d["web"], yaml.safe_dump({
            "tls_server_config": {"cert_file": str(tls / "bmc-cert.pem"),
                                  "key_file": str(tls / "bmc-key.pem")},
            "basic_auth_users": {USERNAME: hashed}}))
        d["config"].write_text(yaml.safe_dump(scrape_config(info["targets"])))
        port = procs.free_port()
        info.update(url=f"https://127.0.0.1:{port}", ca=str(manifest["ca"]),
                    log=str(d["logs"] / "prometheus.log"),
                    username=USERNAME, password=password,
                    scrape_seconds=scrape_seconds(info["targets"]))
        info["prometheus"] = procs.spawn(
            [PROMETHEUS, f"--config.file={d['config']}", f"--storage.tsdb.path={d['data']}",
             f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={d['web']}",
             "--storage.tsdb.retention.time=7d", "--log.level=warn"],
            d["logs"] / "prometheus.log")
        _save(d["info"], info)
        progress(f"prometheus {info['prometheus']} at {info['url']}, scraping every "
                 f"{info['scrape_seconds']:g}s or less")
        wait_targets(info, timeout)
    except BaseException:
        stop(state_dir, lambda _m: None)
        raise
    return info


def _save(path: Path, info: Dict[str, Any]) -> None:
    _write_private(path, json.dumps(info, indent=1))


def read_info(state_dir: str) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(dirs(state_dir)["info"].read_text())
    except (OSError, ValueError):
        return None


def auth_header(info: Dict[str, Any]) -> str:
    """The HTTP Authorization header value for the lab Prometheus."""
    token = base64.b64encode(f"{info['username']}:{info['password']}".encode()).decode()
    return f"Basic {token}"


def targets(info: Dict[str, Any], timeout: float = 5.0) -> Dict[str, Dict[str, Any]]:
    """Prometheus' own view of its targets: host -> {health, last_scrape, error}."""
    answer = requests.get(f"{info['url']}/api/v1/targets", verify=info["ca"], timeout=timeout,
                          headers={"Authorization": auth_header(info)})
    answer.raise_for_status()
    out: Dict[str, Dict[str, Any]] = {}
    for target in answer.json()["data"]["activeTargets"]:
        host = str(target["labels"].get("instance", "")).rsplit(":", 1)[0]
        out[host] = {"health": target.get("health"), "error": target.get("lastError") or "",
                     "last_scrape": target.get("lastScrape")}
    return out


def wait_targets(info: Dict[str, Any], timeout: float) -> None:
    """Wait until Prometheus answers and has scraped every target up."""
    deadline = time.monotonic() + timeout
    last = "not asked yet"
    while time.monotonic() < deadline:
        if not procs.alive(info.get("prometheus")):
            raise RuntimeError(f"prometheus {info.get('prometheus')} exited:\n"
                               f"{procs.tail(Path(info['log']), 20)}")
        try:
            seen = targets(info)
            down = sorted(h for h in info["targets"] if (seen.get(h) or {}).get("health") != "up")
            if not down:
                return
            last = f"{len(down)} target(s) not up: {', '.join(down[:5])}"
        except (requests.RequestException, ValueError, KeyError) as err:
            last = str(err)[:200]
        time.sleep(0.5)
    raise RuntimeError(f"prometheus: not every target up within {timeout:.0f}s ({last})")


def _is(pid: Optional[int], marker: bytes, state_dir: str) -> bool:
    """`pid` is alive and is our process (its command line names `marker` and the state dir)."""
    if not procs.alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return False
    return marker in cmdline and os.path.abspath(state_dir).encode() in cmdline


def running(state_dir: str) -> Dict[str, Any]:
    """{"prometheus": pid or None, "exporters": {host: pid}} of what still runs."""
    info = read_info(state_dir) or {}
    pid = info.get("prometheus")
    return {"prometheus": pid if _is(pid, b"prometheus.yml", state_dir) else None,
            "exporters": {h: p for h, p in (info.get("exporters") or {}).items()
                          if _is(p, b"node-exporter", state_dir)}}


def stop(state_dir: str, progress: Progress = print) -> bool:
    """Stop Prometheus and the exporters by PID. True when something ran."""
    now = running(state_dir)
    pids = ([now["prometheus"]] if now["prometheus"] else []) + list(now["exporters"].values())
    if now["prometheus"]:
        progress(f"stopping prometheus {now['prometheus']}")
    if now["exporters"]:
        progress(f"stopping {len(now['exporters'])} node_exporter(s)")
    for pid in pids:
        procs.stop(pid, 15.0)
    info = dirs(state_dir)["info"]
    if info.exists():
        info.unlink()
    return bool(pids)
