"""SSH host keys are verified: a real sshd on 127.0.0.1 whose key is not in the known_hosts file
(or differs from it) is unreachable with a host key error; with its key listed it works. The VM
lab gives each guest its own host key and lists it in the lab's known_hosts."""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Tuple

import pytest
import yaml
from net_support import LoopbackListener

from fleet_lab import lab
from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_lab.vm import persist
from fleet_rollout.config import load_pack_config
from fleet_rollout.connection import Connection
from fleet_rollout.errors import ConfigError
from fleet_rollout.hostside.ansible_run import run_playbook, ssh_args
from fleet_rollout.hostside.playbook_steps import HostSide

SSHD = "/usr/sbin/sshd"
needs_sshd = pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0,
                                reason="needs openssh-server and root")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, stdin=subprocess.DEVNULL)
    return " ".join(path.with_name(path.name + ".pub").read_text().split()[:2])


@pytest.fixture()
def sshd(tmp_path: Path) -> Iterator[Tuple[int, str, Path, Path]]:
    """(port, host public key, client private key, sim sysroot) of a private sshd."""
    host_pub = _keygen(tmp_path / "host_key", "test host")
    client_pub = _keygen(tmp_path / "client_key", "test client")
    (tmp_path / "authorized_keys").write_text(client_pub + "\n")
    port = _free_port()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host_key'}\n"
        f"PidFile {tmp_path / 'sshd.pid'}\nAuthorizedKeysFile {tmp_path / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    log = open(tmp_path / "sshd.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    if sock.recv(8).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "sshd.log").read_text()
            assert time.monotonic() < deadline, "sshd did not start"
            time.sleep(0.1)
        sims = SimBackend(str(tmp_path / "hosts"))
        sims.power_on(boot_config("ssh-001", "early", "disabled"))
        yield port, host_pub, tmp_path / "client_key", Path(sims.sysroot("ssh-001"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _side(tmp_path: Path, port: int, key: Path, sysroot: Path, known: str,
          ssh_retries: int = 0) -> HostSide:
    """SSH to the test's sshd on loopback, whose host script works on a sim host's tree (a lab
    host: fleet_sysroot with ansible_host); the connection settings are a pack config's."""
    inventory = tmp_path / "ssh-inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"ssh-001": {
        "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root",
        "fleet_sysroot": str(sysroot)}}}}))
    known_hosts = tmp_path / f"known_hosts-{len(list(tmp_path.glob('known_hosts-*')))}"
    known_hosts.write_text(known)
    connection = Connection(python_interpreter=sys.executable, ssh_retries=ssh_retries,
                            allow_local=True)
    return HostSide(str(inventory), str(key), known_hosts=str(known_hosts),
                    connection=connection)


@needs_sshd
def test_unknown_host_key_is_refused(tmp_path, sshd):
    port, _pub, key, sysroot = sshd
    entry = _side(tmp_path, port, key, sysroot, "").health(["ssh-001"])["ssh-001"]
    assert not entry.ok and entry.unreachable, entry
    assert "Host key verification failed" in entry.error or "host key" in entry.error.lower()


@needs_sshd
def test_changed_host_key_is_refused(tmp_path, sshd):
    port, _pub, key, sysroot = sshd
    impostor = _keygen(tmp_path / "impostor", "impostor")
    side = _side(tmp_path, port, key, sysroot, f"[127.0.0.1]:{port} {impostor}\n")
    entry = side.health(["ssh-001"])["ssh-001"]
    assert not entry.ok and entry.unreachable, entry
    assert "host key" in entry.error.lower() or "IDENTIFICATION HAS CHANGED" in entry.error


@needs_sshd
def test_known_host_key_works(tmp_path, sshd):
    port, pub, key, sysroot = sshd
    side = _side(tmp_path, port, key, sysroot, f"[127.0.0.1]:{port} {pub}\n")
    entry = side.health(["ssh-001"])["ssh-001"]
    assert entry.ok, entry
    assert entry.result["boot_id"] == (sysroot / "proc/sys/kernel/random/boot_id").read_text(
    ).strip()


class _Refuser(LoopbackListener):
    """A relay to the sshd that closes its first `refuse` connections before the SSH banner
    (as a guest too slow to answer one: ssh exits 255), then relays the rest."""

    def __init__(self, target: int, refuse: int) -> None:
        self.target, self.refuse = target, refuse
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        if self.accepted <= self.refuse:
            conn.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.target))
        for src, dst in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@needs_sshd
