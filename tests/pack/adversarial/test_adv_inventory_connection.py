"""Inventory values never steer Ansible or the BMC password: connection variables in an
inventory are refused at plan time (naming host and variable) and again before a run, with
nothing started; BMC addresses outside the pack config's networks are refused before any request.
Real plan code on real inventory files; a real ansible-playbook run for the run-time refusal."""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from hostside_support import LabHostSide
from net_support import LoopbackListener

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout import service
from fleet_rollout.config import load_pack_config
from fleet_rollout.connection import Connection
from fleet_rollout.errors import ConfigError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.store import MemoryStore


def _config(tmp_path: Path, inventory: Path, **extra: Any) -> Dict[str, Any]:
    return dict({"credentials": {"default": {"username": "u", "password": "secret-pw"}},
                 "bmc_networks": ["127.0.0.0/8"], "inventory": str(inventory),
                 "state_dir": str(tmp_path / "state"), "approvers": ["alice"]}, **extra)


def _inventory(tmp_path: Path, host_vars: Dict[str, Any], port: int = 9) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"web-01": dict(
        {"bmc_address": f"https://127.0.0.1:{port}", "ansible_host": "127.0.0.1"},
        **host_vars)}}}))
    return path


def _plan(tmp_path: Path, config: Dict[str, Any]) -> Dict[str, Any]:
    return service.plan_rollout(config, MemoryStore(), "home-snoop", "all", "conn-1", "alice")


@pytest.mark.parametrize("variable,value", [
    ("ansible_ssh_common_args", "-o ProxyCommand='touch {pwned}'"),
    ("ansible_ssh_args", "-o StrictHostKeyChecking=no"),
    ("ansible_ssh_extra_args", "-o UserKnownHostsFile=/dev/null"),
    ("ansible_python_interpreter", "touch {pwned}; python3"),
    ("ansible_shell_executable", "/bin/sh"),
    ("ansible_become", True),
    ("ansible_become_exe", "touch {pwned}; sudo"),
    ("ansible_connection", "local"),
    ("ansible_ssh_private_key_file", "/root/.ssh/id_rsa"),
    ("fleet_drain_command", "touch {pwned}"),
    ("ansible_host", "-oProxyCommand=touch {pwned}"),
    ("ansible_port", "22 -oProxyCommand=x"),
    ("ansible_user", "root -oProxyCommand=x"),
    ("fleet_undrain_command", "touch {pwned}"),
])
def test_a_connection_variable_in_the_inventory_refuses_the_plan(tmp_path, variable, value):
    pwned = tmp_path / "pwned"
    if isinstance(value, str):
        value = value.format(pwned=pwned)
    bmc = LoopbackListener()  # the host's BMC: nothing may reach it
    try:
        inventory = _inventory(tmp_path, {variable: value}, bmc.port)
        with pytest.raises(ConfigError) as err:
            _plan(tmp_path, _config(tmp_path, inventory))
        assert bmc.accepted == 0
    finally:
        bmc.close()
    text = str(err.value)
    assert "host web-01" in text and f"variable {variable}" in text, text
    assert str(inventory) in text and "nothing was changed" in text
    assert not pwned.exists()


def test_a_connection_variable_in_group_vars_is_refused_too(tmp_path):
    """Inventory-adjacent group_vars are the inventory's too (Ansible reads them)."""
    inventory = _inventory(tmp_path, {})
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(
        "ansible_ssh_common_args: -o ProxyCommand=nc %h %p\n")
    with pytest.raises(ConfigError, match="host web-01: variable ansible_ssh_common_args"):
        _plan(tmp_path, _config(tmp_path, inventory))


def test_a_drain_by_command_needs_the_pack_configs_commands(tmp_path):
    inventory = _inventory(tmp_path, {"fleet_drain_method": "command"})
    with pytest.raises(ConfigError, match="variable fleet_drain_method: command, but the pack "
                                          "config sets no drain_command"):
        _plan(tmp_path, _config(tmp_path, inventory))
    with pytest.raises(ConfigError, match="drain_command.*Jinja"):
        load_pack_config({"credentials": {"d": {"username": "u", "password": "p"}},
                          "drain_command": ["lb", "disable", "{{ inventory_hostname }}"]})


def test_a_lab_host_needs_the_pack_configs_leave(tmp_path):
    inventory = _inventory(tmp_path, {"fleet_sysroot": str(tmp_path)})
    with pytest.raises(ConfigError, match="variable fleet_sysroot.*allow_local_hosts"):
        _plan(tmp_path, _config(tmp_path, inventory))


