"""Profiles are fully validated at plan time: injection through kernel words, sysctl names and
values, NIC names, BIOS attributes, huge numbers and paths as profile names is refused with a
ConfigError naming the profile and the field, before any host is touched."""
from __future__ import annotations

import copy
import datetime
import os
import random
import re
from typing import Any, Dict, List, Tuple

import locations
import pytest
import yaml
from hostside_support import load_host_script

from fleet_rollout.errors import ConfigError
from fleet_rollout.profile import (
    PROFILE_NAME_PATTERN,
    load_profile,
    load_profile_file,
    validate_profile,
)

ROOT = str(locations.ROOT)
FUZZ_COUNT = 500
FUZZ_SEED = 1313


def _host_script() -> Any:
    return load_host_script("fleet_host_for_fuzz")


def _base() -> Dict[str, Any]:
    return {
        "name": "adv-base", "description": "adversarial base", "reverse_of": "adv-base-revert",
        "bios": {"snoop_mode": "home", "node_interleaving": "disabled"},
        "bios_extra": {"LabReceiveSlowdown": "Enabled"},
        "kernel": {"sysctl": {"net.core.rmem_max": 16777216, "net.ipv4.tcp_rmem": "4096 87380 6"},
                   "cmdline": {"add": ["intel_idle.max_cstate=1", "isolcpus=1-3,5"],
                               "remove": ["quiet"]},
                   "nic": {"interfaces": ["eth0"], "rx": 4096, "tx": 4096, "combined": 8,
                           "best_effort": True},
                   "irq_affinity": "numa-local"},
        "probe": {"budget_ms": 3000},
        "canary": {"window_seconds": 60, "soak_seconds": 30, "metric": {},
                   "policy": {"min_packets": 2000}},
        "batches": {"canary_size": 1, "growth": 2, "max_batch": 50, "parallel": 10},
        "failure_budget": {"per_batch": 0, "total": 1, "on_host_failure": "restore"},
        "approval": {"required": True, "ttl_minutes": 60},
        "redfish": {"graceful_timeout": 300, "boot_timeout": 900, "poll": 2},
        "drain": {"timeout": 300, "threshold": 0},
    }


def _with(path: Tuple[Any, ...], value: Any) -> Dict[str, Any]:
    data = _base()
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


