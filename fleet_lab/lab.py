"""The lab: a BMC simulator, servers (sim trees or QEMU VMs) and traffic in one daemon process.

A lab runs one backend for its `hosts` servers; a `vm` lab may also run `sim_hosts` more servers
on the `sim` backend beside its VMs (same BMC simulator, vendor, site and rack scheme, counter
model and traffic settings): cheap unchanged hosts, e.g. the control group of a rollout that
targets the VMs (group `lab_vm` of the inventory).

`fleet-rollout lab up` writes the lab's config into its state directory, starts the daemon
(`python -m fleet_lab.daemon`), shows its progress, and writes the Ansible inventory and the pack
config the lab needs. With `chatops` it also starts the ChatOps stack (fleet_lab.chatops.stack:
st2 users, the runtime's st2 API with its engine, ngircd, errbot + err-stackstorm) and points
the pack's chat messages at it. `lab down` stops the daemon, which stops every VM, and the
ChatOps processes by PID; a cleanup pass then kills anything a crashed daemon left behind.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

import yaml

from fleet_lab import monitoring
from fleet_lab.chatops import stack
from fleet_runtime.paths import REPO_ROOT

REPO = str(REPO_ROOT)
DEFAULT_STATE_DIR = os.path.join(REPO, ".lab")
DEFAULT_INVENTORY = os.path.join(REPO, "inventory", "lab.yml")
MODELS = {"dell-idrac8": "PowerEdge R630", "dell-idrac9": "PowerEdge R640",
          "hpe-ilo4": "ProLiant DL360 Gen9", "hpe-ilo5": "ProLiant DL360 Gen10",
          "lenovo-xcc": "ThinkSystem SR650", "supermicro": "SYS-1029U-TRT", "generic": "3500"}


BACKENDS = ("sim", "vm")
COUNTER_SOURCES = ("collector", "prometheus")
MAX_MONITORED = 500  # servers whose node_exporters one lab runs (about 15 MB each)
GUEST_RCVBUF_MAX = 212992  # a guest's net.core.rmem_max: what SO_RCVBUF can ask for there


@dataclass
class LabConfig:
    hosts: int
    backend: str = "sim"  # sim | vm
    vendors: List[str] = field(default_factory=lambda: ["generic"])
    sites: int = 2
    hosts_per_rack: int = 4
    base_port: int = 0  # 0: pick a free range
    reboot_seconds: float = 0.0  # 0: backend default (sim 3 s, vm 4 s + the real VM boot)
    pps: int = 0  # traffic per server, 0: backend default (3500 x rate_scale)
    rate_scale: float = 1.0  # scales receive rates and the default traffic (saves CPU)
    username: str = "admin"
    password: str = ""  # generated when empty; kept in the state dir (0600) and pack config
    initial_bios: Dict[str, str] = field(default_factory=lambda: {
        "snoop_mode": "early", "node_interleaving": "disabled"})
    approvers: List[str] = field(default_factory=list)  # empty: the runtime's user
    chatops_users: List[str] = field(default_factory=lambda: ["chatops_bot"])
    chatops: bool = False  # also IRC + errbot + the st2 API (fleet_lab.chatops.stack)
    # backend "vm" only: this many more servers on the sim backend, beside the VMs; they come
    # after them (lab-007.. after 6 VMs) and take the same site and rack scheme
    sim_hosts: int = 0
    # backend "vm" only: the guest UDP receiver's SO_RCVBUF in bytes (the guest kernel doubles
    # it and caps the request at its net.core.rmem_max, 212992); 0: the receiver's own 32768.
    # A larger buffer lets a guest that a busy host stalls for a second keep what arrived
    # meanwhile, so its drops come from its receive rate, not from the host's load
    guest_rcvbuf: int = 0
    # a real node_exporter for every server and one real Prometheus scraping them
    # (fleet_lab.monitoring)
    prometheus: bool = False
    # where the pack config the lab writes reads counter windows: collector (the hosts
    # sample themselves, over Ansible) or prometheus (the lab's Prometheus; needs prometheus)
    counters: str = "collector"

    def validate(self) -> None:
        """ValueError naming the field when this lab cannot be started."""
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: one of {', '.join(BACKENDS)}")
        if self.hosts < 1:
            raise ValueError("hosts must be at least 1")
        if self.sim_hosts < 0:
            raise ValueError("sim_hosts must be 0 or more")
        if not 0 <= self.guest_rcvbuf <= GUEST_RCVBUF_MAX:
            raise ValueError(f"guest_rcvbuf {self.guest_rcvbuf}: 0 (the receiver's default) to "
                             f"{GUEST_RCVBUF_MAX} bytes")
        if self.counters not in COUNTER_SOURCES:
            raise ValueError(f"counters {self.counters!r}: one of {', '.join(COUNTER_SOURCES)}")
        if self.prometheus and self.total_hosts() > MAX_MONITORED:
            raise ValueError(f"prometheus: a lab of at most {MAX_MONITORED} servers runs a "
                             f"node_exporter for each; {self.total_hosts()} asked (leave "
                             "prometheus out)")
        if self.counters == "prometheus" and not self.prometheus:
            raise ValueError("counters 'prometheus' reads the lab's Prometheus: start it too "
                             "(prometheus)")
        if self.sim_hosts and self.backend != "vm":
            raise ValueError("sim_hosts adds sim servers beside the VMs of a vm lab; a sim lab "
                             f"is all sim servers already: ask for {self.hosts + self.sim_hosts} "
                             "hosts instead")

    def total_hosts(self) -> int:
        """Every server of the lab: the main backend's and the sim servers beside them."""
        return self.hosts + max(0, self.sim_hosts)

    def host_names(self) -> List[str]:
        return [f"lab-{i + 1:03d}" for i in range(self.total_hosts())]

    def backend_of(self, index: int) -> str:
        """The backend server `index` runs on: the main one for the first `hosts`, then sim."""
        return self.backend if index < self.hosts else "sim"

    def backends(self) -> Dict[str, int]:
        """{backend: servers}, the main backend first."""
        counts: Dict[str, int] = {}
        for index in range(self.total_hosts()):
            kind = self.backend_of(index)
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def site_of(self, index: int) -> str:
        return f"site-{chr(ord('a') + index % max(1, self.sites))}"

    def rack_of(self, index: int) -> str:
        per_site = index // max(1, self.sites)
        return f"rack-{per_site // max(1, self.hosts_per_rack) + 1}"


