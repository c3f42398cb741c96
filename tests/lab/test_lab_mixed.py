"""A lab of VMs with sim servers beside them (LabConfig.sim_hosts): the config, the dispatching
backend, the daemon running both backends at once (with a stand-in for the VM backend: no QEMU
here), the inventory and pack config it leads to, and `lab up --sim-hosts`.

Everything runs in temp state dirs and on free loopback ports; nothing touches the repo's .lab/
or ~/.fleet-rollout (conftest points FLEET_ROLLOUT_HOME at a private dir, these tests at their
own), and no process is started but the CLI's own (which refuses before starting anything).
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml
from rollout_support import ROOT

from fleet_lab import lab
from fleet_lab.hosts import BootConfig, DispatchBackend, boot_config
from fleet_lab.simhost import SimBackend
from fleet_lab.vm.qemu import Ports
from fleet_rollout.config import load_pack_config
from fleet_rollout.connection import local_python

# -- LabConfig ------------------------------------------------------------------------------


@pytest.mark.parametrize("rcvbuf", [-1, lab.GUEST_RCVBUF_MAX + 1])
def test_a_guest_receive_buffer_out_of_range_is_refused_by_name(rcvbuf: int) -> None:
    config = lab.LabConfig(hosts=2, backend="vm", guest_rcvbuf=rcvbuf)
    with pytest.raises(ValueError, match=rf"guest_rcvbuf {rcvbuf}: 0 .* to 212992 bytes"):
        config.validate()


def test_the_guest_receive_buffer_defaults_to_the_receivers_own() -> None:
    from fleet_lab.daemon import vm_options

    assert lab.LabConfig(hosts=1, backend="vm").guest_rcvbuf == 0
    assert vm_options(lab.LabConfig(hosts=1, backend="vm")) == {}
    assert vm_options(lab.LabConfig(hosts=1, backend="vm", guest_rcvbuf=4096)) == {"rcvbuf": 4096}


def test_sim_hosts_come_after_the_vms_with_the_same_name_site_and_rack_scheme() -> None:
    config = lab.LabConfig(hosts=6, backend="vm", sim_hosts=10, sites=2, hosts_per_rack=1)
    config.validate()
    names = config.host_names()
    assert names == [f"lab-{i:03d}" for i in range(1, 17)]
    assert len(set(names)) == len(names)
    assert [config.backend_of(i) for i in range(16)] == ["vm"] * 6 + ["sim"] * 10
    assert config.backends() == {"vm": 6, "sim": 10} and config.total_hosts() == 16
    # the scheme continues over the sim servers: 5 per site, racks after the VMs' racks
    sims = range(6, 16)
    assert sorted(config.site_of(i) for i in sims) == ["site-a"] * 5 + ["site-b"] * 5
    assert [config.rack_of(i) for i in (0, 1, 4, 5, 6, 7, 14, 15)] == [
        "rack-1", "rack-1", "rack-3", "rack-3", "rack-4", "rack-4", "rack-8", "rack-8"]
    # the same lab without sim servers is what it always was
    plain = lab.LabConfig(hosts=6, backend="vm")
    assert plain.host_names() == names[:6] and plain.backends() == {"vm": 6}


def test_sim_hosts_are_for_a_vm_lab_only() -> None:
    with pytest.raises(ValueError, match="ask for 16 hosts instead"):
        lab.LabConfig(hosts=6, backend="sim", sim_hosts=10).validate()
    with pytest.raises(ValueError, match="sim_hosts must be 0 or more"):
        lab.LabConfig(hosts=6, backend="vm", sim_hosts=-1).validate()
    with pytest.raises(ValueError, match="backend 'kvm'"):
        lab.LabConfig(hosts=6, backend="kvm").validate()
    lab.LabConfig(hosts=2000, backend="sim").validate()  # a sim lab is all sim servers
    assert lab.LabConfig(hosts=2000, backend="sim").host_names()[-1] == "lab-2000"


def test_a_saved_config_without_sim_hosts_still_loads(tmp_path: Path) -> None:
    """A state dir written before the field existed (a lab left running over an upgrade)."""
    doc = {k: v for k, v in asdict(lab.LabConfig(hosts=3)).items() if k != "sim_hosts"}
    (tmp_path / "lab-config.json").write_text(json.dumps(doc))
    assert lab.load_config(str(tmp_path)).sim_hosts == 0


def test_lab_up_cli_refuses_sim_hosts_on_a_sim_lab_before_starting_anything(
        tmp_path: Path) -> None:
    state = tmp_path / "lab"
    out = subprocess.run([sys.executable, "-m", "fleet_runtime.cli", "lab", "up", "--hosts", "2",
                          "--backend", "sim", "--sim-hosts", "3", "--state-dir", str(state),
                          "--inventory", str(tmp_path / "inventory.yml")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--sim-hosts adds sim servers beside the VMs" in out.stderr
    assert not state.exists() and not (tmp_path / "inventory.yml").exists()
    helped = subprocess.run([sys.executable, "-m", "fleet_runtime.cli", "lab", "up", "--help"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "--sim-hosts N" in helped.stdout


# -- DispatchBackend -----------------------------------------------------------------------


class Recorder:
    """A HostBackend that records what it was asked."""

    def __init__(self, fail_close: bool = False) -> None:
        self.calls: List[tuple] = []
        self.up: Dict[str, bool] = {}
        self.fail_close = fail_close
        self.closed = False

    def power_on(self, config: BootConfig) -> None:
        self.calls.append(("on", config.host))
        self.up[config.host] = True

    def power_off(self, host: str) -> None:
        self.calls.append(("off", host))
        self.up[host] = False

    def is_up(self, host: str) -> bool:
        return self.up.get(host, False)

    def close(self) -> None:
        self.closed = True
        if self.fail_close:
            raise RuntimeError("close failed")


def test_dispatch_backend_sends_each_host_to_its_own_backend() -> None:
    vm, sim = Recorder(), Recorder()
    backend = DispatchBackend({"vm": vm, "sim": sim},
                              {"lab-001": "vm", "lab-002": "vm", "lab-003": "sim"})
    for host in ("lab-001", "lab-003"):
        backend.power_on(boot_config(host, "early", "disabled"))
    backend.power_off("lab-001")
    assert vm.calls == [("on", "lab-001"), ("off", "lab-001")]
    assert sim.calls == [("on", "lab-003")]
    assert backend.is_up("lab-003") and not backend.is_up("lab-001")
    assert not backend.is_up("lab-002")  # the VM backend answers for it: never booted
    assert backend.hosts("vm") == ["lab-001", "lab-002"] and backend.hosts("sim") == ["lab-003"]
    assert backend.kind("lab-003") == "sim" and backend.backend("lab-002") is vm
    with pytest.raises(KeyError, match="lab-004"):
        backend.power_on(boot_config("lab-004", "early", "disabled"))
    assert len(vm.calls) == 2 and len(sim.calls) == 1  # nothing went anywhere


def test_dispatch_backend_refuses_routes_to_a_backend_it_lacks() -> None:
    with pytest.raises(ValueError, match=r"backend\(s\) vm that this lab does not run"):
        DispatchBackend({"sim": Recorder()}, {"lab-001": "vm", "lab-002": "sim"})


def test_dispatch_backend_closes_every_backend_even_when_one_fails() -> None:
    first, second = Recorder(fail_close=True), Recorder()
    backend = DispatchBackend({"vm": first, "sim": second, "bare": object()},  # type: ignore
                              {"lab-001": "vm"})
    with pytest.raises(RuntimeError, match="close failed"):
        backend.close()
    assert first.closed and second.closed


def test_dispatch_backend_over_real_sim_trees(tmp_path: Path) -> None:
    sims = SimBackend(str(tmp_path / "hosts"))
    vm = Recorder()
    backend = DispatchBackend({"vm": vm, "sim": sims}, {"lab-001": "vm", "lab-002": "sim"})
    backend.power_on(boot_config("lab-002", "cod", "disabled"))
    backend.power_on(boot_config("lab-001", "cod", "disabled"))
    nodes = os.listdir(os.path.join(sims.sysroot("lab-002"), "sys/devices/system/node"))
    assert len([n for n in nodes if n.startswith("node")]) == 4  # Cluster-on-Die
    assert not os.path.exists(sims.sysroot("lab-001"))  # a VM gets no fake tree
    assert vm.calls == [("on", "lab-001")]


# -- inventory and pack config -------------------------------------------------------------


def mixed_manifest(state: Path, vms: int = 2, sims: int = 3) -> Dict[str, Any]:
    config = lab.LabConfig(hosts=vms, backend="vm", sim_hosts=sims, sites=2, hosts_per_rack=1)
    hosts = []
    for index, name in enumerate(config.host_names()):
        entry: Dict[str, Any] = {"name": name, "vendor": "dell-idrac8",
                                 "bmc_url": f"https://127.0.0.1:{40000 + index}",
                                 "site": config.site_of(index), "rack": config.rack_of(index),
                                 "backend": config.backend_of(index)}
        if entry["backend"] == "vm":
            entry.update({"ssh_port": 41000 + index, "health_port": 42000 + index,
                          "udp_port": 43000 + index})
        else:
            entry["sysroot"] = str(state / "hosts" / name)
        hosts.append(entry)
    return {"backend": "vm", "backends": config.backends(), "hosts": hosts,
            "ssh_key": str(state / "lab_key"), "known_hosts": str(state / "known_hosts"),
            "ca": str(state / "tls" / "ca.pem")}


def _resolved(inventory: str) -> Dict[str, Any]:
    """Every host's variables and groups as ansible-core resolves them (what the pack's host
    steps get: fleet_rollout.hostvars)."""
    from fleet_rollout.hostvars import load_manager, resolve_all

    manager, loader = load_manager(inventory)
    entries, groups = resolve_all(manager, loader)
    return {"hosts": {e.name: e for e in entries}, "groups": groups}


def test_inventory_gives_each_server_its_own_connection(tmp_path: Path) -> None:
    """Where each server is comes from the inventory, how to connect from the lab's pack
    config: the VMs over SSH (host keys verified), the sim servers locally."""
    manifest = mixed_manifest(tmp_path)
    path = tmp_path / "inventory.yml"
    config = lab.LabConfig(hosts=2, backend="vm", sim_hosts=3, password="pw")
    lab.write_inventory(manifest, config, str(path))
    assert path.read_text().startswith(
        "# written by `fleet-rollout lab up` (backend vm (2) + sim (3))\n")
    pack = load_pack_config(lab.pack_config_doc(manifest, config, str(tmp_path), str(path)))
    assert pack.ssh_known_hosts == manifest["known_hosts"]
    resolved = _resolved(str(path))
    hosts, groups = resolved["hosts"], resolved["groups"]
    assert sorted(hosts) == ["lab-001", "lab-002", "lab-003", "lab-004", "lab-005"]
    assert groups["lab_vm"] == ["lab-001", "lab-002"]
    assert groups["lab_sim"] == ["lab-003", "lab-004", "lab-005"]
    assert groups["site_a"] == ["lab-001", "lab-003", "lab-005"]
    for entry in hosts.values():
        assert pack.connection.refusal(entry.vars) is None, entry.vars
    for name in ("lab-001", "lab-002"):
        v = pack.connection.run_vars(hosts[name].vars)
        assert v["ansible_connection"] == "ssh"
        assert v["ansible_host"] == "127.0.0.1" and pack.connection.user == "root"
        assert v["ansible_port"] == 41000 + int(name[-1]) - 1
        assert v["ansible_python_interpreter"] == "/usr/bin/python3"
        assert "fleet_sysroot" not in v
    for name in ("lab-003", "lab-004", "lab-005"):
        v = pack.connection.run_vars(hosts[name].vars)
        assert v["ansible_connection"] == "local"
        assert v["fleet_sysroot"] == str(tmp_path / "hosts" / name)
        # not the guests' python, nor the venv's: a server's, without the pack
        assert v["ansible_python_interpreter"] == local_python() != sys.executable
        assert "ansible_port" not in v and "fleet_udp_port" not in v
    for entry in hosts.values():
        assert not entry.errors
        assert entry.vars["hardware_model"] == "PowerEdge R630"  # one model: comparable


def test_the_pack_reads_the_mixed_inventory_and_targets_the_vms(tmp_path: Path) -> None:
    """The pack's own inventory code: names valid and no name also a group; `lab_vm` selects
    the VMs, the sim servers are the other hosts a plan takes its controls from."""
    from fleet_rollout.inventory import load_fleet

    path = tmp_path / "inventory.yml"
    lab.write_inventory(mixed_manifest(tmp_path, vms=6, sims=10),
                        lab.LabConfig(hosts=6, backend="vm", sim_hosts=10), str(path))
    everyone, targets = load_fleet(str(path), "lab_vm")
    assert [h.name for h in targets] == [f"lab-{i:03d}" for i in range(1, 7)]
    others = [h for h in everyone if h not in targets]
    assert [h.name for h in others] == [f"lab-{i:03d}" for i in range(7, 17)]
    assert {(h.site, h.hardware_model) for h in others} == {
        ("site-a", "PowerEdge R630"), ("site-b", "PowerEdge R630")}
    assert sum(h.site == "site-a" for h in others) == 5


def test_the_lab_profiles_take_their_controls_from_the_sim_servers(tmp_path: Path) -> None:
    """Plan the demo's rollouts on the mixed inventory: no target is kept back as a control,
    5 controls per canary site (the judge compares within a site from 5 on)."""
    from fleet_rollout.inventory import load_fleet
    from fleet_rollout.plan import build_plan
    from fleet_rollout.profile import load_profile

    path = tmp_path / "inventory.yml"
    lab.write_inventory(mixed_manifest(tmp_path, vms=6, sims=10),
                        lab.LabConfig(hosts=6, backend="vm", sim_hosts=10), str(path))
    everyone, targets = load_fleet(str(path), "lab_vm")
    compliance = {h.name: {"compliant": False} for h in targets}
    sites = {h.name: h.site for h in everyone}
    good = build_plan(load_profile("lab-home-snoop"),
                      str(path), "lab_vm", targets, everyone, compliance)
    assert [b["hosts"] for b in good["batches"]] == [
        ["lab-001", "lab-002", "lab-003"], ["lab-004", "lab-005", "lab-006"]]
    assert sorted(good["control"]) == [f"lab-{i:03d}" for i in range(7, 17)]
    assert good["control_reserved_for_last_batch"] == []
    assert sorted(sites[h] for h in good["control"]) == ["site-a"] * 5 + ["site-b"] * 5
    bad = build_plan(load_profile("lab-bad"),
                     str(path), "lab_vm", targets, everyone, compliance)
    assert bad["batches"][0]["hosts"] == ["lab-001"]
    assert len(bad["control"]) == 5 and {sites[h] for h in bad["control"]} == {"site-a"}
    assert not set(bad["control"]) & {h.name for h in targets}


def test_pack_config_of_a_mixed_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ROLLOUT_HOME", str(tmp_path / "home"))  # not ~/.fleet-rollout
    manifest = mixed_manifest(tmp_path)
    config = lab.LabConfig(hosts=2, backend="vm", sim_hosts=3, password="pw-not-shown")
    (tmp_path / "state").mkdir()
    path = lab.write_pack_config(manifest, config, str(tmp_path / "state"),
                                 str(tmp_path / "inventory.yml"))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    doc = yaml.safe_load(Path(path).read_text())
    # the VMs' SSH key and known_hosts; a sim server's local connection needs neither
    assert doc["ansible_private_key"] == str(tmp_path / "lab_key")
    assert doc["ssh_known_hosts"] == str(tmp_path / "known_hosts")
    assert doc["inventory"] == str(tmp_path / "inventory.yml")
    copy = tmp_path / "home" / "configs" / "fleet_rollout.yaml"
    assert copy.read_text() == Path(path).read_text()


# -- the daemon with both backends ---------------------------------------------------------


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeVmBackend:
    """What the daemon uses of VmBackend (ports, keys, power, close), without QEMU. Its health
    ports have no listener, so the UDP sender never finds a guest in service: no packets."""

    made: List[FakeVmBackend] = []

    def __init__(self, state_dir: Path, progress: Optional[Any] = None,
                 rcvbuf: Optional[int] = None) -> None:
        self.state_dir = Path(state_dir)
        self.rcvbuf = rcvbuf
        self.key_path = self.state_dir / "lab_key"
        self.known_hosts_path = self.state_dir / "known_hosts"
        self.booted: List[BootConfig] = []
        self._up: Dict[str, bool] = {}
        self._ports: Dict[str, Ports] = {}
        self.closed = False
        FakeVmBackend.made.append(self)

    def ports(self, host: str) -> Ports:
        if host not in self._ports:
            self._ports[host] = Ports(_free_port(socket.SOCK_STREAM),
                                      _free_port(socket.SOCK_STREAM),
                                      _free_port(socket.SOCK_DGRAM),
                                      _free_port(socket.SOCK_STREAM))
        return self._ports[host]

    def power_on(self, config: BootConfig) -> None:
        self.booted.append(config)
        self._up[config.host] = True

    def power_off(self, host: str) -> None:
        self._up[host] = False

    def is_up(self, host: str) -> bool:
        return self._up.get(host, False)

    def close(self) -> None:
        self.closed = True


def _udp(sysroot: str) -> Dict[str, int]:
    lines = Path(sysroot, "proc/net/snmp").read_text().splitlines()
    head, values = [line.split()[1:] for line in lines if line.startswith("Udp:")]
    return dict(zip(head, (int(v) for v in values)))


def test_the_daemon_runs_vms_and_sim_servers_at_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import fleet_lab.vm.backend
    from fleet_lab import daemon as lab_daemon
    from fleet_lab.commands.lab import host_rows
    from fleet_lab.vm.drop_model import RATE_SCALE_ENV

    monkeypatch.setattr(fleet_lab.vm.backend, "VmBackend", FakeVmBackend)
    monkeypatch.setenv(RATE_SCALE_ENV, "1")  # the daemon sets it: put back afterwards
    FakeVmBackend.made = []
    state = tmp_path / "lab"
    config = lab.LabConfig(hosts=2, backend="vm", sim_hosts=3, vendors=["dell-idrac8"],
                           sites=2, hosts_per_rack=1, reboot_seconds=0.5, password="pw",
                           guest_rcvbuf=150000)
    lab.save_config(str(state), config)
    daemon = lab_daemon.Daemon(str(state))
    seen: Dict[str, Any] = {}

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        running = loop.create_task(daemon.run())
        try:
            for _ in range(300):
                manifest = lab.read_manifest(str(state))
                if (manifest and manifest.get("ready")) or running.done():
                    break
                await asyncio.sleep(0.1)
            seen["manifest"] = lab.read_manifest(str(state))
            sim_root = os.path.join(str(state), "hosts", "lab-004")
            before = _udp(sim_root)
            await asyncio.sleep(1.6)  # a few sim ticks (0.5 s)
            seen["udp"] = (before, _udp(sim_root))
            seen["rows"] = await loop.run_in_executor(None, host_rows, str(state))
        finally:
            daemon.stopping.set()
            await running

    asyncio.run(scenario())
    manifest = seen["manifest"]
    assert manifest and manifest["ready"], (state / "progress.log").read_text()
    assert manifest["backend"] == "vm" and manifest["backends"] == {"vm": 2, "sim": 3}
    hosts = manifest["hosts"]
    assert [(h["name"], h["backend"]) for h in hosts] == [
        ("lab-001", "vm"), ("lab-002", "vm"), ("lab-003", "sim"), ("lab-004", "sim"),
        ("lab-005", "sim")]
    assert all("ssh_port" in h and "sysroot" not in h for h in hosts[:2])
    assert all(h["sysroot"] == str(state / "hosts" / h["name"]) and "ssh_port" not in h
               for h in hosts[2:])
    assert manifest["ssh_key"] == str(state / "lab_key")
    assert len({h["bmc_url"] for h in hosts}) == 5
    # each backend booted its own servers, with the BIOS defaults of the same BMC personality
    vm = FakeVmBackend.made[0]
    assert sorted(c.host for c in vm.booted) == ["lab-001", "lab-002"]
    assert vm.rcvbuf == 150000  # the guests' receive buffer, as the lab's config asks
    assert {(c.snoop_mode, c.node_interleaving) for c in vm.booted} == {("early", "disabled")}
    assert sorted(os.listdir(state / "hosts")) == ["lab-003", "lab-004", "lab-005"]
    assert vm.closed  # stopping the lab stopped the VMs
    # the sim servers' counters follow the lab's model under the lab's traffic settings:
    # early snoop at the default 3500 packets/s drops about 14%
    before, after = seen["udp"]
    delivered = after["InDatagrams"] - before["InDatagrams"]
    dropped = after["RcvbufErrors"] - before["RcvbufErrors"]
    assert delivered > 0 and 0.03 < dropped / (delivered + dropped) < 0.35, (delivered, dropped)
    progress = (state / "progress.log").read_text()
    assert "5 BMC(s) listening" in progress
    assert "servers: lab-001..lab-002 (2) on the vm backend; lab-003..lab-005 (3) on the sim " \
           "backend" in progress
    assert "servers up: 5/5 (vm 2/2, sim 3/3; " in progress
    # lab status: the backend of every server
    assert [(r["host"], r["backend"], r["boot"]) for r in seen["rows"]] == [
        ("lab-001", "vm", "OSRunning"), ("lab-002", "vm", "OSRunning"),
        ("lab-003", "sim", "OSRunning"), ("lab-004", "sim", "OSRunning"),
        ("lab-005", "sim", "OSRunning")]
    assert lab.describe_backends(manifest) == "backend vm (2) + sim (3)"
