"""Benchmark of the topology probe (probe/build/fleet-probe), run by `make bench-probe`.

For budgets of 1x, 2x and 4x the default (3000 ms) it runs the probe N times on this machine and
reports the runtime, the within-run stability (CV of the repetitions) and the run-to-run spread of
the latency matrix and of the core-to-core latency; then the cost of a --sysroot (model) run, as
`sim` hosts use it.

    .venv/bin/python bench/bench_probe.py [--runs 3] [--budget-ms 3000] [--scales 1,2,4] [--json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from fleet_runtime.paths import REPO_ROOT as ROOT

BINARY = ROOT / "probe" / "build" / "fleet-probe"


def _sysfs_tree() -> Any:
    path = ROOT / "tests" / "fixtures" / "probe" / "sysfs_tree.py"
    spec = importlib.util.spec_from_file_location("probe_sysfs_tree", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_probe(args: List[str]) -> Dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run([str(BINARY), *args], capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - start) * 1000.0
    if proc.returncode != 0:
        raise SystemExit(f"fleet-probe {' '.join(args)} failed: {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)
    doc["_wall_ms"] = wall
    return doc


def cv(values: List[float]) -> Optional[float]:
    values = [v for v in values if v is not None]
    if len(values) < 2 or statistics.mean(values) == 0:
        return None
    return statistics.stdev(values) / statistics.mean(values)


def c2c(doc: Dict[str, Any], key: str) -> Optional[float]:
    pair = doc["c2c_ns"][key]
    return pair["median"] if pair else None


def summarize(budget_ms: int, docs: List[Dict[str, Any]]) -> Dict[str, Any]:
    local = [d["derived"]["local_ns"] for d in docs]
    remote = [d["derived"]["remote_ns"] for d in docs if d["derived"]["remote_ns"] is not None]
    within = [c2c(d, "within_socket") for d in docs if c2c(d, "within_socket") is not None]
    across = [c2c(d, "across_sockets") for d in docs if c2c(d, "across_sockets") is not None]
    return {
        "budget_ms": budget_ms,
        "runs": len(docs),
        "wall_ms_mean": statistics.mean(d["_wall_ms"] for d in docs),
        "wall_ms_max": max(d["_wall_ms"] for d in docs),
        "setup_ms_mean": statistics.mean(d["quality"]["setup_ms"] for d in docs),
        "buffer_mib_min": min(d["latency_ns"]["buffer_bytes"] for d in docs) / 2**20,
        "page_kind": sorted({d["latency_ns"]["page"]["kind"] for d in docs}),
        "matrix_reps_mean": statistics.mean(d["quality"]["repetitions"]["matrix_min"]
                                            for d in docs),
        "matrix_discarded_mean": statistics.mean(d["quality"]["repetitions"]["discarded_matrix"]
                                                 for d in docs),
        "within_run_cv_mean": statistics.mean(d["quality"]["cv_max"] for d in docs),
        "local_ns_median": statistics.median(local),
        "local_ns_run_cv": cv(local),
        "remote_ns_median": statistics.median(remote) if remote else None,
        "remote_ns_run_cv": cv(remote),
        "c2c_within_ns_median": statistics.median(within) if within else None,
        "c2c_within_run_cv": cv(within),
        "c2c_within_rep_cv_mean": statistics.mean(d["quality"]["c2c_cv_max"] for d in docs),
        "c2c_across_ns_median": statistics.median(across) if across else None,
        "c2c_across_run_cv": cv(across),
        "c2c_reps_mean": statistics.mean(d["quality"]["repetitions"]["c2c_min"] for d in docs),
        "quality_ok": sum(1 for d in docs if d["quality"]["ok"]),
        "within_budget": sum(1 for d in docs if d["quality"]["within_budget"]),
        "local_ns_values": local,
        "c2c_within_values": within,
    }


def model_cost(repeat: int) -> List[Dict[str, Any]]:
    tree_mod = _sysfs_tree()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for nodes, sockets in ((1, 1), (2, 2), (8, 2)):
            tree = tree_mod.uniform_tree(Path(tmp) / f"n{nodes}", nodes, sockets)
            times = [run_probe(["--sysroot", str(tree)])["_wall_ms"] for _ in range(repeat)]
            rows.append({"nodes": nodes, "sockets": sockets, "runs": repeat,
                         "wall_ms_median": statistics.median(times),
                         "wall_ms_max": max(times)})
    return rows


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def print_tables(result: Dict[str, Any]) -> None:
    host = result["host"]
    print(f"fleet-probe on {host['host']} ({host['cpu_model']}, {host['sockets']} socket(s), "
          f"{host['nodes']} node(s), {host['cpus']} CPUs, virtualized={host['virtualized']})")
    print(f"{result['runs']} runs per budget\n")
    head = (f"{'budget':>7} {'wall ms':>8} {'setup':>6} {'buf MiB':>7} {'reps':>6} {'disc':>5} "
            f"{'rep CV':>7} {'local ns':>9} {'run CV':>7} {'c2c ns':>7} {'c2c runCV':>9} "
            f"{'c2c repCV':>9} {'ok':>4}")
    print(head)
    print("-" * len(head))
    for row in result["budgets"]:
        print(f"{row['budget_ms']:>7} {fmt(row['wall_ms_mean'], '.0f'):>8} "
              f"{fmt(row['setup_ms_mean'], '.0f'):>6} {fmt(row['buffer_mib_min'], '.0f'):>7} "
              f"{fmt(row['matrix_reps_mean'], '.0f'):>6} "
              f"{fmt(row['matrix_discarded_mean'], '.0f'):>5} "
              f"{fmt(row['within_run_cv_mean'], '.3f'):>7} "
              f"{fmt(row['local_ns_median']):>9} {fmt(row['local_ns_run_cv'], '.3f'):>7} "
              f"{fmt(row['c2c_within_ns_median']):>7} {fmt(row['c2c_within_run_cv'], '.3f'):>9} "
              f"{fmt(row['c2c_within_rep_cv_mean'], '.3f'):>9} "
              f"{row['quality_ok']}/{row['runs']:<2}")
        if row["remote_ns_median"] is not None or row["c2c_across_ns_median"] is not None:
            print(f"{'':>7} remote {fmt(row['remote_ns_median'])} ns (run CV "
                  f"{fmt(row['remote_ns_run_cv'], '.3f')}), c2c across sockets "
                  f"{fmt(row['c2c_across_ns_median'])} ns (run CV "
                  f"{fmt(row['c2c_across_run_cv'], '.3f')})")
    print("\nrep CV: mean over runs of the worst cell's CV of the repetitions; run CV: CV of the "
          "medians across runs;\ndisc: repetitions left out because the thread was off its CPU")
    print("\n--sysroot (model) runs, as `sim` hosts use them:")
    print(f"{'nodes':>6} {'sockets':>8} {'median ms':>10} {'max ms':>8}")
    for row in result["model"]:
        print(f"{row['nodes']:>6} {row['sockets']:>8} {row['wall_ms_median']:>10.2f} "
              f"{row['wall_ms_max']:>8.2f}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget-ms", type=int, default=3000)
    parser.add_argument("--scales", default="1,2,4", help="budget multipliers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    subprocess.run(["make", "-s", "-C", str(ROOT / "probe")], check=True)
    budgets = [int(args.budget_ms * float(s)) for s in args.scales.split(",")]
    first = None
    rows = []
    for budget in budgets:
        docs = [run_probe(["--budget-ms", str(budget)]) for _ in range(args.runs)]
        first = first or docs[0]
        rows.append(summarize(budget, docs))
    topo = first["topology"]
    result = {
        "host": {"host": first["host"], "cpu_model": first["cpu_model"],
                 "sockets": topo["sockets"], "nodes": topo["node_count"], "cpus": topo["cpus"],
                 "virtualized": topo["virtualized"], "llc_bytes": (topo["llc"] or {}).get("bytes")},
        "runs": args.runs,
        "budgets": rows,
        "model": model_cost(20),
    }
    record_results(result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_tables(result)
    return 0


def record_results(result: Dict[str, Any]) -> None:
    """This run's figures in bench/RESULTS.md (results.py): per budget, the wall time, the
    local latency, its spread across runs and core-to-core latency; the model runs' cost."""
    import results as bench_results

    pairs: List[Tuple[str, Any, str]] = []
    for row in result["budgets"]:
        at = f"budget {row['budget_ms']} ms"
        pairs += [(f"{at}: wall (mean of {row['runs']})", _round(row["wall_ms_mean"], 0), "ms"),
                  (f"{at}: local latency (median)", _round(row["local_ns_median"]), "ns"),
                  (f"{at}: local latency, run-to-run CV", _round(row["local_ns_run_cv"], 3), ""),
                  (f"{at}: remote latency (median)", _round(row["remote_ns_median"]), "ns"),
                  (f"{at}: c2c within a socket (median)",
                   _round(row["c2c_within_ns_median"]), "ns"),
                  (f"{at}: c2c across sockets (median)",
                   _round(row["c2c_across_ns_median"]), "ns")]
    for row in result["model"]:
        pairs.append((f"--sysroot run, {row['nodes']} node(s) (median)",
                      _round(row["wall_ms_median"], 2), "ms"))
    pairs.append(("virtualized", str(result["host"]["virtualized"]).lower(), ""))
    bench_results.record("bench-probe", bench_results.figures(pairs))


def _round(value: Any, digits: int = 1) -> Any:
    return None if value is None else round(float(value), digits)


if __name__ == "__main__":
    sys.exit(main())
