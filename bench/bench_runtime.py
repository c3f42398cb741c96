#!/usr/bin/env python3
"""Benchmark of the embedded runtime (`make bench-runtime`).

Generates a throw-away pack with two workflows and runs them on a fresh runtime home:
- a chain of 1,000 core.noop tasks (each task starts when the previous one succeeded);
- one with-items task over 5,000 items at concurrency 50 (core.noop per item).
Reports wall time, runtime overhead per task (everything the engine does: orquesta conductor,
SQLite writes, scheduling; core.noop itself does nothing), SQLite transactions, and the bytes
persisted per execution (execution rows, task executions, workflow state, event log).

    .venv/bin/python bench/bench_runtime.py [--chain 1000] [--items 5000] [--concurrency 50]
                                            [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome


def make_pack(path: Path, chain: int) -> None:
    (path / "actions" / "workflows").mkdir(parents=True)
    (path / "pack.yaml").write_text(
        "ref: rt_bench\nname: rt_bench\ndescription: runtime benchmark\nversion: 0.1.0\n"
        "author: bench\n"
    )
    (path / "actions" / "chain.yaml").write_text(
        "name: chain\nrunner_type: orquesta\nentry_point: workflows/chain.yaml\n"
    )
    lines = ["version: 1.0", "tasks:"]
    for i in range(chain):
        lines += [f"  t{i}:", "    action: core.noop"]
        if i < chain - 1:
            lines += ["    next:", "      - when: <% succeeded() %>", f"        do: t{i + 1}"]
    (path / "actions" / "workflows" / "chain.yaml").write_text("\n".join(lines) + "\n")
    (path / "actions" / "items.yaml").write_text(
        "name: items\nrunner_type: orquesta\nentry_point: workflows/items.yaml\n"
        "parameters:\n  n:\n    type: integer\n    required: true\n"
        "  concurrency:\n    type: integer\n    default: 50\n"
    )
    (path / "actions" / "workflows" / "items.yaml").write_text(
        "version: 1.0\ninput:\n  - n\n  - concurrency\ntasks:\n  each:\n    with:\n"
        "      items: <% range(ctx(n)) %>\n      concurrency: <% ctx(concurrency) %>\n"
        "    action: core.noop\n    next:\n      - when: <% succeeded() %>\n"
        "        publish:\n          - done: <% result().len() %>\n"
        "output:\n  - done: <% ctx(done) %>\n"
    )


def run_one(rt: Runtime, action: str, params: Dict[str, Any], tasks: int) -> Dict[str, Any]:
    commits0 = rt._commits
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    ex_id = rt.request(action, params)
    rt.run(until=lambda: rt.settled(ex_id))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    record = rt.store.get_execution(ex_id)
    assert record is not None
    children = rt.store.conn.execute(
        "SELECT COUNT(*) FROM executions WHERE root_id=? AND id<>?", (ex_id, ex_id)
    ).fetchone()[0]
    size = rt.store.size_report(ex_id)
    return {
        "workflow": action,
        "status": record["status"],
        "output": record["result"].get("output") if record["result"] else None,
        "tasks": tasks,
        "child_executions": children,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "overhead_per_task_ms": round(wall / tasks * 1000, 3),
        "transactions": rt._commits - commits0,
        "persisted_bytes": size,
        "persisted_bytes_per_task": round(size["total"] / tasks, 1),
    }


def record_results(results: List[Dict[str, Any]], db_size: int) -> None:
    """This run's figures in bench/RESULTS.md (results.py)."""
    import results as bench_results

    figures = []
    for r in results:
        name = r["workflow"].split(".")[-1]
        figures += [(f"{name}: {r['tasks']} tasks, overhead per task",
                     round(r["overhead_per_task_ms"], 2), "ms"),
                    (f"{name}: persisted per task", r["persisted_bytes_per_task"], "bytes")]
    figures.append(("database files after both runs", db_size, "bytes"))
    bench_results.record("bench-runtime", figures)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=1000)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        pack = Path(tmp) / "pack"
        make_pack(pack, args.chain)
        home = RuntimeHome(str(Path(tmp) / "home"))
        os.environ.pop("FLEET_ROLLOUT_KILL_AFTER_COMMITS", None)
        rt = Runtime(home, [str(pack)])
        assert rt.try_become_engine()
        try:
            results = [
                run_one(rt, "rt_bench.chain", {}, args.chain),
                run_one(rt, "rt_bench.items", {"n": args.items, "concurrency": args.concurrency},
                        args.items),
            ]
        finally:
            rt.close()
        db_size = sum(f.stat().st_size for f in Path(home.path).glob("runtime.db*"))
    record_results(results, db_size)
    if args.json:
        print(json.dumps({"results": results, "db_file_bytes": db_size}, indent=2))
        return 0
    print(f"{'workflow':<16}{'status':<11}{'tasks':>7}{'wall s':>9}{'cpu s':>8}"
          f"{'ms/task':>9}{'txns':>7}{'state bytes':>13}{'B/task':>8}")
    for r in results:
        print(f"{r['workflow']:<16}{r['status']:<11}{r['tasks']:>7}{r['wall_s']:>9.2f}"
              f"{r['cpu_s']:>8.2f}{r['overhead_per_task_ms']:>9.2f}{r['transactions']:>7}"
              f"{r['persisted_bytes']['total']:>13}{r['persisted_bytes_per_task']:>8}")
    for r in results:
        parts = ", ".join(f"{k} {v}" for k, v in r["persisted_bytes"].items() if k != "total")
        print(f"  {r['workflow']}: {parts}")
    print(f"  database files after both runs: {db_size} bytes")
    return 0 if all(r["status"] == "succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
