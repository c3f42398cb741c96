#!/usr/bin/env python3
"""make bench-rollout: what a rollout costs beyond the reboots themselves.

1. A rollout of N sim hosts (default 200) with a simulated reboot time T through the embedded
   runtime: total time / critical-path lower bound, where the bound is the sum over batches of
   the slowest host's reboot+verify plus the soak and counter windows (what no orchestration can
   avoid). Also the largest workflow context persisted (bytes).
2. Planning for 20,000 inventory hosts (inventory read with ansible-core, plan built).
3. Judging a batch with 20,000 hosts (4,000 canary, 16,000 control).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "actions", "lib"))
sys.path.insert(0, ROOT)

import yaml  # noqa: E402

from fleet_rollout.inventory import load_inventory  # noqa: E402
from fleet_rollout.judge import Policy, judge, judge_input_from_dict  # noqa: E402
from fleet_rollout.plan import build_plan  # noqa: E402
from fleet_rollout.profile import load_profile  # noqa: E402


def plan_scale(hosts: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        groups: Dict[str, Any] = {}
        for i in range(hosts):
            site = f"site_{i % 4}"
            groups.setdefault(site, {"hosts": {}})["hosts"][f"web-{i:05d}"] = {
                "bmc_address": f"https://10.{i // 65536}.{(i // 256) % 256}.{i % 256}",
                "site": site, "rack": f"r{(i // 40) % 50}", "hardware_model": "R630"}
        path = os.path.join(tmp, "inventory.yml")
        with open(path, "w") as handle:
            yaml.safe_dump({"all": {"children": groups}}, handle)
        t0 = time.monotonic()
        everyone = load_inventory(path)
        t1 = time.monotonic()
        profile = load_profile("home-snoop")
        profile.data["batches"].update({"max_batch": 1000, "max_unavailable_per_site": 250,
                                        "max_unavailable_per_rack": 5})
        compliance = {h.name: {"compliant": False} for h in everyone}
        plan = build_plan(profile, path, "all", everyone, everyone, compliance)
        t2 = time.monotonic()
    return {"hosts": hosts, "inventory_seconds": round(t1 - t0, 2),
            "plan_seconds": round(t2 - t1, 2), "batches": len(plan["batches"]),
            "plan_bytes": len(json.dumps(plan))}


def judge_scale(canary: int, control: int) -> Dict[str, Any]:
    rng = random.Random(7)
    hosts: Dict[str, Any] = {}
    names = {"canary": [f"c{i}" for i in range(canary)],
             "control": [f"k{i}" for i in range(control)]}
    for name in names["canary"] + names["control"]:
        base = rng.lognormvariate(-9, 1)
        packets = rng.randint(2_000_000, 5_000_000)
        hosts[name] = {"pre": {"drops": int(packets * base), "packets": packets},
                       "post": {"drops": int(packets * base * rng.uniform(0.8, 1.2)),
                                "packets": packets}}
    doc = {"schema_version": 1, "canary": names["canary"], "control": names["control"],
           "hosts": hosts}
    t0 = time.monotonic()
    verdict = judge(judge_input_from_dict(doc), Policy())
    return {"canary": canary, "control": control, "seconds": round(time.monotonic() - t0, 2),
            "verdict": verdict.verdict}


def rollout_scale(hosts: int, reboot: float) -> Dict[str, Any]:
    from fleet_lab import lab

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FLEET_ROLLOUT_HOME=os.path.join(tmp, "home"))
        os.environ["FLEET_ROLLOUT_HOME"] = env["FLEET_ROLLOUT_HOME"]
        state = os.path.join(tmp, "lab")
        inventory = os.path.join(tmp, "inventory.yml")
        lab.up(lab.LabConfig(hosts=hosts, backend="sim", vendors=["generic"],
                             reboot_seconds=reboot, sites=4, hosts_per_rack=10),
               state, inventory, progress=lambda _m: None, timeout=1800)
        profile = os.path.join(tmp, "bench.yaml")
        window, soak = 10, 5
        with open(profile, "w") as handle:
            yaml.safe_dump({
                "name": "bench-home", "bios": {"snoop_mode": "home"},
                "probe": {"budget_ms": 300},
                "canary": {"window_seconds": window, "soak_seconds": soak,
                           "policy": {"min_canary_hosts": 3, "min_control_hosts": 5}},
                "batches": {"canary_size": 10, "growth": 2, "max_batch": 80,
                            "max_unavailable_per_site": 40, "max_unavailable_per_rack": 10,
                            "parallel": 40},
                "approval": {"required": False},
                "redfish": {"graceful_timeout": reboot * 3, "poll": 1}}, handle)
        try:
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "fleet_runtime.cli", "run",
                                   "fleet_rollout.rollout", f"profile={profile}", "--json"],
                                  env=env, capture_output=True, text=True, cwd=ROOT)
            total = time.monotonic() - t0
            out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
            rollout_id = ((out.get("result") or {}).get("output") or {}).get("rollout_id")
            bound, batches = _critical_path(env["FLEET_ROLLOUT_HOME"], rollout_id, window, soak)
            context = _largest_context(env["FLEET_ROLLOUT_HOME"])
        finally:
            lab.down(state, progress=lambda _m: None)
    return {"hosts": hosts, "reboot_seconds": reboot, "status": out.get("status"),
            "batches": batches, "total_seconds": round(total, 1),
            "critical_path_seconds": round(bound, 1),
            "ratio": round(total / bound, 2) if bound else None,
            "largest_context_bytes": context}


def _critical_path(home: str, rollout_id: Any, window: float, soak: float) -> tuple[float, int]:
    """Sum over batches of the slowest host's reboot..verify time, plus soak and two windows."""
    if not rollout_id:
        return 0.0, 0
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    prefix = f"fleet_rollout.{rollout_id}."
    rows = db.execute("SELECT name, value FROM kv WHERE name LIKE ?", (prefix + "%",)).fetchall()
    values = {name: value for name, value in rows}
    plan = json.loads(values[prefix + "plan"])
    total = 0.0
    for batch in plan["batches"]:
        slowest = 0.0
        for host in batch["hosts"]:
            state = json.loads(values.get(prefix + "host." + host, "{}"))
            steps = state.get("steps", {})
            if "reboot" in steps and "verify" in steps:
                slowest = max(slowest, steps["verify"]["at"] - steps["reboot"]["started"])
        total += slowest + soak + 2 * window
    return total, len(plan["batches"])