def paths(state_dir: str) -> Dict[str, str]:
    return {
        "config": os.path.join(state_dir, "lab-config.json"),
        "manifest": os.path.join(state_dir, "lab.json"),
        "progress": os.path.join(state_dir, "progress.log"),
        "log": os.path.join(state_dir, "daemon.log"),
        "pid": os.path.join(state_dir, "daemon.pid"),
        "traffic": os.path.join(state_dir, "traffic.json"),
        "pack_config": os.path.join(state_dir, "fleet_rollout.yaml"),
        "hosts": os.path.join(state_dir, "hosts"),
    }


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def save_config(state_dir: str, config: LabConfig) -> None:
    os.makedirs(state_dir, exist_ok=True)
    _write_private(paths(state_dir)["config"], json.dumps(asdict(config), indent=1))


def load_config(state_dir: str) -> LabConfig:
    with open(paths(state_dir)["config"]) as handle:
        return LabConfig(**json.load(handle))


def daemon_pid(state_dir: str) -> Optional[int]:
    try:
        with open(paths(state_dir)["pid"]) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"fleet_lab.daemon" not in handle.read():
                return None
    except OSError:
        return None
    return pid


def read_manifest(state_dir: str) -> Optional[Dict[str, Any]]:
    try:
        with open(paths(state_dir)["manifest"]) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def up(config: LabConfig, state_dir: str = DEFAULT_STATE_DIR,
       inventory: str = DEFAULT_INVENTORY, progress: Callable[[str], None] = print,
       timeout: float = 900.0) -> Dict[str, Any]:
    """Start the lab and wait until every server is up; returns the manifest."""
    config.validate()
    if daemon_pid(state_dir):
        raise RuntimeError(f"a lab is already running from {state_dir}; run `lab down` first")
    leftovers = [f"{name} {pid}" for name, pid in stack.running(state_dir).items() if pid]
    if leftovers:
        raise RuntimeError(f"ChatOps processes of an earlier lab still run from {state_dir} "
                           f"({', '.join(leftovers)}); run `lab down` first")
    if not config.password:
        config.password = secrets.token_urlsafe(18)
    p = paths(state_dir)
    os.makedirs(state_dir, exist_ok=True)
    for name in ("manifest", "progress"):
        if os.path.exists(p[name]):
            os.remove(p[name])
    save_config(state_dir, config)
    log = open(p["log"], "ab")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO, os.path.join(REPO, "actions", "lib"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-m", "fleet_lab.daemon", "--state-dir",
                             state_dir], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=env, cwd=REPO)
    log.close()
    shown = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            lines = _progress_lines(p["progress"])
            for line in lines[shown:]:
                progress(line)
            shown = len(lines)
            manifest = read_manifest(state_dir)
            if manifest and manifest.get("ready"):
                break
            if proc.poll() is not None:
                tail = _tail(p["log"])
                raise RuntimeError(f"lab daemon exited ({proc.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"lab not up after {timeout:.0f}s; see {p['log']}")
            time.sleep(0.5)
    except BaseException:
        down(state_dir, progress=lambda _m: None)
        raise
    if config.prometheus:
        try:
            monitoring.start(state_dir, manifest, progress)
        except BaseException:
            down(state_dir, progress=lambda _m: None)
            raise
    write_inventory(manifest, config, inventory)
    write_pack_config(manifest, config, state_dir, inventory)
    if config.chatops:
        try:
            start_chatops(config, state_dir, progress)
        except BaseException:
            down(state_dir, progress=lambda _m: None)
            raise
    return manifest


def start_chatops(config: LabConfig, state_dir: str, progress: Callable[[str], None]) -> None:
    """st2 users (the bot, each approver), the st2 API for the runtime home, IRC and errbot."""
    from fleet_runtime.home import RuntimeHome

    if not config.chatops_users:
        raise RuntimeError("lab up --chatops: the lab config names no chatops_users (the bot's "
                           "st2 account)")
    stack.start(state_dir, str(RuntimeHome().path), users=_approvers(config),
                bot_user=config.chatops_users[0], progress=progress)


def _progress_lines(path: str) -> List[str]:
    try:
        with open(path) as handle:
            return [line.rstrip("\n") for line in handle]
    except OSError:
        return []


def _tail(path: str, lines: int = 25) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def down(state_dir: str = DEFAULT_STATE_DIR, progress: Callable[[str], None] = print,
         timeout: float = 60.0) -> bool:
    """Stop the ChatOps processes and the daemon (which stops the servers); then clean up
    strays. True if something ran."""
    chat = stack.stop(state_dir, progress)
    watching = monitoring.stop(state_dir, progress)
    pid = daemon_pid(state_dir)
    if pid:
        progress(f"stopping lab daemon {pid}")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while daemon_pid(state_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        if daemon_pid(state_dir):
            os.killpg(pid, signal.SIGKILL)
    vms = os.path.join(state_dir, "vms")
    if os.path.isdir(vms):
        from pathlib import Path

        from fleet_lab.vm.backend import cleanup_state_dir

        stopped = cleanup_state_dir(Path(state_dir))
        if stopped:
            progress(f"stopped leftover VMs: {', '.join(stopped)}")
    manifest = paths(state_dir)["manifest"]
    if os.path.exists(manifest):
        os.remove(manifest)
    return bool(pid) or bool(chat) or watching


def host_backend(manifest: Dict[str, Any], host: Dict[str, Any]) -> str:
    """The backend a manifest's server runs on (manifests before mixed labs: the lab's)."""
    return str(host.get("backend") or manifest["backend"])


BACKEND_GROUPS = {"vm": "lab_vm", "sim": "lab_sim"}  # inventory groups by backend
# connection failures (ssh exit 255) tried again per task: a TCG guest on a loaded machine can
# take longer than the 30 s ConnectTimeout to answer an SSH banner
VM_SSH_RETRIES = 2
LAB_BMC_NETWORKS = ["127.0.0.0/8"]  # the lab's BMCs listen on loopback


def write_inventory(manifest: Dict[str, Any], config: LabConfig, path: str) -> None:
    """inventory/lab.yml: one group per site and one per backend (`lab_vm`, `lab_sim`: a
    rollout can target the VMs alone); BMC address, vendor, labels and where each host is:
    the VM's forwarded SSH port, or the sim server's sysroot (a lab host run locally). How to
    connect (user, key, known hosts, interpreter, retries) is in the pack config
    (write_pack_config), never in the inventory."""
    groups: Dict[str, Dict[str, Any]] = {}
    kinds: Dict[str, Dict[str, Any]] = {}
    for host in manifest["hosts"]:
        entry: Dict[str, Any] = {
            "bmc_address": host["bmc_url"], "bmc_vendor": host["vendor"],
            "bmc_credential": "lab", "site": host["site"], "rack": host["rack"],
            "hardware_model": MODELS.get(host["vendor"], host["vendor"]),
        }
        kind = host_backend(manifest, host)
        if kind == "vm":
            entry.update({"ansible_host": "127.0.0.1", "ansible_port": host["ssh_port"],
                          "fleet_health_port": host["health_port"],
                          "fleet_udp_port": host["udp_port"]})
        else:
            entry["fleet_sysroot"] = host["sysroot"]
        groups.setdefault(host["site"].replace("-", "_"), {"hosts": {}})["hosts"][
            host["name"]] = entry
        kinds.setdefault(BACKEND_GROUPS[kind], {"hosts": {}})["hosts"][host["name"]] = None
    all_vars: Dict[str, Any] = {"fleet_service_port": 8080}
    doc = {"all": {"vars": all_vars, "children": dict(groups, **kinds)}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(f"# written by `fleet-rollout lab up` ({describe_backends(manifest)})\n")
        yaml.safe_dump(doc, handle, sort_keys=True)


def describe_backends(manifest: Dict[str, Any]) -> str:
    """'backend sim', or with sim servers beside the VMs 'backend vm (6) + sim (10)'."""
    counts: Dict[str, int] = {}
    for host in manifest.get("hosts") or []:
        kind = host_backend(manifest, host)
        counts[kind] = counts.get(kind, 0) + 1
    if len(counts) > 1:
        return "backend " + " + ".join(f"{kind} ({n})" for kind, n in counts.items())
    return f"backend {manifest['backend']}"


def _runtime_user() -> str:
    """Who approves in a lab by default: the embedded runtime's user (st2's API user)."""
    try:
        from fleet_runtime.home import RuntimeHome

        return RuntimeHome().user
    except Exception:  # a lab without the runtime: the OS user
        import getpass

        return getpass.getuser()


def _approvers(config: LabConfig) -> List[str]:
    return list(config.approvers) or [_runtime_user()]


def write_pack_config(manifest: Dict[str, Any], config: LabConfig, state_dir: str,
                      inventory: str) -> str:
    """The pack config for this lab (credentials are secret: file mode 0600)."""
    doc = pack_config_doc(manifest, config, state_dir, inventory)
    path = paths(state_dir)["pack_config"]
    text = "# written by `fleet-rollout lab up`\n" + yaml.safe_dump(doc)
    _write_private(path, text)
    try:  # the embedded runtime reads pack configs from its home, like /opt/stackstorm/configs
        from fleet_runtime.home import RuntimeHome

        _write_private(str(RuntimeHome().pack_config_path("fleet_rollout")), text)
    except Exception as err:  # a lab without the runtime still works
        print(f"note: pack config not written to the runtime home: {err}")
    return path


def host_side(state_dir: str, inventory: str) -> Any:
    """The lab's servers as the pack reaches them (fleet_rollout's HostSide): the lab's
    inventory and its pack config's connection settings."""
    from fleet_rollout import service
    from fleet_rollout.config import load_pack_config

    with open(paths(state_dir)["pack_config"]) as handle:
        config = load_pack_config(yaml.safe_load(handle))
    return service.host_side(config, inventory)


def pack_config_doc(manifest: Dict[str, Any], config: LabConfig, state_dir: str,
                    inventory: str) -> Dict[str, Any]:
    """The lab's pack config as a dict."""
    return {
        "credentials": {"lab": {"username": config.username, "password": config.password}},
        "ca_bundle": manifest.get("ca") or "",
        "allow_insecure_http": False,
        "inventory": inventory,
        "state_dir": os.path.join(state_dir, "rollouts"),
        "chat_route": stack.ROUTE if config.chatops else "chatops",
        "chat_channel": stack.CHANNEL if config.chatops else "fleet-rollout",
        "approvers": _approvers(config),
        # the lab's SREs run their own rollouts, and so does the runtime's user (the demo's
        # and the tests' `fleet-rollout run`)
        "operators": list(dict.fromkeys(_approvers(config) + [_runtime_user()])),
        "chatops_users": list(config.chatops_users),
        "bmc_networks": LAB_BMC_NETWORKS,
        # how Ansible reaches the lab's servers: the VMs as root over SSH with the lab's key,
        # their host keys verified against the lab's known_hosts; the sim servers locally
        "ansible_private_key": manifest.get("ssh_key") or "",
        "ssh_known_hosts": manifest.get("known_hosts") or "",
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ssh_retries": VM_SSH_RETRIES,
        "allow_local_hosts": True,
        "counters": counters_config(state_dir, config),
    }


def counters_config(state_dir: str, config: LabConfig) -> Dict[str, Any]:
    """The pack config's `counters`: the collector, or the lab's Prometheus (its URL, the lab
    CA, its basic auth as the secret header; node_exporter's instance label `<host>:9100`)."""
    info = monitoring.read_info(state_dir) if config.counters == "prometheus" else None
    if info is None:
        return {"source": "collector"}
    return {"source": "prometheus", "prometheus": {
        "url": info["url"], "ca_bundle": info["ca"],
        "auth_header": monitoring.auth_header(info), "host_label": "instance",
        "strip_port": True, "resolution": info["scrape_seconds"],
        "read_delay": 2 * info["scrape_seconds"] + 1}}


def set_traffic(state_dir: str, enabled: bool, pps: Optional[int] = None) -> Dict[str, Any]:
    from fleet_lab.traffic import TrafficSettings

    path = paths(state_dir)["traffic"]
    settings = TrafficSettings.load(path)
    settings.enabled = enabled
    if pps:
        settings.pps = int(pps)
    settings.save(path)
    return {"enabled": settings.enabled, "pps": settings.pps}
