"""fleet-probe --sysroot: topology parsing from fake sysfs trees, errors, the latency model."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import locations
import pytest

FIXTURES = locations.FIXTURES / "probe"


import probe_helpers as helpers  # noqa: E402

sysfs_tree = helpers.load_module("sysfs_tree")


@pytest.fixture(scope="module", autouse=True)
def built_probe() -> None:
    proc = helpers.build()
    assert "warning" not in proc.stderr.lower(), proc.stderr


def probe(tree: Path, *extra: str) -> dict:
    doc = helpers.run_json(["--sysroot", str(tree), *extra])
    assert helpers.schema_problems(doc) == []
    return doc


def probe_error(tree: Path) -> str:
    proc = helpers.run(["--sysroot", str(tree)])
    assert proc.returncode == 2, (proc.returncode, proc.stdout[:200])
    assert proc.stdout == ""
    return proc.stderr


@pytest.mark.parametrize("node_count,sockets", [(1, 1), (2, 2), (4, 2), (8, 2), (8, 4)])
def test_uniform_trees(tmp_path: Path, node_count: int, sockets: int) -> None:
    sysfs_tree.uniform_tree(tmp_path, node_count, sockets, cores_per_node=4,
                            memory_mb_per_node=2048, hostname=f"sim-{node_count}")
    doc = probe(tmp_path)
    topo = doc["topology"]
    assert doc["host"] == f"sim-{node_count}"
    assert doc["sysroot"] == str(tmp_path)
    assert topo["node_count"] == node_count == len(topo["nodes"])
    assert topo["sockets"] == sockets
    assert topo["cpus"] == 4 * node_count
    per_socket = max(1, node_count // sockets)
    for i, node in enumerate(topo["nodes"]):
        assert node["id"] == i
        assert node["cpus"] == list(range(4 * i, 4 * i + 4))
        assert node["cpulist"] == f"{4 * i}-{4 * i + 3}"
        assert node["sockets"] == [min(i // per_socket, sockets - 1)]
        assert node["memory_mb"] == 2048
        assert node["memory_total_kb"] == 2048 * 1024
        assert node["memory_free_kb"] == int(2048 * 1024 * 0.8)
    for i in range(node_count):
        for j in range(node_count):
            same = topo["nodes"][i]["sockets"] == topo["nodes"][j]["sockets"]
            assert topo["distances"][i][j] == (10 if i == j else 11 if same else 21)
    assert topo["llc"] == {"bytes": 35840 * 1024, "level": 3}
    assert topo["hugepages"]["thp"] == "madvise"
    assert topo["virtualized"] is False
    assert doc["cpu_model"].startswith("Intel(R) Xeon(R)")
    assert doc["kernel"] == "6.1.0-sim-amd64"


@pytest.mark.parametrize("node_count,sockets", [(1, 1), (2, 2), (4, 2), (8, 2)])
def test_model_follows_the_slit_distances(tmp_path: Path, node_count: int, sockets: int) -> None:
    sysfs_tree.uniform_tree(tmp_path, node_count, sockets)
    doc = probe(tmp_path)
    lat = doc["latency_ns"]
    assert lat["source"] == "model" and doc["c2c_ns"]["source"] == "model"
    assert lat["model"] == "latency_ns = 90 * distance / 10"
    assert doc["quality"]["measured"] is False and doc["quality"]["ok"] is True
    dist = doc["topology"]["distances"]
    for i in range(node_count):
        for j in range(node_count):
            assert lat["matrix"][i][j] == pytest.approx(90 * dist[i][j] / 10)
            assert lat["cv"][i][j] == 0 and lat["repetitions"][i][j] == 0
    assert doc["derived"]["local_ns"] == pytest.approx(90.0)
    if node_count == 1:
        assert doc["derived"]["remote_local_ratio"] is None
    else:
        assert doc["derived"]["remote_local_ratio"] > 1.0
    if sockets > 1:
        assert doc["derived"]["cross_socket_ratio"] == pytest.approx(2.1)
        assert doc["c2c_ns"]["across_sockets"]["median"] == pytest.approx(100.0)
        assert doc["c2c_ns"]["across_sockets"]["sockets"] == [0, 1]
    assert doc["c2c_ns"]["within_socket"]["median"] == pytest.approx(40.0)
    # deterministic: the same tree gives the same numbers
    again = probe(tmp_path)
    assert again["latency_ns"]["matrix"] == lat["matrix"]
    assert again["c2c_ns"] == doc["c2c_ns"]


def test_sparse_node_ids_and_memoryless_node(tmp_path: Path) -> None:
    nodes = [{"cpus": [0, 1], "memory_mb": 1024, "socket": 0},
             {"cpus": [2, 3], "memory_mb": 0, "socket": 1}]
    sysfs_tree.write_tree(tmp_path, nodes, [[10, 21], [21, 10]], node_ids=[0, 2])
    doc = probe(tmp_path)
    assert [n["id"] for n in doc["topology"]["nodes"]] == [0, 2]
    assert doc["latency_ns"]["nodes"] == [0, 2]
    # node 2 has no memory: its column is empty, its row still measures node 0's memory
    assert doc["latency_ns"]["matrix"] == [[90.0, None], [189.0, None]]


def test_lab_layouts_and_buffer_choice(tmp_path: Path) -> None:
    """768 MB lab VMs: the buffer is a quarter of the smallest node's free memory."""
    cases = {("home", "disabled"): 2, ("cod", "disabled"): 4, ("home", "enabled"): 1}
    for (snoop, interleave), count in cases.items():
        tree = sysfs_tree.lab_tree(tmp_path / f"{snoop}-{interleave}", "lab-1", snoop,
                                   interleave, llc_kb=16384)
        doc = probe(tree)
        assert doc["topology"]["node_count"] == count
        assert doc["topology"]["sockets"] == 2
        free = min(n["memory_free_kb"] for n in doc["topology"]["nodes"]) * 1024
        lat = doc["latency_ns"]
        expected = min(8 * 16384 * 1024, free // 4) // (2 << 20) * (2 << 20)
        assert lat["buffer_bytes"] == expected, lat["buffer_reason"]
        assert lat["buffer_bytes"] <= free // 4
        if count == 1:
            assert lat["buffer_reason"] == "8x LLC"
        else:
            assert lat["buffer_reason"] == "1/4 of the free memory of the smallest node"


def test_buffer_floor_and_cap(tmp_path: Path) -> None:
    sysfs_tree.uniform_tree(tmp_path / "small", 2, 2, llc_kb=2048, memory_mb_per_node=65536)
    doc = probe(tmp_path / "small")
    assert doc["latency_ns"]["buffer_bytes"] == 64 << 20
    assert doc["latency_ns"]["buffer_reason"] == "floor 64 MiB"
    sysfs_tree.uniform_tree(tmp_path / "big", 2, 2, llc_kb=262144, memory_mb_per_node=65536)
    doc = probe(tmp_path / "big")
    assert doc["latency_ns"]["buffer_bytes"] == 1 << 30
    assert doc["latency_ns"]["buffer_reason"] == "cap 1 GiB"
    doc = probe(tmp_path / "big", "--buffer-mib", "100")
    assert doc["latency_ns"]["buffer_bytes"] == 100 << 20


def test_optional_files_missing(tmp_path: Path) -> None:
    """No cache info, no THP, no huge pages, no identity files: still a valid document."""
    sysfs_tree.uniform_tree(tmp_path, 2, 2, llc_kb=None, thp=None, hugepages_2m=None)
    for rel in ("proc/cpuinfo", "proc/sys/kernel/hostname", "proc/sys/kernel/random/boot_id",
                "proc/sys/kernel/osrelease"):
        (tmp_path / rel).unlink()
    doc = probe(tmp_path)
    assert doc["topology"]["llc"] is None
    assert doc["topology"]["hugepages"]["thp"] == "unavailable"
    assert doc["topology"]["hugepages"]["hugepages_2m_total"] is None
    assert doc["host"] is None and doc["boot_id"] is None and doc["cpu_model"] is None
    assert doc["topology"]["virtualized"] is None
    assert any("LLC size unknown" in w for w in doc["quality"]["warnings"])


def test_explicit_huge_pages_are_planned(tmp_path: Path) -> None:
    sysfs_tree.uniform_tree(tmp_path, 2, 2, hugepages_2m=1024)
    doc = probe(tmp_path)
    assert doc["latency_ns"]["page"]["kind"] == "hugetlb"
    assert doc["topology"]["nodes"][0]["hugepages_2m_free"] == 1024
    assert doc["topology"]["hugepages"]["hugepages_2m_total"] == 2048


@pytest.mark.parametrize("rel", [
    "sys/devices/system/node/online",
    "sys/devices/system/node/node1/cpulist",
    "sys/devices/system/node/node1/distance",
    "sys/devices/system/node/node1/meminfo",
    "sys/devices/system/cpu/cpu5/topology/physical_package_id",
])
def test_missing_required_file_is_named(tmp_path: Path, rel: str) -> None:
    sysfs_tree.uniform_tree(tmp_path, 2, 2)
    (tmp_path / rel).unlink()
    err = probe_error(tmp_path)
    assert str(tmp_path / rel) in err
    assert "No such file" in err


@pytest.mark.parametrize("rel,content,expect", [
    ("sys/devices/system/node/online", "zero\n", "malformed list 'zero'"),
    ("sys/devices/system/node/online", "", "no online node"),
    ("sys/devices/system/node/node0/cpulist", "0-3,x\n", "malformed list '0-3,x'"),
    ("sys/devices/system/node/node0/cpulist", "3-1\n", "malformed list"),
    ("sys/devices/system/node/node1/cpulist", "0-4\n", "cpu 0 is also listed by node"),
    ("sys/devices/system/node/node1/distance", "21\n", "expected 2 distances"),
    ("sys/devices/system/node/node1/distance", "21 10 10\n", "got more"),
    ("sys/devices/system/node/node1/distance", "21 abc\n", "expected 2 distances"),
    ("sys/devices/system/node/node1/distance", "10 20\n", "local distance is 20"),
    ("sys/devices/system/node/node1/meminfo", "Node 1 MemUsed: 5 kB\n", "MemTotal"),
    ("sys/devices/system/node/node1/meminfo", "Node 0 MemTotal: 5 kB\n", "line for node 0"),
    ("sys/devices/system/cpu/cpu2/topology/physical_package_id", "zero\n",
     "expected an integer, got 'zero'"),
    ("sys/devices/system/cpu/cpu0/cache/index3/size", "lots\n", "malformed size 'lots'"),
    ("sys/kernel/mm/transparent_hugepage/enabled", "always madvise never\n",
     "expected e.g. 'always [madvise] never'"),
    ("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "-3\n", "expected an integer"),
])
def test_malformed_file_is_named(tmp_path: Path, rel: str, content: str, expect: str) -> None:
    sysfs_tree.uniform_tree(tmp_path, 2, 2)
    (tmp_path / rel).write_text(content)
    err = probe_error(tmp_path)
    assert str(tmp_path / rel) in err, err
    assert expect in err, err


def test_usage_errors(tmp_path: Path) -> None:
    for args, expect in ((["--sysroot", str(tmp_path / "nope")], "not a directory"),
                         (["--budget-ms", "5"], "--budget-ms: expected an integer in 100"),
                         (["--budget-ms"], "needs a value"),
                         (["--cv-limit", "x"], "--cv-limit"),
                         (["--frobnicate"], "unknown argument '--frobnicate'")):
        proc = helpers.run(args)
        assert proc.returncode == 2 and expect in proc.stderr, (args, proc.stderr)
    proc = helpers.run(["--version"])
    assert proc.returncode == 0 and proc.stdout.startswith("fleet-probe 1.")


def test_recorded_sim_fixtures_still_match(tmp_path: Path) -> None:
    """The sim-*.json fixtures are what the current probe prints for the lab trees."""
    spec = importlib.util.spec_from_file_location("probe_regenerate", FIXTURES / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.TREES = tmp_path
    for name, snoop, interleave in module.LAB_STATES:
        recorded = json.loads((FIXTURES / f"{name}.json").read_text())
        doc = probe(module.lab_tree_for(name, snoop, interleave))
        for d in (recorded, doc):
            d.pop("sysroot")
            d["quality"].pop("duration_ms")
        assert doc == recorded, name


def test_llc_from_index3_only(tmp_path: Path) -> None:
    """Trees that hold only cache/index3 (as the lab's sim hosts write) still give the LLC."""
    sysfs_tree.uniform_tree(tmp_path, 2, 2, llc_kb=16384)
    for cpu_dir in (tmp_path / "sys/devices/system/cpu").glob("cpu[0-9]*"):
        for index in ("index0", "index1", "index2"):
            shutil.rmtree(cpu_dir / "cache" / index)
    doc = probe(tmp_path)
    assert doc["topology"]["llc"] == {"bytes": 16 << 20, "level": 3}
    assert doc["latency_ns"]["buffer_bytes"] == 128 << 20
