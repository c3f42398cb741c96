"""fleet_rollout.probe entry point: LocalRunner, run_probe, parse_output and its HostErrors."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import List, Sequence

import locations
import pytest

from fleet_rollout.errors import HostError
from fleet_rollout.probe import (
    DEFAULT_BINARY,
    SCHEMA_PATH,
    LocalRunner,
    parse_output,
    probe_argv,
    run_probe,
)

FIXTURES = locations.FIXTURES / "probe"


import probe_helpers as helpers  # noqa: E402

sysfs_tree = helpers.load_module("sysfs_tree")


@pytest.fixture(scope="module", autouse=True)
def built_probe() -> None:
    helpers.build()


class RecordedRunner:
    """A runner that returns a fixed stdout: stands in for a remote host whose probe printed
    something broken (the Ansible runner plugs into the same interface later)."""

    def __init__(self, host: str, stdout: str) -> None:
        self.host = host
        self.stdout = stdout
        self.calls: List[List[str]] = []

    def run(self, argv: Sequence[str], timeout: float) -> str:
        self.calls.append(list(argv))
        return self.stdout


def test_library_paths_point_into_the_pack() -> None:
    assert SCHEMA_PATH == helpers.SCHEMA
    assert DEFAULT_BINARY == helpers.BINARY


def test_the_probe_output_schema_is_a_valid_draft4_schema() -> None:
    """The verifier does not check the schema itself on every run (output._validator): this
    does, against Draft 4's metaschema."""
    import jsonschema

    from fleet_rollout.probe.output import load_schema

    jsonschema.Draft4Validator.check_schema(load_schema())
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft4Validator.check_schema(dict(load_schema(), type="no-such-type"))


def test_run_probe_on_a_sysroot(tmp_path: Path) -> None:
    sysfs_tree.lab_tree(tmp_path, "lab-07", "cod", "disabled")
    doc = run_probe(LocalRunner(host="lab-07", sysroot=str(tmp_path)))
    assert doc["topology"]["node_count"] == 4
    assert doc["latency_ns"]["source"] == "model"
    assert doc["sysroot"] == str(tmp_path)


def test_run_probe_locally_measures() -> None:
    doc = run_probe(budget_ms=600)
    assert doc["quality"]["measured"] is True
    assert doc["quality"]["budget_ms"] == 600


def test_argv() -> None:
    assert probe_argv() == []
    assert probe_argv(budget_ms=2000, cv_limit=0.1, buffer_mib=64) == [
        "--budget-ms", "2000", "--cv-limit", "0.1", "--buffer-mib", "64"]
    runner = LocalRunner(host="h", binary="/x/fleet-probe", sysroot="/srv/h")
    assert runner.argv(["--budget-ms", "5"]) == [
        "/x/fleet-probe", "--sysroot", "/srv/h", "--budget-ms", "5"]
    recorded = RecordedRunner("h", (FIXTURES / "sim-home-interleave-on.json").read_text())
    run_probe(recorded, budget_ms=1234)
    assert recorded.calls == [["--budget-ms", "1234"]]


def test_probe_failure_names_host_and_file(tmp_path: Path) -> None:
    sysfs_tree.lab_tree(tmp_path, "lab-03", "home", "disabled")
    (tmp_path / "sys/devices/system/node/node1/distance").write_text("21 ten\n")
    with pytest.raises(HostError) as info:
        run_probe(LocalRunner(host="lab-03", sysroot=str(tmp_path)))
    text = str(info.value)
    assert info.value.host == "lab-03"
    assert text.startswith("lab-03: probe exited with status 2")
    assert "node1/distance" in text


def test_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"^lab-09: probe binary .*missing"):
        run_probe(LocalRunner(host="lab-09", binary=str(tmp_path / "fleet-probe")))


def test_timeout_is_a_host_error() -> None:
    with pytest.raises(HostError, match="did not finish within"):
        run_probe(LocalRunner(host="slow-1"), budget_ms=3000, timeout=0.3)


def test_not_json() -> None:
    with pytest.raises(HostError) as info:
        run_probe(RecordedRunner("lab-04", "Segmentation fault\n"))
    assert info.value.host == "lab-04"
    assert "not JSON" in str(info.value) and "Segmentation fault" in str(info.value)
    with pytest.raises(HostError, match="expected an object"):
        parse_output("[1, 2]", "lab-04")


def _mutated(mutate) -> str:
    doc = json.loads((FIXTURES / "synthetic-2s-xeon-home-off.json").read_text())
    mutate(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["latency_ns"]["matrix"][0].__setitem__(1, "fast"), "latency_ns.matrix[0][1]"),
    (lambda d: d["quality"].pop("ok"), "quality: 'ok' is a required property"),
    (lambda d: d.__setitem__("schema_version", 7), "schema_version"),
    (lambda d: d["topology"].__setitem__("sockets", 0), "topology.sockets"),
    (lambda d: d["latency_ns"]["page"].__setitem__("kind", "giant"), "latency_ns.page.kind"),
    (lambda d: d["c2c_ns"]["across_sockets"].__setitem__("median", -3),
     "c2c_ns.across_sockets.median"),
    (lambda d: d.__setitem__("extra", 1), "(document): Additional properties"),
    (lambda d: d["latency_ns"]["matrix"].pop(), "latency_ns.matrix: expected 2 x 2"),
    (lambda d: d["topology"]["distances"][1].append(21), "topology.distances: expected 2 x 2"),
    (lambda d: d["topology"].__setitem__("cpus", 27), "topology.cpus: 27"),
    (lambda d: d["latency_ns"].__setitem__("source", "model"), "quality.measured"),
])
def test_bad_output_names_host_and_field(mutate, field: str) -> None:
    with pytest.raises(HostError) as info:
        run_probe(RecordedRunner("lab-05", _mutated(mutate)))
    assert info.value.host == "lab-05"
    assert str(info.value).startswith("lab-05: probe output field ")
    assert field in str(info.value), str(info.value)


def test_every_fixture_parses() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.json"))
    assert len(names) >= 8
    for name in names:
        doc = parse_output((FIXTURES / name).read_text(), name)
        assert helpers.schema_problems(doc) == [], name


def test_parse_output_does_not_modify_shared_state() -> None:
    text = (FIXTURES / "local-real.json").read_text()
    first = parse_output(text, "a")
    second = parse_output(text, "b")
    assert first == second and first is not second
    assert copy.deepcopy(first) == json.loads(text)