ATTACKS = [
    (("kernel", "cmdline", "add", 0), "quiet=$(touch /tmp/pwned)", "kernel.cmdline.add.0"),
    (("kernel", "cmdline", "add", 0), "a=`id`", "kernel.cmdline.add.0"),
    (("kernel", "cmdline", "add", 0), "a;reboot", "kernel.cmdline.add.0"),
    (("kernel", "cmdline", "add", 0), "a\" b", "kernel.cmdline.add.0"),
    (("kernel", "cmdline", "add", 0), "a={{ lookup('pipe','id') }}", "kernel.cmdline.add.0"),
    (("kernel", "cmdline", "remove", 0), "a|b", "kernel.cmdline.remove.0"),
    (("kernel", "cmdline", "add"), [f"w{i}" for i in range(33)], "kernel.cmdline.add"),
    (("kernel", "sysctl", "net.core.rmem_max"), "1\nkernel.modprobe = /tmp/x",
     "kernel.sysctl.net.core.rmem_max"),
    (("kernel", "sysctl", "net.core.rmem_max"), "1\n", "kernel.sysctl.net.core.rmem_max"),
    (("kernel", "sysctl", "net.core.rmem_max"), "{{ 7 * 7 }}", "kernel.sysctl.net.core.rmem_max"),
    (("kernel", "sysctl", "net.core.rmem_max"), 10 ** 30, "kernel.sysctl.net.core.rmem_max"),
    (("kernel", "sysctl", "net.core.rmem_max"), True, "kernel.sysctl.net.core.rmem_max"),
    (("kernel", "sysctl", "../../etc/shadow"), 1, "kernel.sysctl"),
    (("kernel", "sysctl", "net/core/rmem_max"), 1, "kernel.sysctl"),
    (("kernel", "sysctl", "net.core..x"), 1, "kernel.sysctl"),
    (("kernel", "nic", "interfaces", 0), "..", "kernel.nic.interfaces.0"),
    (("kernel", "nic", "interfaces", 0), "eth0;id", "kernel.nic.interfaces.0"),
    (("kernel", "nic", "interfaces", 0), "a-very-long-interface", "kernel.nic.interfaces.0"),
    (("kernel", "nic", "rx"), 10 ** 9, "kernel.nic.rx"),
    (("kernel", "nic", "combined"), 0, "kernel.nic.combined"),
    (("kernel", "nic", "best_effort"), "yes", "kernel.nic.best_effort"),
    (("bios_extra", "Lab Slowdown"), "Enabled", "bios_extra"),
    (("bios_extra", "LabReceiveSlowdown"), "$(id)", "bios_extra.LabReceiveSlowdown"),
    (("batches", "growth"), 1e300, "batches.growth"),
    (("batches", "growth"), float("inf"), "batches.growth"),
    (("batches", "growth"), float("nan"), "batches.growth"),
    (("batches", "canary_size"), 10 ** 12, "batches.canary_size"),
    (("redfish", "boot_timeout"), 10 ** 7, "redfish.boot_timeout"),
    (("drain", "timeout"), "300; id", "drain.timeout"),
    (("approval", "ttl_minutes"), 10 ** 6, "approval.ttl_minutes"),
    (("canary", "window_steps"), 13, "canary.window_steps"),
    (("canary", "window_steps"), 0, "canary.window_steps"),
    (("canary", "window_steps"), "4", "canary.window_steps"),
    (("canary", "pre_windows"), 5, "canary.pre_windows"),
    (("canary", "pre_windows"), 0, "canary.pre_windows"),
    (("canary", "pre_windows"), 1.5, "canary.pre_windows"),
    (("canary", "pre_windows"), "3", "canary.pre_windows"),
    (("name",), "../etc/passwd", "name"),
    (("name",), "x" * 65, "name"),
    (("reverse_of",), "/etc/passwd", "reverse_of"),
    (("description",), "x" * 201, "description"),
    (("description",), "two\nlines", "description"),
    (("description",), "{{ config_context.credentials }}", "description"),
]


@pytest.mark.parametrize("path,value,field", ATTACKS,
                         ids=[f"{'.'.join(map(str, a[0]))}={str(a[1])[:20]!r}" for a in ATTACKS])
def test_attack_is_refused_naming_profile_and_field(path, value, field):
    with pytest.raises(ConfigError) as err:
        validate_profile(_with(path, value), "adv.yaml")
    text = str(err.value)
    assert text.startswith("adv.yaml: field "), text
    assert field in text, text


def test_window_steps_must_leave_each_step_time_for_a_collection():
    """A step is at least 5 s (a collection of the batch and its controls must fit): 12 steps
    of a 60 s window are fine, 4 steps of a 15 s window are not, and the error says how many
    would be; the default is 4 steps, 1 means none."""
    assert validate_profile(_with(("canary", "window_steps"), 12), "adv.yaml")
    assert validate_profile(_base(), "adv.yaml")["canary"]["window_steps"] == 4
    short = _with(("canary", "window_seconds"), 15)
    with pytest.raises(ConfigError, match=r"adv.yaml: field canary.window_steps: 4 steps of a "
                                          r"15 s window .* use at most 3 steps"):
        validate_profile(short, "adv.yaml")
    short["canary"]["window_steps"] = 1
    assert validate_profile(short, "adv.yaml")["canary"]["window_steps"] == 1


def test_the_pre_window_lasts_three_windows_unless_the_profile_says():
    assert validate_profile(_base(), "adv.yaml")["canary"]["pre_windows"] == 3
    assert validate_profile(_with(("canary", "pre_windows"), 1), "adv.yaml")["canary"][
        "pre_windows"] == 1
    assert validate_profile(_with(("canary", "pre_windows"), 4), "adv.yaml")["canary"][
        "pre_windows"] == 4


