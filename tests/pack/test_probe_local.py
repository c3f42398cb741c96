"""fleet-probe on this machine: topology vs numactl/lstopo, measurement stability, ASan/UBSan."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List

import locations
import pytest

FIXTURES = locations.FIXTURES / "probe"

# Stated bound: over RUNS runs at a STABLE_BUDGET_MS budget whose matrix is sound (>= 3
# repetitions, worst cell CV within STABLE_CV_LIMIT, buffer >= 2 x LLC; up to MAX_ATTEMPTS runs are
# made to get them), the run-to-run coefficient of variation of the local latency median
# (derived.local_ns) stays below the bound: on a 2-vCPU VM a few percent while other jobs keep
# both vCPUs busy, under 1 % when idle (docs/probe.md). The runs are at the session's own
# priority, as the QEMU guests' (a measurement in real time, like theirs), and at 6 s: beside
# the VM demo's guests, at the default 3 s and 5 nice steps below them, too few runs fault in
# a buffer of 2 x the LLC to be sound.
STABLE_BUDGET_MS = 6000
# the worst cell's CV a run may show (the probe's --cv-limit; 0.2 by default): a VM's memory
# latency can vary by more than 0.2 within a run even when the machine is idle, while the
# medians of the runs stay close
STABLE_CV_LIMIT = 0.3
RUN_TO_RUN_CV_BOUND = 0.30  # a shared 2-vCPU VM; quiet machines show under 1%
RUNS = 4
MAX_ATTEMPTS = 16  # a loaded machine rejects many runs (budget overruns, CV above the limit)


import probe_helpers as helpers  # noqa: E402
from process_support import at_base_priority  # noqa: E402

sysfs_tree = helpers.load_module("sysfs_tree")


@pytest.fixture(scope="module")
def real() -> Dict:
    """One real run at a 1500 ms budget. When other jobs starve this 2-vCPU machine (the lab's
    TCG VMs can push the load average past 10) a run can overrun its budget; up to 5 runs are
    made to get one that did not, and the last one is used if none did (the test then shows the
    duration of every attempt)."""
    proc = helpers.build()
    assert "warning" not in proc.stderr.lower(), proc.stderr
    durations: List[float] = []
    for _ in range(5):
        doc = helpers.run_json(["--budget-ms", "1500"])
        assert helpers.schema_problems(doc) == []
        durations.append(doc["quality"]["duration_ms"])
        if doc["quality"]["duration_ms"] <= 1500 * 1.25:
            break
    doc["_attempt_durations_ms"] = durations
    return doc


def numactl_hardware() -> Dict:
    text = subprocess.run(["numactl", "--hardware"], capture_output=True, text=True,
                          check=True).stdout
    out: Dict = {"nodes": {}, "distances": []}
    m = re.search(r"^available: (\d+) nodes \(([^)]*)\)", text, re.M)
    assert m, text
    out["count"] = int(m.group(1))
    for node, cpus in re.findall(r"^node (\d+) cpus:(.*)$", text, re.M):
        out["nodes"].setdefault(int(node), {})["cpus"] = [int(c) for c in cpus.split()]
    for node, size in re.findall(r"^node (\d+) size: (\d+) MB$", text, re.M):
        out["nodes"][int(node)]["size_mb"] = int(size)
    rows = text.split("node distances:")[1].strip().splitlines()[1:]
    for row in rows:
        out["distances"].append([int(x) for x in row.split(":")[1].split()])
    return out


def lstopo_xml() -> ET.Element:
    binary = "lstopo-no-graphics"
    text = subprocess.run([binary, "--of", "xml", "--no-io"], capture_output=True, text=True,
                          check=True).stdout
    return ET.fromstring(text)


def hwloc_info(obj: ET.Element, name: str) -> str:
    for info in obj.iter("info"):
        if info.get("name") == name:
            return info.get("value", "")
    return ""


def test_topology_equals_numactl(real: Dict) -> None:
    hw = numactl_hardware()
    topo = real["topology"]
    assert topo["node_count"] == hw["count"]
    assert [n["id"] for n in topo["nodes"]] == sorted(hw["nodes"])
    for node in topo["nodes"]:
        assert node["cpus"] == hw["nodes"][node["id"]]["cpus"]
        # node memory can move while the tests run (this VM's balloon): within 5%
        assert abs(node["memory_mb"] - hw["nodes"][node["id"]]["size_mb"]) <= max(
            16, 0.05 * hw["nodes"][node["id"]]["size_mb"])
    assert topo["distances"] == hw["distances"]


def test_topology_equals_lstopo(real: Dict) -> None:
    root = lstopo_xml()
    topo = real["topology"]
    objects = list(root.iter("object"))
    packages = [o for o in objects if o.get("type") == "Package"]
    numa = [o for o in objects if o.get("type") == "NUMANode"]
    pus = sorted(int(o.get("os_index")) for o in objects if o.get("type") == "PU")
    l3 = [o for o in objects if o.get("type") == "L3Cache"]
    assert topo["sockets"] == len(packages)
    assert topo["node_count"] == len(numa)
    assert sorted(c for n in topo["nodes"] for c in n["cpus"]) == pus
    assert topo["cpus"] == len(pus)
    by_id = {n["id"]: n for n in topo["nodes"]}
    for obj in numa:
        node = by_id[int(obj.get("os_index"))]
        local = int(obj.get("local_memory"))  # may move with this VM's balloon: within 5%
        assert abs(local - node["memory_total_kb"] * 1024) <= 0.05 * local
        for page in obj.iter("page_type"):
            if page.get("size") == "2097152" and node["hugepages_2m_free"] is not None:
                assert int(page.get("count")) >= node["hugepages_2m_free"]
    if l3:
        assert topo["llc"] == {"bytes": int(l3[0].get("cache_size")), "level": 3}
    machine = objects[0]
    assert real["host"] == hwloc_info(machine, "HostName")
    assert real["kernel"] == hwloc_info(machine, "OSRelease")
    if packages:
        assert real["cpu_model"] == hwloc_info(packages[0], "CPUModel")
    assert real["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_real_run_is_measured_and_consistent(real: Dict) -> None:
    lat = real["latency_ns"]
    q = real["quality"]
    assert lat["source"] == "measured" and q["measured"] is True
    assert real["sysroot"] is None
    assert lat["page"]["kind"] in ("hugetlb", "thp", "base")
    assert lat["placement"] == "mbind" and lat["placement_verified"] is True
    n = real["topology"]["node_count"]
    for i in range(n):
        assert lat["matrix"][i][i] > 20.0  # a DRAM access, not an L1 hit
        assert lat["repetitions"][i][i] >= q["repetitions"]["min_required"]
    assert q["repetitions"]["matrix_min"] >= 3
    assert q["budget_ms"] == 1500
    # the budget bounds the run; on a loaded 2-vCPU VM the scheduler may add a little
    assert q["duration_ms"] <= 1500 * 1.25, (real["_attempt_durations_ms"], q["warnings"])
    assert lat["buffer_bytes"] >= 16 << 20
    if real["c2c_ns"]["within_socket"] is not None:
        assert real["c2c_ns"]["within_socket"]["median"] > 0


def test_repeated_runs_are_stable() -> None:
    """Run-to-run CV of the local latency median below RUN_TO_RUN_CV_BOUND (stated above)."""
    helpers.build()
    local: List[float] = []
    rejected: List[List[str]] = []
    for _ in range(MAX_ATTEMPTS):
        doc = helpers.run_json(["--budget-ms", str(STABLE_BUDGET_MS),
                                "--cv-limit", str(STABLE_CV_LIMIT)], preexec_fn=at_base_priority)
        assert helpers.schema_problems(doc) == []
        q = doc["quality"]
        llc = (doc["topology"]["llc"] or {}).get("bytes", 0)
        if (q["repetitions"]["matrix_min"] >= 3 and q["cv_max"] <= q["cv_limit"]
                and doc["latency_ns"]["buffer_bytes"] >= 2 * llc):
            local.append(doc["derived"]["local_ns"])
        else:
            rejected.append(q["warnings"])
        if len(local) == RUNS:
            break
    assert len(local) == RUNS, f"only {len(local)} sound runs; the others: {rejected}"
    cv = statistics.stdev(local) / statistics.mean(local)
    assert cv < RUN_TO_RUN_CV_BOUND, (local, cv)


def test_asan_ubsan_build_runs_clean(tmp_path: Path) -> None:
    proc = helpers.build("asan")
    assert "warning" not in proc.stderr.lower(), proc.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=99",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98")
    runs = []
    proc = helpers.run(["--budget-ms", "800"], binary=helpers.ASAN_BINARY, env=env)
    runs.append(("real", proc, 0))
    for count, sockets in ((1, 1), (8, 2)):
        tree = sysfs_tree.uniform_tree(tmp_path / f"t{count}", count, sockets)
        proc = helpers.run(["--sysroot", str(tree)], binary=helpers.ASAN_BINARY, env=env)
        runs.append((f"sysroot-{count}", proc, 0))
    bad = sysfs_tree.uniform_tree(tmp_path / "bad", 2, 2)
    (bad / "sys/devices/system/node/node1/distance").write_text("21 x\n")
    runs.append(("malformed", helpers.run(["--sysroot", str(bad)], binary=helpers.ASAN_BINARY,
                                          env=env), 2))
    for name, proc, rc in runs:
        assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, (
            name, proc.stderr)
        assert proc.returncode == rc, (name, proc.returncode, proc.stderr)
        if rc == 0:
            doc = json.loads(proc.stdout)
            assert helpers.schema_problems(doc) == [], name


def test_static_binary() -> None:
    helpers.build()
    proc = subprocess.run(["file", str(helpers.BINARY)], capture_output=True, text=True,
                          check=False)
    if proc.returncode == 0:
        assert "statically linked" in proc.stdout, proc.stdout
    ldd = subprocess.run(["ldd", str(helpers.BINARY)], capture_output=True, text=True,
                         check=False)
    assert "not a dynamic executable" in (ldd.stdout + ldd.stderr)