def test_the_run_refuses_a_host_whose_inventory_changed_since_the_plan(tmp_path):
    """The same check before every run: a ProxyCommand added after the plan never runs."""
    backend = SimBackend(str(tmp_path / "hosts"))
    backend.power_on(boot_config("sim-001", "early", "disabled"))
    pwned = tmp_path / "pwned"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"sim-001": {
        "fleet_sysroot": backend.sysroot("sim-001"), "ansible_host": "127.0.0.1",
        "ansible_ssh_common_args": f"-o ProxyCommand='touch {pwned}'"}}}}))
    side = LabHostSide(str(inventory), cache_dir=str(tmp_path / "cache"))
    entry = side.health(["sim-001"])["sim-001"]
    assert not entry.ok and not entry.tasks
    assert "host sim-001: variable ansible_ssh_common_args" in (entry.error or "")
    assert not pwned.exists()


def test_the_run_inventory_carries_the_pack_configs_connection():
    connection = Connection(user="fleet", python_interpreter="/usr/bin/python3", become=True,
                            allow_local=True)
    remote = connection.run_vars({"ansible_host": "10.0.0.5", "ansible_port": 2222,
                                  "site": "a"})
    assert remote == {"ansible_host": "10.0.0.5", "ansible_port": 2222, "site": "a",
                      "ansible_connection": "ssh",
                      "ansible_python_interpreter": "/usr/bin/python3"}
    env = connection.env()
    assert env["ANSIBLE_BECOME"] == "True" and env["ANSIBLE_REMOTE_USER"] == "fleet"
    local = connection.run_vars({"fleet_sysroot": "/srv/lab/h1"})
    assert local["ansible_connection"] == "local"


@pytest.mark.parametrize("key,value,field", [
    ("ssh_options", ["StrictHostKeyChecking=no"], "StrictHostKeyChecking"),
    ("ssh_options", ["UserKnownHostsFile=/dev/null"], "UserKnownHostsFile"),
    ("ssh_options", ["ProxyJump=a b"], "ssh_options"),
    ("ansible_python_interpreter", "python3; id", "ansible_python_interpreter"),
    ("ansible_become_method", "pbrun", "ansible_become_method"),
    ("ssh_retries", 11, "ssh_retries"),
    ("ansible_user", "root; id", "ansible_user"),
    ("bmc_networks", ["10.0.0.0/33"], "bmc_networks"),
])
def test_bad_connection_settings_in_the_pack_config_are_named(key, value, field):
    with pytest.raises(ConfigError, match=field):
        load_pack_config({"credentials": {"d": {"username": "u", "password": "p"}},
                          key: value})


def test_a_bmc_outside_the_allowed_networks_gets_no_request(tmp_path):
    bmc = LoopbackListener()
    try:
        inventory = _inventory(tmp_path, {}, bmc.port)
        config = _config(tmp_path, inventory, bmc_networks=["10.0.0.0/8"])
        with pytest.raises(ConfigError) as err:
            _plan(tmp_path, config)
        assert bmc.accepted == 0
    finally:
        bmc.close()
    text = str(err.value)
    assert "web-01" in text and f"https://127.0.0.1:{bmc.port}" in text
    assert "outside the pack config's bmc_networks" in text
    assert "secret-pw" not in text


def test_no_bmc_networks_refuses_every_bmc():
    config = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}}})
    with pytest.raises(ConfigError, match="allows no BMC network.*bmc_networks"):
        config.endpoint(FleetHost("web-01", "https://10.0.0.5"))


def test_a_credential_goes_only_to_its_own_networks():
    config = load_pack_config({
        "credentials": {"default": {"username": "u", "password": "p"},
                        "dc2": {"username": "u2", "password": "p2",
                                "networks": ["10.22.0.0/16"]}},
        "bmc_networks": ["10.21.0.0/16", "10.22.0.0/16"]})
    assert config.endpoint(FleetHost("a", "https://10.22.1.5", bmc_credential="dc2")).password \
        == "p2"
    assert config.endpoint(FleetHost("b", "https://10.21.1.5")).password == "p"
    with pytest.raises(ConfigError, match="outside the networks of credential 'dc2'"):
        config.endpoint(FleetHost("c", "https://10.21.1.6", bmc_credential="dc2"))
    with pytest.raises(ConfigError, match="outside the pack config's bmc_networks"):
        config.endpoint(FleetHost("d", "https://10.23.0.1"))
    assert "p2" not in repr(config)


def test_a_bmc_name_must_resolve_inside_the_networks_everywhere():
    """A name counts by every address it resolves to: `localhost` may be 127.0.0.1 and ::1."""
    addresses = {info[4][0] for info in socket.getaddrinfo("localhost", None)}
    config = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                               "bmc_networks": ["127.0.0.0/8"]})
    host = FleetHost("a", "https://localhost:8443")
    if "::1" in addresses:
        with pytest.raises(ConfigError, match="::1"):
            config.endpoint(host)
    both = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                             "bmc_networks": ["127.0.0.0/8", "::1/128"]})
    assert both.endpoint(host).address == "https://localhost:8443"
    with pytest.raises(ConfigError, match="does not resolve"):
        both.endpoint(FleetHost("b", "https://no-such-bmc.invalid"))
