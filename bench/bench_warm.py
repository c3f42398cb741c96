"""CPU seconds (user+sys) per python-script execution with warm workers vs cold processes, for
an action that imports `fleet_rollout.service` like actions/host_step.py (and does nothing
else), run by the embedded runtime with a temporary home and a temporary copy of the pack lib.

CPU = the engine process (self) + its reaped children (cold: one python per execution) + the
zygote and its reaped children (warm; read from /proc while the zygote lives). Each mode runs
in its own process; the first execution (warm: the zygote start and preload) is reported
separately, not in the per-execution figure.

    .venv/bin/python bench/bench_warm.py [--runs 20]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional

from fleet_runtime.paths import REPO_ROOT as ROOT

ACTION = '''\
from st2common.runners.base_action import Action

from fleet_rollout import service


class BenchStep(Action):
    def run(self, n=0):
        return {"n": n, "service": service.__name__}
'''
META = """\
---
name: bench_step
runner_type: python-script
entry_point: bench_step.py
parameters:
  n: {type: integer, default: 0}
"""
PACK = """\
---
ref: bench_warm
name: bench_warm
description: bench pack
version: 0.1.0
author: bench
email: bench@example.com
"""


def make_pack(root: Path) -> Path:
    pack = root / "bench_warm"
    (pack / "actions").mkdir(parents=True)
    (pack / "pack.yaml").write_text(PACK)
    (pack / "actions" / "bench_step.py").write_text(ACTION)
    (pack / "actions" / "bench_step.yaml").write_text(META)
    shutil.copytree(ROOT / "actions" / "lib", pack / "actions" / "lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the library reads its allow lists from the host script (fleet_rollout.host_script)
    shutil.copytree(ROOT / "playbooks" / "files", pack / "playbooks" / "files",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return pack


def _proc_cpu(pid: Optional[int]) -> float:
    """utime+stime+cutime+cstime of a live process, in seconds."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _run(rt: Any, ref: str, params: Dict[str, Any]) -> Dict[str, Any]:
    """Request an execution and drive the engine until it is done."""
    ex_id = rt.request(ref, params)
    rt.run(until=lambda: rt.settled(ex_id), timeout=120)
    return rt.store.get_execution(ex_id)


def measure(mode: str, runs: int) -> Dict[str, float]:
    os.environ["FLEET_ROLLOUT_PYTHON_WORKERS"] = mode
    from fleet_runtime.engine import Runtime
    from fleet_runtime.home import RuntimeHome

    tmp = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    try:
        pack = make_pack(tmp / "packs")
        home = tmp / "home"
        home.mkdir(parents=True)
        (home / "config.yaml").write_text("user: bench\n")
        rt = Runtime(RuntimeHome(str(home)), [str(pack)], workers=2)
        assert rt.try_become_engine()
        try:
            start_cpu, start_wall = _own_cpu(), time.time()
            first = _run(rt, "bench_warm.bench_step", {"n": 0})
            assert first["status"] == "succeeded", first["result"]
            zygote = rt.warm_pool.info(str(pack))["zygote_pid"] if rt.warm_pool else None
            first_cpu = _own_cpu() - start_cpu + _proc_cpu(zygote)
            first_wall = time.time() - start_wall
            before, before_z, t0 = _own_cpu(), _proc_cpu(zygote), time.time()
            for n in range(1, runs + 1):
                ex = _run(rt, "bench_warm.bench_step", {"n": n})
                assert ex["status"] == "succeeded", ex["result"]
            wall = time.time() - t0
            engine_self = resource.getrusage(resource.RUSAGE_SELF)
            total = _own_cpu() - before + _proc_cpu(zygote) - before_z
            return {"first_cpu": first_cpu, "first_wall": first_wall,
                    "per_exec_cpu": total / runs, "per_exec_wall": wall / runs,
                    "engine_self_total": engine_self.ru_utime + engine_self.ru_stime}
        finally:
            rt.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--mode", choices=["warm", "cold"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.runs)))
        return 0
    results = {}
    for mode in ("cold", "warm"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--runs",
                              str(args.runs)], capture_output=True, text=True, check=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"python-script action importing fleet_rollout.service, {args.runs} executions"
          " (CPU = user+sys of engine + children [+ zygote and its children])")
    print(f"{'mode':<6} {'CPU s/exec':>11} {'wall s/exec':>12} {'first exec CPU s':>17}"
          f" {'first wall s':>13}")
    for mode, r in results.items():
        print(f"{mode:<6} {r['per_exec_cpu']:>11.3f} {r['per_exec_wall']:>12.3f}"
              f" {r['first_cpu']:>17.3f} {r['first_wall']:>13.3f}")
    saved = results["cold"]["per_exec_cpu"] - results["warm"]["per_exec_cpu"]
    print(f"saved per execution: {saved:.3f} CPU s")
    import results as bench_results

    bench_results.record("bench-warm", [
        ("CPU per python action execution, cold", round(results["cold"]["per_exec_cpu"], 3),
         "CPU-s"),
        ("CPU per python action execution, warm", round(results["warm"]["per_exec_cpu"], 3),
         "CPU-s"),
        ("first warm execution (fork server start)", round(results["warm"]["first_cpu"], 3),
         "CPU-s")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
