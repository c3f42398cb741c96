"""A run's time limit (fleet_rollout.hostside.ansible_run.run_limit) and what a host that hangs
does to the others of its run: real ansible-playbook against sim hosts (local connection,
sysroot trees), each test its own temp dirs."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from hostside_support import LabHostSide, sim_lab

from fleet_rollout.hostside.ansible_run import RunSpec, run_limit
from fleet_rollout.timeouts import ANSIBLE


@pytest.fixture()
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dict[str, Any]]:
    monkeypatch.setenv("FLEET_ROLLOUT_ANSIBLE_LOG", str(tmp_path / "runs.jsonl"))
    yield from sim_lab(tmp_path)


def _runs(lab: Dict[str, Any]) -> List[Dict[str, Any]]:
    log = lab["tmp"] / "runs.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _boot_id(lab: Dict[str, Any], host: str) -> str:
    path = os.path.join(lab["backend"].sysroot(host), "proc/sys/kernel/random/boot_id")
    with open(path) as handle:
        return handle.read().strip()


def test_a_run_without_a_timeout_gets_the_step_limit() -> None:
    assert run_limit(RunSpec("p", "i", {}, forks=20), 1) == ANSIBLE
    assert run_limit(RunSpec("p", "i", {}, forks=20), 45) == 3 * ANSIBLE  # three waves of 20
    drain = RunSpec("p", "i", {"fleet_drain_timeout": 600.0}, forks=20)
    assert run_limit(drain, 10) == ANSIBLE + 600


def test_a_hung_host_neither_holds_nor_fails_the_others_in_its_run(lab: Dict[str, Any]) -> None:
    """sim-002's health read never returns (its boot_id is a FIFO nobody writes: the read
    blocks, as on a hung file system): the run's other host gets its result at its own pace
    (strategy free), and the run ends at its limit with an error for sim-002 alone."""
    boot_id = os.path.join(lab["backend"].sysroot("sim-002"), "proc/sys/kernel/random/boot_id")
    os.unlink(boot_id)
    os.mkfifo(boot_id)
    side = LabHostSide(lab["inventory"], forks=5, cache_dir=lab["cache"])
    side.timeout = 15  # the run's limit (a rollout uses ansible_run.run_limit)
    try:
        out = side.health(["sim-001", "sim-002"])
    finally:  # a writer that opens and closes the FIFO ends the blocked read
        os.close(os.open(boot_id, os.O_RDWR))
    assert out["sim-001"].ok, out
    assert out["sim-001"].result["boot_id"] == _boot_id(lab, "sim-001")
    hung = out["sim-002"]
    assert not hung.ok and "timeout" in (hung.error or ""), hung  # ended by the run's limit
    runs = _runs(lab)
    assert len(runs) == 1 and sorted(runs[0]["hosts"]) == ["sim-001", "sim-002"], runs
    assert runs[0]["status"] == "timeout", runs