def test_the_base_profile_and_every_shipped_profile_validate():
    assert validate_profile(_base(), "adv.yaml")["kernel"]["nic"]["rx"] == 4096
    names = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "profiles"))
                   if f.endswith(".yaml"))
    assert names and all(load_profile(name).name == name for name in names)


@pytest.mark.parametrize("name", ["../profiles/home-snoop", "/etc/passwd", "home-snoop.yaml",
                                  "profiles/home-snoop", "Home-Snoop", "-x", "a" * 65, "",
                                  "home snoop", "home-snoop\n", "..", "."])
def test_load_profile_takes_names_only(name):
    with pytest.raises(ConfigError, match="no paths"):
        load_profile(name)
    assert not re.fullmatch(PROFILE_NAME_PATTERN, name)


def test_load_profile_refuses_a_file_whose_name_field_differs(tmp_path):
    (tmp_path / "good-one.yaml").write_text(yaml.safe_dump(_with(("name",), "other-name")))
    with pytest.raises(ConfigError, match="field name: 'other-name' must equal"):
        load_profile("good-one", str(tmp_path))
    (tmp_path / "adv-base.yaml").write_text(yaml.safe_dump(_base()))
    assert load_profile("adv-base", str(tmp_path)).name == "adv-base"


def test_load_profile_file_is_the_operator_side_path_loader(tmp_path):
    path = tmp_path / "anything.yaml"
    path.write_text(yaml.safe_dump(_base()))
    assert load_profile_file(str(path)).name == "adv-base"
    path.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_profile_file(str(path))


# ------------------------------------------------------------------ fuzz
NASTY: List[Any] = [
    "$(id)", "`id`", "a;b", "a|b", "a&&b", "<x", ">x", "a\nb", "a\rb", "x\x00y", "{{ 7*7 }}",
    "{% raw %}", "{#", "../../etc/passwd", "/etc/passwd", " ", "", "x" * 5000, "é", "\u202e",
    "'", "\"", "\\", "*", "all", "web*,db", 10 ** 30, -(10 ** 30), -1, 0, 1, 2 ** 63, 1e308,
    -1e308, float("nan"), float("inf"), 0.5, True, False, None, [], {}, [1, "x"], {"a": 1},
    {"$(x)": 1}, {1: 2}, datetime.date(2024, 1, 1), b"bytes",
]


