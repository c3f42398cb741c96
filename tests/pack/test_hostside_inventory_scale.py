"""Each Ansible run gets an inventory of only its hosts, their variables resolved once per fleet
inventory (ansible-core's own inventory and variable managers) and cached: a host step costs the
same for 10 hosts or 20,000, and what the run's inventory holds is data."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from hostside_support import LabHostSide, run_local

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout import hostvars
from fleet_rollout.connection import local_python
from fleet_rollout.errors import ConfigError
from fleet_rollout.inventory import load_inventory

ANSIBLE_INVENTORY = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")


def _ansible_inventory_hostvars(source: str, cwd: str) -> dict:
    proc = subprocess.run([ANSIBLE_INVENTORY, "-i", source, "--list"], capture_output=True,
                          text=True, timeout=120, cwd=cwd, check=True)
    return json.loads(proc.stdout)["_meta"]["hostvars"]


def _write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture()
def cache(tmp_path):
    return str(tmp_path / "cache")


def _ini_inventory(tmp_path) -> str:
    inv = tmp_path / "ini"
    _write(inv / "group_vars" / "web.yml", "site: s1\nansible_user: web-admin\nports: [80, 443]\n")
    _write(inv / "group_vars" / "all.yml", "ansible_python_interpreter: /usr/bin/python3\n")
    _write(inv / "host_vars" / "web-01.yml", "ansible_ssh_private_key_file: /keys/web01\n"
                                             "rack: 12\n")
    return _write(inv / "hosts.ini", "[web]\nweb-01 ansible_host=10.0.0.1 ansible_port=2222\n"
                                     "web-02 ansible_host=10.0.0.2\n\n[db]\ndb-01\n\n"
                                     "[db:vars]\nansible_user=dba\nansible_connection=ssh\n\n"
                                     "[dc:children]\nweb\ndb\n\n[dc:vars]\ndc_name=east\n")


def _yaml_dir_inventory(tmp_path) -> str:
    inv = tmp_path / "yamldir"
    _write(inv / "10-hosts.yml", yaml.safe_dump({"all": {
        "vars": {"ansible_user": "root", "flag": True},
        "children": {"compute": {"hosts": {"c1": {"ansible_host": "10.1.0.1"},
                                           "c2": {"ansible_host": "10.1.0.2", "flag": False}},
                                 "vars": {"nested": {"a": [1, 2], "b": {"c": None}}}}}}}))
    _write(inv / "20-more.ini", "[storage]\ns1 ansible_host=10.2.0.1\n")
    _write(inv / "group_vars" / "compute.yml", "ansible_user: compute-admin\n")
    _write(inv / "host_vars" / "s1.yml", "ansible_port: 2200\n")
    return str(inv)


@pytest.mark.parametrize("make", [_ini_inventory, _yaml_dir_inventory])
def test_resolved_vars_are_what_ansible_inventory_shows(tmp_path, cache, make):
    source = make(tmp_path)
    expected = _ansible_inventory_hostvars(source, str(tmp_path))
    found = hostvars.lookup(source, list(expected), cache)
    assert not found.missing and not found.groups
    assert {name: entry.vars for name, entry in found.hosts.items()} == expected
    assert all(not entry.errors for entry in found.hosts.values())
    if make is _ini_inventory:
        web = found.hosts["web-01"].vars
        assert web["ansible_user"] == "web-admin" and web["rack"] == 12
        assert web["ansible_ssh_private_key_file"] == "/keys/web01"
        assert found.hosts["web-01"].groups == ["dc", "web"]


def test_dynamic_script_inventory(tmp_path, cache):
    script = _write(tmp_path / "dyn" / "inventory.py", "#!" + sys.executable + "\n" + (
        "import json, sys\n"
        "if '--host' in sys.argv: print('{}')\n"
        "else: print(json.dumps({'lab': {'hosts': ['d1', 'd2'], 'vars': {'ansible_user': 'x'}},"
        " '_meta': {'hostvars': {'d1': {'ansible_host': '10.9.0.1'}}}}))\n"))
    os.chmod(script, 0o755)
    expected = _ansible_inventory_hostvars(script, str(tmp_path))
    found = hostvars.lookup(script, ["d1", "d2"], cache)
    assert {n: e.vars for n, e in found.hosts.items()} == expected
    assert found.hosts["d1"].vars == {"ansible_host": "10.9.0.1", "ansible_user": "x"}
    assert hostvars.fingerprint(script)[1] is True  # dynamic: re-read after the TTL


def test_changed_inventory_invalidates_the_cache(tmp_path, cache):
    source = _ini_inventory(tmp_path)
    assert hostvars.lookup(source, ["web-02"], cache).hosts["web-02"].vars["site"] == "s1"
    first = os.stat(hostvars.ensure(source, cache)).st_ino
    assert os.stat(hostvars.ensure(source, cache)).st_ino == first  # unchanged: not rebuilt
    group_vars = tmp_path / "ini" / "group_vars" / "web.yml"
    group_vars.write_text(group_vars.read_text().replace("site: s1", "site: s2"))
    assert hostvars.lookup(source, ["web-02"], cache).hosts["web-02"].vars["site"] == "s2"
    hosts = tmp_path / "ini" / "hosts.ini"
    hosts.write_text(hosts.read_text().replace("web-02 ansible_host=10.0.0.2",
                                               "web-02 ansible_host=10.0.0.22\nweb-03"))
    found = hostvars.lookup(source, ["web-02", "web-03"], cache)
    assert found.hosts["web-02"].vars["ansible_host"] == "10.0.0.22"
    assert "web-03" in found.hosts
    (tmp_path / "ini" / "host_vars" / "web-01.yml").unlink()  # a removed file counts too
    assert "rack" not in hostvars.lookup(source, ["web-01"], cache).hosts["web-01"].vars


def _sim_fleet(tmp_path, extra_hosts: int = 0, extra_vars=None):
    backend = SimBackend(str(tmp_path / "hosts"))
    names = ["sim-001", "sim-002"]
    hosts = {}
    for name in names:
        backend.power_on(boot_config(name, "early", "disabled"))
        hosts[name] = {"fleet_sysroot": backend.sysroot(name)}
        hosts[name].update((extra_vars or {}).get(name, {}))
    for index in range(extra_hosts):
        hosts[f"far-{index:05d}"] = {"ansible_host": f"10.{index // 65536}.{index // 256 % 256}"
                                                     f".{index % 256}"}
    doc = {"all": {"children": {"rack1": {"hosts": hosts}}}}
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(doc))
    return backend, str(path)


def test_run_inventory_holds_only_the_runs_hosts(tmp_path, cache, monkeypatch):
    _, source = _sim_fleet(tmp_path, extra_hosts=50)
    written = []
    real = hostvars.write_run_inventory

    def spy(path, entries):
        out = real(path, entries)
        written.append(open(out).read())
        return out

    monkeypatch.setattr(hostvars, "write_run_inventory", spy)
    results = LabHostSide(source, forks=2, cache_dir=cache).health(["sim-001", "sim-002"])
    assert all(r.ok for r in results.values()), results
    doc = yaml.safe_load(written[0])
    assert sorted(doc["all"]["hosts"]) == ["sim-001", "sim-002"]
    assert doc["all"]["children"] == {"rack1": {"hosts": {"sim-001": None, "sim-002": None}}}
    # the connection is the pack config's (a lab host runs locally), not the inventory's
    assert doc["all"]["hosts"]["sim-001"]["ansible_connection"] == "local"
    assert doc["all"]["hosts"]["sim-001"]["ansible_python_interpreter"] == local_python()


def test_a_step_does_not_parse_the_fleet_inventory(tmp_path, cache, monkeypatch):
    _, source = _sim_fleet(tmp_path, extra_hosts=20)
    hostvars.ensure(source, cache)  # plan time

    def no_parse(*_args, **_kwargs):
        raise AssertionError("the fleet inventory was parsed again")

    monkeypatch.setattr(hostvars, "load_manager", no_parse)
    assert LabHostSide(source, cache_dir=cache).health(["sim-001"])["sim-001"].ok


def test_plan_time_load_warms_the_cache(tmp_path, cache):
    inv = tmp_path / "plan.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {
        "bmc_address": "https://10.0.0.5", "ansible_host": "10.3.0.1"}}}}))
    load_inventory(str(inv), cache_hostvars=True, cache_dir=cache)
    path = hostvars.ensure(str(inv), cache)
    assert time.time() - os.stat(path).st_mtime < 60
    assert hostvars.lookup(str(inv), ["n1"], cache).hosts["n1"].vars["ansible_host"] == "10.3.0.1"


ECHO = """- hosts: all
  gather_facts: false
  tasks:
    - name: fleet_result
      ansible.builtin.set_fact:
        fleet_result: {motd: "{{ motd }}", label: "{{ label }}"}
