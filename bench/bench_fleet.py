#!/usr/bin/env python3
"""make bench-fleet: fleet-size figures, on sim servers through the embedded
runtime (real Redfish over HTTPS to the lab's BMC simulators, real Ansible, the real conductor).

1. A 2,000-host rollout with a fleet profile (compressed times): 10 sites of 200 servers, at
   most 5% of a site and half a rack out at once, batches of 1, 10, then as large as those
   limits allow (100), the first 3 approved (the bench answers at once), the rest promoted on
   PASS; wall time against the critical path (per batch: waves x the slowest host's reset ->
   verified, plus windows and soak) and against the capacity bound (the plan's, with the
   assumptions fitted to this run), and the plan's estimate against both; controller CPU per
   changed host (the engine's whole process tree: engine, action processes, Ansible; the sim
   hosts' side of Ansible's local connection included).
2. `--big-batch`: one batch of 1,000 hosts with 200 in flight (and a batch of the rest).
3. Planning 20,000 inventory hosts (< 2 s from the host-vars cache) and judging 20,000 hosts
   (< 1 s); one host step with a 20,000-host inventory against a 10-host one (ratio <= 1.2).

    .venv/bin/python bench/bench_fleet.py [--hosts 2000] [--reboot-seconds 120] [--big-batch]
        [--skip-rollout] [--skip-scale] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict

import bench_host_step
from bench_rollout import (
    RolloutBench,
    describe,
    judge_scale,
    plan_scale,
    record_results,
    rollout_scale,
)


def fleet_bench(hosts: int, reboot: float) -> RolloutBench:
    """10 sites of racks of 20 servers, 5% of a site and 50% of a rack out at once: batches of
    1, 10, then 100 (the limits) with 100 in flight and 100 Ansible forks; the first 3 batches
    approved, the rest promoted on PASS; a pre window of one window."""
    return RolloutBench(hosts=hosts, reboot=reboot, canary=1, growth=10, max_batch=2000,
                        per_site="5%", per_rack="50%", parallel=100, forks=100,
                        manual_batches=3, pre_windows=1, window=10.0, soak=5.0,
                        sites=10, hosts_per_rack=20, rate_scale=0.2)


def big_batch_bench(reboot: float) -> RolloutBench:
    """1,100 hosts: a first batch of 1,000 (4 sites x 250; racks of 20, all of a rack at once),
    200 in flight, then the last 100."""
    return RolloutBench(hosts=1100, reboot=reboot, canary=1000, growth=2, max_batch=1000,
                        per_site=250, per_rack=20, parallel=200, window=10.0, soak=5.0,
                        sites=4, hosts_per_rack=20, rate_scale=0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--reboot-seconds", type=float, default=10.0)
    parser.add_argument("--big-batch", action="store_true",
                        help="also one batch of 1,000 hosts with 200 in flight")
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: Dict[str, Any] = {}
    say = (lambda _m: None) if args.json else print
    if not args.skip_scale:
        plan = out["plan"] = plan_scale(20000)
        judged = out["judge"] = judge_scale(4000, 16000)
        say(f"plan, 20,000 inventory hosts: {plan['warm_total_seconds']} s from the host-vars "
            f"cache (target < 2 s; the inventory's first read {plan['inventory_cold_seconds']} "
            f"s); {plan['batches']} batches; largest datastore value "
            f"{plan['largest_value_bytes']} bytes")
        say(f"judge, 4,000 canary + 16,000 control: {judged['seconds']} s (target < 1 s)")
        out["host_step"] = bench_host_step.measure(20000, 10, 3, say=say)
    if not args.skip_rollout:
        out["fleet"] = rollout_scale(fleet_bench(args.hosts, args.reboot_seconds))
        say(describe(out["fleet"]))
    if args.big_batch:
        out["big_batch"] = rollout_scale(big_batch_bench(args.reboot_seconds))
        say(describe(out["big_batch"]))
    record_results("bench-fleet", out)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
