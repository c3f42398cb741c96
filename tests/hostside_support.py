"""Shared by the host-side tests that run real ansible-playbook against `sim` hosts (Ansible's
local connection with a sysroot): a two-host lab under the test's tmp_path, a playbook whose
task hangs with a marker argument, and the processes that carry a marker."""
from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import yaml
from process_support import command_lines, gone

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout.connection import Connection
from fleet_rollout.hostside.ansible_run import run_playbook
from fleet_rollout.hostside.playbook_steps import HostSide

HOSTS = ["sim-001", "sim-002"]
HOST_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "playbooks", "files", "fleet_host.py")


# the pack config of a lab: its sim hosts run locally (allow_local_hosts)
LOCAL = Connection(allow_local=True)


class LabHostSide(HostSide):
    """HostSide with a lab's pack config connection (sim hosts run locally)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("connection", LOCAL)
        super().__init__(*args, **kwargs)


def vm_lab_up(state: str, hosts: int) -> Iterator[Tuple[str, str, Any]]:
    """A VM lab of `hosts` generic VMs under `state` (a fixture's generator): (state,
    inventory, manifest); the lab is brought down at the end."""
    from fleet_lab import lab

    inventory = f"{state}/inventory.yml"
    manifest = lab.up(lab.LabConfig(hosts=hosts, backend="vm", vendors=["generic"],
                                    rate_scale=0.15), state, inventory,
                      progress=lambda _m: None, timeout=900)
    try:
        yield state, inventory, manifest
    finally:
        lab.down(state, progress=lambda _m: None)


def lab_host_side(state: str, inventory: str) -> HostSide:
    """The hosts of a lab's inventory as the lab's pack config says to reach them."""
    from fleet_lab import lab

    return lab.host_side(state, inventory)


def run_local(*args: Any, **kwargs: Any) -> Any:
    """run_playbook with a lab's pack config connection (sim hosts run locally)."""
    kwargs.setdefault("connection", LOCAL)
    return run_playbook(*args, **kwargs)


def load_host_script(name: str) -> Any:
    """playbooks/files/fleet_host.py imported as module `name` (its functions, its tables)."""
    spec = importlib.util.spec_from_file_location(name, HOST_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def pids_with(marker: str) -> List[int]:
    """Processes whose command line holds `marker` (a value unique to the test)."""
    return [pid for pid, argv in command_lines() if marker in argv and not gone(pid)]


def sim_lab(tmp_path: Path) -> Iterator[dict]:
    """Two sim hosts, their inventory (and one with their connection, for ansible-playbook run
    directly) and a hostvars cache (a fixture's generator); FLEET_ROLLOUT_ANSIBLE_LOG is the
    caller's to set."""
    backend = SimBackend(str(tmp_path / "hosts"))
    for name in HOSTS:
        backend.power_on(boot_config(name, "early", "disabled"))
    hosts = {name: {"fleet_sysroot": backend.sysroot(name)} for name in HOSTS}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    # for ansible-playbook run directly (not through the pack): the connection is in it
    direct = tmp_path / "direct-inventory.yml"
    direct.write_text(yaml.safe_dump({"all": {"hosts": {
        name: LOCAL.run_vars(host_vars) for name, host_vars in hosts.items()}}}))
    yield {"backend": backend, "inventory": str(inventory), "direct_inventory": str(direct),
           "cache": str(tmp_path / "cache"), "tmp": tmp_path}


def sleeping_playbook(lab: dict, marker: str) -> str:
    """A playbook whose task hangs (sleep with a marker argument the test can find)."""
    path = lab["tmp"] / "hang.yml"
    path.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "fleet_result: hang", "ansible.builtin.command":
                   f"sleep {marker}"}]}]))
    return str(path)


def end_with_marker(proc, marker: str) -> None:
    """After a test: its process, if still alive, and whatever carries its marker, killed."""
    if proc.poll() is None:
        proc.kill()
    for pid in pids_with(marker):
        os.kill(pid, signal.SIGKILL)