@pytest.mark.parametrize("retries", [0, lab.VM_SSH_RETRIES])
def test_the_lab_vms_retries_get_past_connections_lost_before_the_banner(tmp_path, sshd,
                                                                          retries):
    """The lab's pack config sets ssh_retries (lab.VM_SSH_RETRIES): through the pack's own run
    path (resolved host vars, run inventory, ssh args) a host whose first connections end before
    the SSH banner is reached on a later try; without retries it is unreachable."""
    port, pub, key, sysroot = sshd
    relay = _Refuser(port, refuse=2)
    try:
        side = _side(tmp_path, relay.port, key, sysroot, f"[127.0.0.1]:{relay.port} {pub}\n",
                     ssh_retries=retries)
        entry = side.health(["ssh-001"])["ssh-001"]
    finally:
        relay.close()
    if retries:
        assert entry.ok, entry
        assert relay.accepted >= 3  # two lost, then the one that worked
    else:
        assert not entry.ok and entry.unreachable, entry
        assert relay.accepted == 1


def test_ssh_args_always_check_host_keys():
    assert "StrictHostKeyChecking=yes" in ssh_args(None)
    assert "/dev/null" not in ssh_args(None)
    assert "UserKnownHostsFile=/s/known_hosts" in shlex.split(ssh_args("/s/known_hosts"))


def test_known_hosts_path_that_ssh_would_split_is_refused(tmp_path):
    spaced = tmp_path / "a b"
    spaced.write_text("")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {hosts: {x: {}}}\n")
    for path in (str(spaced), str(tmp_path / "missing")):
        with pytest.raises(ConfigError, match="ssh_known_hosts file"):
            run_playbook("health", str(inventory), ["x"], known_hosts=path)


@pytest.mark.skipif(shutil.which("debugfs", path="/usr/sbin:/sbin:" + os.environ["PATH"]) is
                    None, reason="needs e2fsprogs")
def test_vm_host_key_goes_onto_the_persistent_disk(tmp_path):
    disk = tmp_path / "persist.img"
    persist.create_disk(disk)
    key = tmp_path / persist.HOST_KEY_NAME
    _keygen(key, "vm host")
    assert persist.install_host_key(disk, key) is True
    assert persist.read_file(disk, "/etc/ssh-host/ssh_host_ed25519_key") == key.read_bytes()
    assert persist.install_host_key(disk, key) is False  # already there: nothing written
    key.unlink()
    key.with_name(key.name + ".pub").unlink()
    _keygen(key, "vm host 2")
    assert persist.install_host_key(disk, key) is True  # a new key replaces the old one
    assert persist.read_file(disk, "/etc/ssh-host/ssh_host_ed25519_key") == key.read_bytes()
    assert persist.cmdline_extras(disk) == ["quiet"]  # the rest of the disk is intact


def test_lab_inventory_and_pack_config_name_the_known_hosts(tmp_path):
    manifest = {"backend": "vm", "ssh_key": "/k/lab_key", "known_hosts": "/s/known_hosts",
                "hosts": [{"name": "lab-001", "bmc_url": "https://127.0.0.1:1", "vendor": "generic",
                           "site": "site-a", "rack": "r1", "ssh_port": 2222, "health_port": 1,
                           "udp_port": 2}]}
    path = tmp_path / "inventory.yml"
    config = lab.LabConfig(hosts=1, backend="vm", password="pw")
    lab.write_inventory(manifest, config, str(path))
    doc = yaml.safe_load(path.read_text())
    entry = doc["all"]["children"]["site_a"]["hosts"]["lab-001"]
    assert entry["ansible_host"] == "127.0.0.1" and entry["ansible_port"] == 2222
    # no connection setting in the inventory: the pack config has them, host keys verified
    assert not [k for k in {**doc["all"]["vars"], **entry} if k.startswith("ansible_")
                and k not in ("ansible_host", "ansible_port")]
    pack = load_pack_config(lab.pack_config_doc(manifest, config, str(tmp_path), str(path)))
    assert pack.ssh_known_hosts == "/s/known_hosts" and pack.ansible_private_key == "/k/lab_key"
    assert pack.connection.ssh_retries == lab.VM_SSH_RETRIES > 0  # see the retries test
    assert pack.connection.user == "root" and not pack.connection.become
    assert "StrictHostKeyChecking=yes" in ssh_args(pack.ssh_known_hosts,
                                                   pack.connection.ssh_options)
