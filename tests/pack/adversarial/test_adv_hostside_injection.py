"""The host side refuses what the profile loader refuses (defense in depth), never applies
kernel settings before their snapshot is saved, and Ansible never runs beyond the requested
hosts or renders a Jinja marker passed as data."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import locations
import pytest
import yaml
from hostside_support import LabHostSide, run_local

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout.errors import ConfigError
from fleet_rollout.hostside.ansible_run import check_extravars, check_host_names

ROOT = str(locations.ROOT)
HOST_SCRIPT = os.path.join(ROOT, "playbooks", "files", "fleet_host.py")
GOOD = {"sysctl": {"net.core.rmem_max": 8388608}, "cmdline": {"add": ["intel_idle.max_cstate=1"]}}


def _tree_digest(root: str) -> Dict[str, str]:
    out = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(base, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = hashlib.sha256(handle.read()).hexdigest()
    return out


def _host(sysroot: str, command: str, settings: Any = None) -> Dict[str, Any]:
    argv = [sys.executable, HOST_SCRIPT, command, "--sysroot", sysroot]
    if settings is not None:
        argv += ["--settings", settings if isinstance(settings, str) else json.dumps(settings)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert (proc.returncode == 0) == doc["ok"], (proc.returncode, doc)
    return doc


@pytest.fixture()
def sim(tmp_path):
    backend = SimBackend(str(tmp_path / "hosts"))
    backend.power_on(boot_config("sim-001", "early", "disabled"))
    return backend.sysroot("sim-001")


BAD_SETTINGS: List[Any] = [
    {"cmdline": {"add": ["quiet=$(touch /tmp/pwned)"]}},
    {"cmdline": {"add": ["a=`id`"]}},
    {"cmdline": {"add": ["a\" ; reboot ; \""]}},
    {"cmdline": {"remove": ["a b"]}},
    {"cmdline": {"add": ["ok=1"], "extra": ["x"]}},
    {"cmdline": {"add": "quiet"}},
    {"sysctl": {"net.core.rmem_max": "1\nkernel.core_pattern = |/tmp/x"}},
    {"sysctl": {"net.core.rmem_max": "1\n"}},
    {"sysctl": {"../../../etc/x": 1}},
    {"sysctl": {"net/core/rmem_max": 1}},
    {"sysctl": {"net.core.rmem_max": True}},
    {"sysctl": {"net.core.rmem_max": 10 ** 30}},
    {"sysctl": {"net.core.rmem_max": [1]}},
    {"nic": {"interfaces": [".."], "rx": 512}},
    {"nic": {"interfaces": ["eth0/../../x"], "rx": 512}},
    {"nic": {"rx": 10 ** 9}},
    {"nic": {"combined": "8"}},
    {"nic": {"best_effort": "yes"}},
    {"irq_affinity": "$(id)"},
    {"bogus": {}},
    "[1, 2]",
    "not json",
]


@pytest.mark.parametrize("settings", BAD_SETTINGS, ids=[str(i) for i in range(len(BAD_SETTINGS))])
@pytest.mark.parametrize("command", ["kernel-snapshot", "kernel-apply"])
def test_host_script_refuses_bad_settings_and_writes_nothing(sim, command, settings):
    assert _host(sim, "kernel-snapshot", {"sysctl": {"net.core.rmem_max": 1}})["ok"]
    before = _tree_digest(sim)
    doc = _host(sim, command, settings)
    assert doc["ok"] is False and doc["error"]
    assert _tree_digest(sim) == before  # not the GRUB file, not sysctl.d, not the snapshot


def test_kernel_apply_without_snapshot_is_refused_and_changes_nothing(sim):
    before = _tree_digest(sim)
    doc = _host(sim, "kernel-apply", GOOD)
    assert doc["ok"] is False and "no kernel snapshot" in doc["error"]
    assert _tree_digest(sim) == before


def test_kernel_snapshot_records_and_changes_nothing_first_one_wins(sim):
    before = _tree_digest(sim)
    doc = _host(sim, "kernel-snapshot", GOOD)
    assert doc["ok"] and doc["changed"] == [] and doc["first_snapshot"] is True
    assert doc["snapshot"]["sysctl"] == {"net.core.rmem_max": "212992"}
    assert doc["snapshot"]["cmdline_before"] == ["quiet"]  # the words a normal entry boots
    assert doc["snapshot"]["cmdline"] == {"added": [], "replaced": {}, "removed": []}
    after = _tree_digest(sim)
    assert set(after) - set(before) == {"var/lib/fleet-rollout/kernel-snapshot.json"}
    assert {k: v for k, v in after.items() if k in before} == before
    applied = _host(sim, "kernel-apply", GOOD)
    assert applied["ok"] and "sysctl net.core.rmem_max=8388608" in applied["changed"]
    again = _host(sim, "kernel-snapshot", GOOD)  # after the change: the first values stay
    assert again["snapshot"]["sysctl"] == {"net.core.rmem_max": "212992"}
    assert again["first_snapshot"] is False
    restored = _host(sim, "kernel-restore")
    assert restored["ok"] and "sysctl net.core.rmem_max=212992" in restored["changed"]
    with open(os.path.join(sim, "proc/sys/net/core/rmem_max")) as handle:
        assert handle.read().strip() == "212992"


def _inventory(tmp_path, sysroot: str, extra: Dict[str, Any]) -> str:
    hosts = {"sim-001": {"fleet_sysroot": sysroot}}
    doc = {"all": {"hosts": hosts, "children": extra}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_bad_token_through_real_ansible_never_reaches_grub(tmp_path, sim):
    side = LabHostSide(_inventory(tmp_path, sim, {}), forks=2)
    grub = open(os.path.join(sim, "etc/default/grub")).read()
    assert side.kernel(["sim-001"], "snapshot", {"sysctl": {"net.core.rmem_max": 1}})[
        "sim-001"].ok
    entry = side.kernel(["sim-001"], "apply", {"cmdline": {"add": ["x=$(id)"]}})["sim-001"]
    assert not entry.ok and "bad kernel command-line word" in entry.error
    assert open(os.path.join(sim, "etc/default/grub")).read() == grub


@pytest.mark.parametrize("name", ["all", "ungrouped", "web*", "a,b", "sim-001:sim-002", "!x",
                                  "~sim.*", "&x", "", "-x", "a b", "x" * 254])
def test_host_patterns_are_refused_before_ansible_runs(tmp_path, sim, name):
    inventory = _inventory(tmp_path, sim, {})
    with pytest.raises(ConfigError, match="host name .* (not allowed|reserved by Ansible)"):
        run_local("undrain", inventory, [name])
    with pytest.raises(ConfigError):
        check_host_names(["sim-001", name])


def test_group_named_like_a_host_is_caught_after_the_run(tmp_path, sim):
    """`--limit web` also selects a group called web: the run is an error, naming the hosts."""
    other = SimBackend(str(tmp_path / "other"))
    other.power_on(boot_config("sim-009", "early", "disabled"))
    group = {"web": {"hosts": {"sim-009": {
        "fleet_sysroot": other.sysroot("sim-009")}}}}
    inventory = _inventory(tmp_path, sim, group)
    with pytest.raises(ConfigError, match="outside the requested set: sim-009"):
        run_local("health", inventory, ["web"])


@pytest.mark.parametrize("value", ["{{ lookup('pipe', 'id') }}", "{% for x in y %}", "{# c #}",
                                   {"k": ["{{ x }}"]}, {"{{ k }}": 1}])
def test_jinja_markers_in_extravars_are_refused(tmp_path, sim, value):
    with pytest.raises(ConfigError, match="Jinja marker"):
        check_extravars({"fleet_kernel_settings": value})
    inventory = _inventory(tmp_path, sim, {})
    with pytest.raises(ConfigError, match="Jinja marker"):
        run_local("kernel", inventory, ["sim-001"], {"fleet_kernel_action": "snapshot",
                                                        "fleet_kernel_settings": value})


def test_kernel_action_is_checked_on_both_sides(tmp_path, sim):
    with pytest.raises(ValueError, match="kernel action"):
        LabHostSide(_inventory(tmp_path, sim, {})).kernel(["sim-001"], "apply; id")
    entry = run_local("kernel", _inventory(tmp_path, sim, {}), ["sim-001"],
                         {"fleet_kernel_action": "restore --sysroot /"})["sim-001"]
    # the host script's own command choices refuse it: nothing ran
    assert not entry.ok and entry.failed_task == "Kernel settings (restore --sysroot /)"
    assert "invalid choice: 'kernel-restore --sysroot /'" in entry.error
