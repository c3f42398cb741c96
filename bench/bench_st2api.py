#!/usr/bin/env python3
"""Benchmark of the runtime's st2 API (`make bench-st2api`).

Starts `fleet-rollout api serve` (and its engine) on a throw-away home, then measures:
- login: POST /auth/v1/tokens (bcrypt, cost 10);
- runs: POST /api/v1/executions of core.noop, one after another, each followed until it
  succeeded (API -> engine -> API round trip), runs/s and p50/p95 latency;
- reads: GET /api/v1/executions?limit=50 and GET /api/v1/executions/<id> with that many
  executions stored, requests/s from 4 client threads;
- the real st2 CLI: wall time of `st2 execution list` and `st2 run core.noop` (each a new
  Python process, as users run it).

    .venv/bin/python bench/bench_st2api.py [--runs 200] [--reads 400] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List

import requests

from fleet_runtime.paths import REPO_ROOT as ROOT

ST2 = ROOT / ".venv-st2client" / "bin" / "st2"
PASSWORD = "bench-password-1"


def pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start(home: Path) -> subprocess.Popen:
    fleet = [sys.executable, "-m", "fleet_runtime.cli"]
    subprocess.run(fleet + ["api", "user", "bench", "--home", str(home),
                            "--no-default-pack"], input=PASSWORD + "\n", text=True,
                   check=True, capture_output=True, cwd=ROOT)
    # the bench user is an administrator: RBAC grants are not what this measures
    proc = subprocess.Popen(fleet + ["api", "serve", "--port", "0", "--home", str(home),
                                     "--no-default-pack", "--admin", "bench"], cwd=ROOT,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = home / "st2api.json"
    for _ in range(600):
        if state.exists() and json.loads(state.read_text()).get("pid") == proc.pid:
            return proc
        time.sleep(0.1)
    raise SystemExit("api serve did not start")


def record_results(out: Dict[str, Any]) -> None:
    """This run's figures in bench/RESULTS.md (results.py)."""
    import results as bench_results

    pairs = [("login (bcrypt)", out["login_ms"], "ms"),
             ("core.noop runs, one after another", out["runs"]["per_s"], "runs/s"),
             ("core.noop run, p50", out["runs"]["p50_ms"], "ms")]
    for name, label in (("list_50", "GET a list of 50 executions"),
                        ("get_one", "GET one execution")):
        pairs += [(f"{label}, 4 threads", out[name]["per_s"], "req/s"),
                  (f"{label}, p50", out[name]["p50_ms"], "ms")]
    pairs += [("st2 execution list (median of 3)", out.get("st2_execution_list_s"), "s"),
              ("st2 run core.noop (median of 3)", out.get("st2_run_noop_s"), "s")]
    bench_results.record("bench-st2api", bench_results.figures(pairs))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--reads", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        proc = start(home)
        try:
            state = json.loads((home / "st2api.json").read_text())
            base = state["ST2_BASE_URL"]
            t0 = time.perf_counter()
            token = requests.post(base + "/auth/v1/tokens", auth=("bench", PASSWORD),
                                  timeout=30).json()["token"]
            out["login_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            session = requests.Session()
            session.headers["X-Auth-Token"] = token

            latencies: List[float] = []
            ids: List[str] = []
            t0 = time.perf_counter()
            for n in range(args.runs):
                t = time.perf_counter()
                ex = session.post(base + "/api/v1/executions",
                                  json={"action": "core.noop"}, timeout=60).json()
                while session.get(f"{base}/api/v1/executions/{ex['id']}?include_attributes="
                                  "status", timeout=60).json()["status"] != "succeeded":
                    time.sleep(0.005)
                latencies.append(time.perf_counter() - t)
                ids.append(ex["id"])
                if not args.json and (n + 1) % 50 == 0:
                    print(f"  {n + 1}/{args.runs} runs", file=sys.stderr, flush=True)
            wall = time.perf_counter() - t0
            out["runs"] = {"count": args.runs, "per_s": round(args.runs / wall, 1),
                           "p50_ms": round(pct(latencies, 0.5) * 1000, 1),
                           "p95_ms": round(pct(latencies, 0.95) * 1000, 1)}

            def read(path: str) -> float:
                t = time.perf_counter()
                r = session.get(base + path, timeout=60)
                r.raise_for_status()
                return time.perf_counter() - t

            for name, path in (("list_50", "/api/v1/executions?limit=50"),
                               ("get_one", f"/api/v1/executions/{ids[-1]}")):
                t0 = time.perf_counter()
                with ThreadPoolExecutor(4) as pool:
                    times = list(pool.map(read, [path] * args.reads))
                wall = time.perf_counter() - t0
                out[name] = {"requests": args.reads, "per_s": round(args.reads / wall, 1),
                             "p50_ms": round(pct(times, 0.5) * 1000, 1),
                             "p95_ms": round(pct(times, 0.95) * 1000, 1)}

            if ST2.exists():
                conf = Path(tmp) / "st2.conf"
                conf.write_text(f"[credentials]\nusername = bench\npassword = {PASSWORD}\n")
                env = dict(os.environ, HOME=tmp, ST2_CONFIG_FILE=str(conf),
                           ST2_AUTH_URL=state["ST2_AUTH_URL"], ST2_API_URL=state["ST2_API_URL"],
                           ST2_STREAM_URL=state["ST2_STREAM_URL"])
                for name, cli in (("st2_execution_list_s", ["execution", "list"]),
                                  ("st2_run_noop_s", ["run", "core.noop"])):
                    runs = []
                    for _ in range(3):
                        t = time.perf_counter()
                        subprocess.run([str(ST2)] + cli, env=env, check=True,
                                       capture_output=True)
                        runs.append(time.perf_counter() - t)
                    out[name] = round(statistics.median(runs), 2)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    record_results(out)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"login (bcrypt): {out['login_ms']} ms")
        r = out["runs"]
        print(f"core.noop runs via the API, followed to succeeded: {r['per_s']}/s"
              f" (p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, {r['count']} runs)")
        for name in ("list_50", "get_one"):
            v = out[name]
            print(f"GET {name}: {v['per_s']} req/s from 4 threads (p50 {v['p50_ms']} ms,"
                  f" p95 {v['p95_ms']} ms)")
        for name in ("st2_execution_list_s", "st2_run_noop_s"):
            if name in out:
                print(f"{name}: {out[name]} s (median of 3; a new Python process each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
