"""The host-side script's command line (playbooks/files/fleet_host.py): the options the
playbooks pass, parsed without argparse, refused as argparse would (exit 2, the reason on
stderr, nothing done), and a health read that imports none of what only the kernel commands
need. The script runs as the playbooks start it: its source on `python3 -I -S -c`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

import pytest
from hostside_support import HOST_SCRIPT, load_host_script

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend


def _run(args: List[str], *flags: str) -> subprocess.CompletedProcess:
    with open(HOST_SCRIPT) as handle:
        source = handle.read()
    return subprocess.run([sys.executable, "-I", "-S", *flags, "-c", source, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture()
def sysroot(tmp_path):
    backend = SimBackend(str(tmp_path / "hosts"))
    backend.power_on(boot_config("sim-001", "early", "disabled"))
    return backend.sysroot("sim-001")


def test_the_options_the_playbooks_pass_are_parsed_with_their_types():
    host = load_host_script("fleet_host_cli")
    args = host.parse_args(["drain", "--sysroot", "/srv/x", "--port", "9090",
                            "--settings", '{"a": 1}', "--threshold=3", "--timeout", "12.5",
                            "--after-window", "r1.b2.pre", "--after-window-wait", "7"])
    assert (args.command, args.sysroot, args.port, args.settings) == \
        ("drain", "/srv/x", 9090, '{"a": 1}')
    assert (args.threshold, args.timeout, args.after_window, args.after_window_wait) == \
        (3, 12.5, "r1.b2.pre", 7.0)
    assert isinstance(args.timeout, float) and isinstance(args.port, int)
    plain = host.parse_args(["undrain"])  # every option has its default
    assert (plain.sysroot, plain.port, plain.threshold, plain.timeout, plain.poll) == \
        ("/", 8080, 0, 300.0, 1.0)
    assert (plain.after_window, plain.after_window_wait, plain.rollout) == ("", 30.0, "")


@pytest.mark.parametrize("argv, reason", [
    ([], "invalid choice: ''"),
    (["kernel-restore --sysroot /"], "invalid choice: 'kernel-restore --sysroot /'"),
    (["health", "--port", "x"], "argument --port: invalid int value: 'x'"),
    (["drain", "--timeout"], "argument --timeout: expected one argument"),
    (["health", "--then", "kernel-snapshot"], "unrecognized arguments: --then"),
    (["undrain", "--sysroot", "/", "extra"], "unrecognized arguments: extra"),
    (["undrain", "--threshold=many"], "argument --threshold: invalid int value: 'many'"),
    (["undrain", "--sys", "/"], "unrecognized arguments: --sys"),  # no abbreviations
])
def test_a_command_line_it_does_not_take_is_refused_before_anything_runs(sysroot, argv,
                                                                          reason):
    flag = os.path.join(sysroot, "etc", "fleet", "maintenance")
    os.makedirs(os.path.dirname(flag), exist_ok=True)
    open(flag, "w").close()  # an undrain that ran would remove it
    proc = _run([sysroot if a == "/" else a for a in argv])
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert "fleet_host.py: error: " in proc.stderr and reason in proc.stderr, proc.stderr
    assert os.path.exists(flag)


def test_help_prints_the_commands():
    proc = _run(["--help"])
    assert proc.returncode == 0
    assert "kernel-restore" in proc.stdout and "--sysroot DIR" in proc.stdout


def test_a_health_read_imports_only_what_it_needs(sysroot):
    proc = _run(["health", "--sysroot", sysroot, "--port", "8080"], "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["maintenance"] is False and doc["boot_id"]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "json" in imported  # the measure works
    assert not imported & {"argparse", "subprocess", "shutil", "gettext", "site"}, imported


def test_the_kernel_commands_still_reach_their_tools(sysroot):
    settings = json.dumps({"sysctl": {"net.core.rmem_max": 8388608},
                           "cmdline": {"add": ["intel_idle.max_cstate=1"]}})
    for command in ("kernel-snapshot", "kernel-apply"):
        proc = _run([command, "--sysroot", sysroot, "--settings", settings])
        assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["reboot_required"] is True and "intel_idle.max_cstate=1" in " ".join(
        doc["changed"])
    proc = _run(["kernel-restore", "--sysroot", sysroot])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reboot_required"] is True
    bad = _run(["kernel-apply", "--sysroot", sysroot, "--settings",
                json.dumps({"sysctl": {"kernel.modprobe": "/tmp/x"}})])
    assert bad.returncode == 1 and json.loads(bad.stdout)["ok"] is False
