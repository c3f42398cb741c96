"""The example inventory (inventory/example.yml) is one the pack plans a rollout on.

It is read with the pack's own inventory code (ansible-core's parser, the host-variable cache)
and planned with the pack's plan code, as `fleet_rollout.plan` does after its BMC precheck. The
precheck itself reads every BMC over Redfish; the example's BMCs are documentation addresses
that nothing answers on, so the test gives every host the precheck's answer "not compliant yet"
(the only stand-in here).
"""
from __future__ import annotations

import ipaddress
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import yaml

from fleet_rollout.config import load_pack_config
from fleet_rollout.connection import check_hosts
from fleet_rollout.errors import ConfigError
from fleet_rollout.hostvars import lookup
from fleet_rollout.inventory import FleetHost, load_fleet
from fleet_rollout.plan import build_plan, controls_for_batch
from fleet_rollout.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "inventory" / "example.yml")
DOC_NETWORKS = [ipaddress.ip_network(n) for n in
                ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
# the pack config an operator would pair with the example (docs/configuration.md)
PACK_CONFIG: Dict[str, Any] = {
    "credentials": {"default": {"username": "fleet-bmc", "password": "example-1"},
                    "dc2": {"username": "fleet-bmc", "password": "example-2",
                            "networks": ["203.0.113.0/24"]}},
    "bmc_networks": ["192.0.2.0/24", "203.0.113.0/24"],
    "inventory": EXAMPLE,
    "drain_command": ["/usr/local/bin/lb-member", "disable", "{host}", "--wait"],
    "undrain_command": ["/usr/local/bin/lb-member", "enable", "{host}"],
}


def _fleet(targets: str, cache: str) -> Tuple[List[FleetHost], List[FleetHost]]:
    return load_fleet(EXAMPLE, targets, cache_hostvars=True, cache_dir=cache)


def _plan(targets: str, cache: str) -> Dict[str, Any]:
    everyone, hosts = _fleet(targets, cache)
    not_yet = {h.name: {"compliant": False} for h in hosts}
    return build_plan(load_profile("home-snoop"), EXAMPLE, targets, hosts, everyone, not_yet,
                      rollout_id="example")


def test_every_server_has_its_site_rack_model_and_bmc(tmp_path: Path) -> None:
    everyone, _ = _fleet("all", str(tmp_path))
    by_name = {h.name: h for h in everyone}
    assert len(everyone) == 12
    assert Counter(h.site for h in everyone) == {"dc1": 6, "dc2": 6}
    assert Counter((h.site, h.rack) for h in everyone) == {
        ("dc1", "r01"): 3, ("dc1", "r02"): 3, ("dc2", "r01"): 3, ("dc2", "r02"): 3}
    assert Counter(h.hardware_model for h in everyone) == {
        "PowerEdge R630": 9, "ProLiant DL360 Gen9": 3}
    assert by_name["web-dc2-01"].bmc_vendor == "hpe-ilo4"
    assert by_name["web-dc2-03"].bmc_vendor == "dell-idrac8"
    assert {h.bmc_credential for h in everyone if h.site == "dc2"} == {"dc2"}
    assert {h.bmc_credential for h in everyone if h.site == "dc1"} == {"default"}
    for host in everyone:  # documentation addresses only: planning contacts nothing real
        address = ipaddress.ip_address(host.bmc_address.split("//", 1)[1])
        assert any(address in net for net in DOC_NETWORKS), host


def test_the_pack_config_takes_every_bmc_and_host_of_the_example(tmp_path: Path) -> None:
    """Each host's credential resolves, its BMC address is one the config allows, and no
    inventory variable sets what the pack config decides (what a plan checks)."""
    config = load_pack_config(dict(PACK_CONFIG, state_dir=str(tmp_path)), str(ROOT))
    everyone, _ = _fleet("all", str(tmp_path))
    for host in everyone:
        endpoint = config.endpoint(host)
        assert endpoint.address == host.bmc_address
        assert endpoint.username == "fleet-bmc"
    names = [h.name for h in everyone]
    check_hosts(EXAMPLE, lookup(EXAMPLE, names, str(tmp_path)).hosts, config.connection, names)


def test_the_example_needs_the_pack_configs_drain_commands(tmp_path: Path) -> None:
    """The cache servers drain by command: without the pack config's commands they are refused
    at plan time, naming the host and the variable."""
    raw = {k: v for k, v in PACK_CONFIG.items() if not k.endswith("drain_command")}
    config = load_pack_config(dict(raw, state_dir=str(tmp_path)), str(ROOT))
    with pytest.raises(ConfigError) as err:
        check_hosts(EXAMPLE, lookup(EXAMPLE, ["cache-dc1-01"], str(tmp_path)).hosts,
                    config.connection, ["cache-dc1-01"])
    assert "cache-dc1-01" in str(err.value) and "fleet_drain_method" in str(err.value)


def test_the_inventory_sets_no_connection_settings_but_the_address(tmp_path: Path) -> None:
    """Connection settings come from the pack config: the example sets no ansible_* variable
    but ansible_host (every host has one), and no BMC credential."""
    everyone, _ = _fleet("all", str(tmp_path))
    found = lookup(EXAMPLE, [h.name for h in everyone], str(tmp_path))
    assert sorted(found.hosts) == sorted(h.name for h in everyone)
    for name, entry in found.hosts.items():
        ansible = {k for k in entry.vars if k.startswith("ansible_")}
        assert ansible == {"ansible_host"}, (name, ansible)
        assert ipaddress.ip_address(entry.vars["ansible_host"]) in DOC_NETWORKS[1]
        assert not {"bmc_username", "bmc_password"} & set(entry.vars)
    assert found.hosts["cache-dc1-01"].vars["fleet_drain_method"] == "command"
    assert "fleet_drain_method" not in found.hosts["web-dc1-01"].vars


def test_a_rollout_of_the_web_servers_is_planned_in_batches_within_the_caps(
        tmp_path: Path) -> None:
    """home-snoop on `web`: a canary, then batches growing by 2, at most one server per rack
    and two per site at a time; the cache servers of the canary's site and model are the
    unchanged control group."""
    plan = _plan("web", str(tmp_path))
    batches = [b["hosts"] for b in plan["batches"]]
    assert batches == [["web-dc1-01"],
                       ["web-dc2-01", "web-dc1-02"],
                       ["web-dc2-02", "web-dc1-03", "web-dc2-03"],
                       ["web-dc1-04", "web-dc2-04"]]
    assert [b["sites"] for b in plan["batches"]] == [["dc1"], ["dc1", "dc2"], ["dc1", "dc2"],
                                                     ["dc1", "dc2"]]
    assert plan["control"] == ["cache-dc1-01", "cache-dc1-02"]
    assert plan["control_reserved_for_last_batch"] == []
    info = plan["hosts"]
    for hosts in batches:
        assert max(Counter(info[h]["site"] for h in hosts).values()) <= 2
        assert max(Counter((info[h]["site"], info[h]["rack"]) for h in hosts).values()) <= 1
    for index in range(len(batches)):
        assert controls_for_batch(plan, index) == ["cache-dc1-01", "cache-dc1-02"]
    assert {info[h]["hardware_model"] for h in plan["control"]} == {"PowerEdge R630"}


@pytest.mark.parametrize("targets, changed", [("dc2", 6), ("dc1:&cache", 2), ("web:!dc2", 4)])
def test_targets_are_ansible_patterns_over_the_example_groups(tmp_path: Path, targets: str,
                                                              changed: int) -> None:
    plan = _plan(targets, str(tmp_path))
    assert plan["targets"] == changed
    assert sum(len(b["hosts"]) for b in plan["batches"]) == changed
    assert not set(plan["control"]) - set(plan["control_reserved_for_last_batch"]) & {
        h for b in plan["batches"] for h in b["hosts"]}


def test_the_example_is_plain_yaml_with_comments() -> None:
    text = Path(EXAMPLE).read_text()
    assert text.count("\n#") >= 10  # it explains itself
    doc = yaml.safe_load(text)
    assert set(doc["all"]["children"]) == {"dc1", "dc2", "web", "cache"}
