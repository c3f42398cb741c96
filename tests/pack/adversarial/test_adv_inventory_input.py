"""Adversarial: inventory values that widened a run or leaked credentials.

- `bmc_address: https://user:pass@bmc` passed the credentials-in-inventory check;
- host names became the Ansible `--limit` pattern unvalidated (`web*`, `all`, `a,b`, `!x`,
  `~re`, `@file`, a group's name select more hosts than the one meant);
- labels were str()-ed whatever they were (a list or a mapping became a label).
Each is now a ConfigError naming the inventory file, the host and the field, without the secret.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from fleet_rollout.errors import ConfigError
from fleet_rollout.inventory import HOST_NAME_PATTERN, check_host_name, load_inventory

SECRET = "Hunter2-inventory-pass"


def _write(tmp_path: Path, hosts: Dict[str, Dict[str, Any]], group: str = "site_a") -> str:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": hosts}}}}))
    return str(path)


def _host(**extra: Any) -> Dict[str, Any]:
    values: Dict[str, Any] = {"bmc_address": "https://10.0.0.5"}
    values.update(extra)
    return values


def _refused(source: str, *words: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_inventory(source)
    text = str(err.value)
    assert f"inventory {source}" in text
    assert SECRET not in text
    for word in words:
        assert word in text, text
    return text


@pytest.mark.parametrize("address", [
    f"https://admin:{SECRET}@10.0.0.5",
    f"https://admin:{SECRET}@10.0.0.5:443/",
    f"https://{SECRET}@bmc.example",
])
def test_userinfo_in_bmc_address_is_refused_without_echo(tmp_path: Path, address: str) -> None:
    source = _write(tmp_path, {"web-1": _host(bmc_address=address)})
    text = _refused(source, "host web-1", "bmc_address", "user name or password")
    assert "admin" not in text


@pytest.mark.parametrize("address,why", [
    ("ftp://10.0.0.5", "must start with https://"),
    ("10.0.0.5", "must start with https://"),
    ("https://", "no valid host"),
    ("https://10.0.0.5:0", "invalid port"),
    ("https://10.0.0.5:70000", "invalid port"),
    ("https://10.0.0.5:http", "invalid port"),
    ("https://10.0.0.5/redfish/v1", "must not have a path"),
    ("https://10.0.0.5/?x=1", "query or fragment"),
    ("https://10.0.0.5#frag", "query or fragment"),
    ("https://bmc .example", "white space"),
    ("https://[zz::1]", "bmc_address"),
    ("https://-bmc.example", "no valid host"),
])
def test_bmc_address_is_validated_fully(tmp_path: Path, address: str, why: str) -> None:
    source = _write(tmp_path, {"web-1": _host(bmc_address=address)})
    _refused(source, "host web-1", "bmc_address", why)


@pytest.mark.parametrize("address", ["https://10.0.0.5", "https://10.0.0.5:8443/",
                                     "https://bmc-01.example.com", "https://[fd00::5]:443",
                                     "http://127.0.0.1:8000"])
def test_good_bmc_addresses_pass(tmp_path: Path, address: str) -> None:
    source = _write(tmp_path, {"web-1": _host(bmc_address=address)})
    assert load_inventory(source)[0].bmc_address == address


@pytest.mark.parametrize("name", ["web*", "a,b", "!x", "~re.*", "@file", "a:b",
                                  "a b", "-x", ".hidden", "x" * 254, "web&prod"])
def test_host_names_that_are_ansible_patterns_are_refused(tmp_path: Path, name: str) -> None:
    source = _write(tmp_path, {name: _host(), "web-2": _host()})
    _refused(source, "host name", "not allowed")


@pytest.mark.parametrize("name", ["all", "ungrouped", "site_a"])
def test_host_named_like_a_group_is_refused(tmp_path: Path, name: str) -> None:
    source = _write(tmp_path, {name: _host(), "web-2": _host()})
    _refused(source, f"host {name}", "also a group name")


@pytest.mark.parametrize("field_name,value", [
    ("site", ["a", "b"]), ("rack", {"r": 1}), ("hardware_model", True),
    ("bmc_vendor", 1.5), ("bmc_credential", ["default"]),
    ("site", "a" * 65), ("rack", "r1; rm -rf /"), ("hardware_model", "m\nx"),
    ("bmc_credential", "../other"), ("site", "{{ lookup('env', 'HOME') }}"),
])
def test_labels_are_type_checked(tmp_path: Path, field_name: str, value: Any) -> None:
    source = _write(tmp_path, {"web-1": _host(**{field_name: value})})
    _refused(source, "host web-1", field_name)


def test_good_inventory_loads_with_labels(tmp_path: Path) -> None:
    source = _write(tmp_path, {
        "web-1.example.com": _host(site="site-a", rack=12, hardware_model="PowerEdge R630",
                                   bmc_vendor="dell-idrac8", bmc_credential="lab"),
        "web_2": _host()})
    hosts = {h.name: h for h in load_inventory(source)}
    assert hosts["web-1.example.com"].rack == "12"
    assert hosts["web-1.example.com"].hardware_model == "PowerEdge R630"
    assert hosts["web_2"].site == "default" and hosts["web_2"].bmc_vendor is None


def test_exported_host_name_check() -> None:
    assert isinstance(HOST_NAME_PATTERN, str)
    assert re.match(HOST_NAME_PATTERN, "lab-001")
    assert check_host_name("lab-001", "x") == "lab-001"
    for bad in ("all,web", "web*", "", None, 5):
        with pytest.raises(ConfigError, match="^where: host name"):
            check_host_name(bad, "where")
