"""`fleet-rollout judge`: text and JSON output, exit codes 0/1/3 and 2 for bad input."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import locations
import pytest

from fleet_runtime.cli import main

ROOT = locations.ROOT
FIXTURES = locations.FIXTURES / "judge"


@pytest.mark.parametrize(
    "name, code, verdict",
    [("pass.json", 0, "PASS"), ("fail.json", 1, "FAIL"), ("ceiling.json", 1, "FAIL"),
     ("inconclusive.json", 3, "INCONCLUSIVE")],
)
def test_exit_codes_and_text(capsys, name: str, code: int, verdict: str) -> None:
    assert main(["judge", "--input", str(FIXTURES / name)]) == code
    out = capsys.readouterr().out
    assert out.startswith(f"Verdict: {verdict}")
    assert "Guards:" in out and "Canary hosts" in out


def test_json_output(capsys) -> None:
    assert main(["judge", "--input", str(FIXTURES / "fail.json"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "FAIL" and report["reason"] == "regression"
    assert report["test"]["p_value"] < 0.025 and report["test"]["ci_ratio"][0] > 1
    assert {g["name"] for g in report["guards"]} >= {"canary_hosts", "traffic_shift"}
    assert report["summary"]["canary"]["usable"] == 8


def test_policy_changes_the_decision(capsys, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("min_canary_hosts: 10\n")
    assert main(["judge", "--input", str(FIXTURES / "pass.json"), "--policy", str(policy)]) == 3
    assert "8 of 8 canary hosts usable (need at least 10)" in capsys.readouterr().out


def test_all_hosts_lists_controls(capsys) -> None:
    main(["judge", "--input", str(FIXTURES / "example.json"), "--all-hosts"])
    out = capsys.readouterr().out
    assert "Control hosts:" in out and re.search(r"^  web-106 ", out, re.M)


def test_bad_input_exit_2(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"canary": ["a"], "control": ["b"],
                               "hosts": {"a": {"pre": {"drops": -4, "packets": 10}}}}))
    assert main(["judge", "--input", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.json.hosts.a.pre.drops: -4 is negative" in err
    policy = tmp_path / "p.yaml"
    policy.write_text("alpah: 1\n")
    assert main(["judge", "--input", str(FIXTURES / "pass.json"), "--policy", str(policy)]) == 2
    assert "unknown key(s) alpah" in capsys.readouterr().err
    assert main(["judge", "--input", str(tmp_path / "none.json")]) == 2


def test_console_script_end_to_end() -> None:
    """The installed command, as an operator runs it (separate process)."""
    script = Path(sys.executable).with_name("fleet-rollout")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "fleet_runtime.cli"]
    proc = subprocess.run(command + ["judge", "--input", str(FIXTURES / "inconclusive.json"),
                                     "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "INCONCLUSIVE"
    proc = subprocess.run(command + ["judge"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--input" in proc.stderr


def test_docs_example_is_the_fixture() -> None:
    """docs/judge.md (or README.md) shows tests/fixtures/judge/example.json."""
    docs = "".join(path.read_text() for path in (ROOT / "docs" / "judge.md", ROOT / "README.md")
                   if path.exists())
    blocks = re.findall(r"```json\n(.*?)```", docs, re.S)
    example = json.loads((FIXTURES / "example.json").read_text())
    assert any(json.loads(block) == example for block in blocks)