"""


def test_jinja_looking_values_are_never_rendered_at_run_time(tmp_path, cache):
    payload = "{{ lookup('pipe', 'touch " + str(tmp_path / "pwned") + "') }}"
    inv = tmp_path / "fleet.yml"
    inv.write_text(
        f"all:\n  vars:\n    fleet_sysroot: {tmp_path}\n"
        "  hosts:\n"
        f"    sim-001:\n      motd: !unsafe \"{payload}\"\n"
        "      label: \"{{ inventory_hostname }}.dc1\"\n"
        "    sim-002:\n      motd: plain\n      label: \"{{ no_such_var }}\"\n")
    playbook = _write(tmp_path / "echo.yml", ECHO)
    found = hostvars.lookup(str(inv), ["sim-001"], cache)
    text = hostvars.run_inventory_text(found.hosts.values())
    assert "!unsafe" in text and payload.replace("'", "''") in text
    results = run_local(playbook, str(inv), ["sim-001", "sim-002"], cache_dir=cache)
    one = results["sim-001"]
    assert one.ok, one
    # the inventory's own template is rendered once (as Ansible would); the !unsafe value stays
    assert one.result == {"motd": payload, "label": "sim-001.dc1"}
    assert not (tmp_path / "pwned").exists()
    two = results["sim-002"]
    assert not two.ok and "host sim-002: variable label" in two.error
    assert "no_such_var" in two.error


def test_a_requested_name_that_is_a_group_is_refused_before_running(tmp_path, cache):
    _, source = _sim_fleet(tmp_path)
    with pytest.raises(ConfigError, match="outside the requested set: sim-001, sim-002"):
        run_local("health", source, ["rack1"], cache_dir=cache)


def test_unknown_host_is_an_error_without_running_ansible(tmp_path, cache):
    _, source = _sim_fleet(tmp_path)
    results = run_local("health", source, ["nosuchhost"], cache_dir=cache)
    assert "not in inventory" in results["nosuchhost"].error


def test_cache_files_are_private(tmp_path, cache):
    _, source = _sim_fleet(tmp_path)
    path = hostvars.ensure(source, cache)
    assert os.stat(path).st_mode & 0o077 == 0
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0