def _largest_context(home: str) -> int:
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    best = 0
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        cols = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
        for col in cols:
            if "context" in col or col in ("state", "workflow_state"):
                row = db.execute(f"SELECT MAX(LENGTH({col})) FROM {table}").fetchone()
                best = max(best, int(row[0] or 0))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--reboot-seconds", type=float, default=10.0)
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: Dict[str, Any] = {"plan": plan_scale(20000), "judge": judge_scale(4000, 16000)}
    if not args.skip_rollout:
        out["rollout"] = rollout_scale(args.hosts, args.reboot_seconds)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    p, j = out["plan"], out["judge"]
    print(f"plan, {p['hosts']} inventory hosts: inventory {p['inventory_seconds']} s, plan "
          f"{p['plan_seconds']} s, {p['batches']} batches, plan {p['plan_bytes']} bytes")
    print(f"judge, {j['canary']} canary + {j['control']} control hosts: {j['seconds']} s "
          f"({j['verdict']})")
    if "rollout" in out:
        r = out["rollout"]
        print(f"rollout, {r['hosts']} sim hosts, reboot {r['reboot_seconds']} s: "
              f"{r['total_seconds']} s in {r['batches']} batches; critical path "
              f"{r['critical_path_seconds']} s; ratio {r['ratio']}; status {r['status']}; "
              f"largest workflow context {r['largest_context_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