def _leaf_paths(node: Any, prefix: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths.extend(_leaf_paths(value, prefix + (key,)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths.extend(_leaf_paths(value, prefix + (index,)))
    return paths


def _mutate(rng: random.Random, data: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        paths = _leaf_paths(out)
        path = rng.choice(paths)
        parent: Any = out
        for key in path[:-1]:
            parent = parent[key]
        kind = rng.random()
        value = copy.deepcopy(rng.choice(NASTY))
        if kind < 0.6:
            parent[path[-1]] = value
        elif kind < 0.8 and isinstance(parent, dict):
            parent[rng.choice(NASTY[:20] + ["net.core.x", "eth1", "LabX"])
                   if rng.random() < 0.7 else "extra"] = value
        elif isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent.append(value)
    return out


def test_fuzz_profiles_validate_or_name_the_field():
    """500 seeded mutations: each validates, or a ConfigError names the profile and a field;
    never another exception. What validates is accepted by the host script's own check."""
    host = _host_script()
    rng = random.Random(FUZZ_SEED)
    counts = {"valid": 0, "refused": 0}
    for index in range(FUZZ_COUNT):
        where = f"fuzz-{index}.yaml"
        data = _mutate(rng, _base())
        try:
            merged = validate_profile(data, where)
        except ConfigError as err:
            text = str(err)
            assert text.startswith(f"{where}: field "), (data, text)
            assert "Traceback" not in text
            counts["refused"] += 1
            continue
        host.check_settings(merged.get("kernel") or {})  # the host agrees: no Failure
        counts["valid"] += 1
    print(f"profile fuzz: {FUZZ_COUNT} mutated profiles (seed {FUZZ_SEED}): {counts}")
    assert counts["refused"] > FUZZ_COUNT // 2 and counts["valid"] > 0
    assert sum(counts.values()) == FUZZ_COUNT


def test_fuzz_profile_names_never_escape_profiles_dir(tmp_path):
    rng = random.Random(FUZZ_SEED)
    alphabet = "abc-./\\~$`;\n \x00AZ09*"
    refused = 0
    for _ in range(300):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            load_profile(name, str(tmp_path))
        except ConfigError as err:
            assert "no paths" in str(err) or "not found" in str(err)
            refused += 1
    assert refused == 300


@pytest.mark.parametrize("kernel,field", [
    ({"sysctl": {"kernel.modprobe": "/tmp/x"}}, "kernel.sysctl.kernel.modprobe"),
    ({"sysctl": {"kernel.core_pattern": "/tmp/core"}}, "kernel.sysctl.kernel.core_pattern"),
    ({"sysctl": {"fs.binfmt_misc.register": "x"}}, "kernel.sysctl.fs.binfmt_misc.register"),
    ({"cmdline": {"add": ["init=/tmp/x"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["numa_balancing=disable", "rdinit=/x"]}}, "kernel.cmdline.add.1"),
    ({"cmdline": {"remove": ["root=/dev/sda1"]}}, "kernel.cmdline.remove.0"),
    ({"cmdline": {"add": ["systemd.run=/tmp/x"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["rd.shell"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["systemd.debug_shell"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["systemd.mask=sshd.service"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["S"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["1"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"add": ["mitigations=off"]}}, "kernel.cmdline.add.0"),
    ({"cmdline": {"remove": ["rd.lvm.lv"]}}, "kernel.cmdline.remove.0"),
    ({"sysctl": {"kernel.sysrq": 1}}, "kernel.sysctl.kernel.sysrq"),
    ({"sysctl": {"kernel.yama.ptrace_scope": 0}}, "kernel.sysctl.kernel.yama.ptrace_scope"),
    ({"sysctl": {"kernel.randomize_va_space": 0}}, "kernel.sysctl.kernel.randomize_va_space"),
    ({"sysctl": {"fs.suid_dumpable": 2}}, "kernel.sysctl.fs.suid_dumpable"),
])
def test_settings_that_are_not_tuning_are_refused(kernel, field):
    """Allowed characters are not enough: only the listed tuning names pass (what makes the
    kernel run a program, boot something else, open a shell or weaken its defenses is not
    listed), at plan time and again by the host script."""
    with pytest.raises(ConfigError, match=f"field {re.escape(field)}"):
        validate_profile({"name": "p", "bios": {"snoop_mode": "home"}, "kernel": kernel}, "p")
    host = _host_script()
    with pytest.raises(host.Failure):
        host.check_settings(kernel)


def test_tuning_names_pass():
    kernel = {"sysctl": {"net.core.rmem_max": 1, "net.ipv4.tcp_rmem": "4096 87380 6291456",
                         "vm.dirty_ratio": 10, "kernel.sched_migration_cost_ns": 5000000},
              "cmdline": {"add": ["numa_balancing=disable", "transparent_hugepage=never",
                                  "intel_idle.max_cstate=1"], "remove": ["quiet"]}}
    validate_profile({"name": "p", "bios": {"snoop_mode": "home"}, "kernel": kernel}, "p")
    assert _host_script().check_settings(kernel) == kernel


def test_the_host_script_keeps_the_profile_allowlists():
    from fleet_rollout import profile

    host = _host_script()
    assert host.SYSCTL_ALLOWED == profile.SYSCTL_ALLOWED
    assert host.CMDLINE_ALLOWED == profile.CMDLINE_ALLOWED
