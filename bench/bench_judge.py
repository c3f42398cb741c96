#!/usr/bin/env python3
"""Canary judge evaluation: false alarms and detection power on simulated fleets.

Every simulated batch has m canary and 4m control hosts, a pre and a post window of K steps
(think 12 x 5 minutes), and realistic trouble:

* hosts differ a lot: traffic spreads over a log-normal (sd 0.7), the drop level over another
  (busy: every host expects >= 20 drops per window; sparse: median 0.3, so most windows are 0),
  and each host reacts to load differently (drops per packet grow with load^gamma, gamma 0.5-1.5);
* the fleet's traffic changes between the windows (x0.6 to x1.6 for everybody, plus a daily
  ramp inside each window and per-host noise); each host's condition also drifts from window to
  window (log-normal, sd 0.3);
* drops come in bursts (geometric burst sizes, mean 2.5) and now and then an incident adds a
  large burst (2% of host windows, mean 30 drops);
* collection is imperfect: 1% of host windows are missing, 1% cover only part of the window,
  and 2% of the hosts are nearly idle (below the policy's minimum traffic).

A regression of R multiplies the canaries' post-window drop intensity by R. Methods:
``judge`` (fleet_rollout.judge with the default policy: the real code path, guards and all),
``kayenta`` (Mann-Whitney on the raw post-window drop-rate series of canary vs control group,
fleet_rollout.judge.baselines) and ``poisson`` (pooled Poisson rate-ratio test on summed
post-window counts). Seeded: the same --seed prints the same table.

Targets: false alarms <= 5% at every size; power >= 0.8 for 2x at 8 canaries when every host
expects at least 20 drops per window (scenario "busy").
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "actions",
                                "lib"))

from fleet_rollout.counters.deltas import WindowCounts
from fleet_rollout.judge.baselines import (
    kayenta_mann_whitney,
    pooled_poisson_rate_ratio,
)
from fleet_rollout.judge.core import FAIL, INCONCLUSIVE, judge
from fleet_rollout.judge.inputs import HostWindows, JudgeInput
from fleet_rollout.judge.policy import Policy

SIZES = (3, 5, 8, 16)
EFFECTS = (1.0, 1.5, 2.0, 3.0)
CONTROL_RATIO = 4
STEPS = 12
DRIFT = 0.2  # sd of the log of a host's drop condition, window to window
SCENARIOS = {
    # name: (median expected drops per host and window, log-sd, floor)
    "busy": (20.0, 1.2, 20.0),
    "sparse": (0.3, 1.5, 0.0),
}
METHODS = ("judge", "kayenta", "poisson")


def simulate(rng: np.random.Generator, reps: int, m: int, effect: float,
             scenario: str) -> Dict[str, np.ndarray]:
    """Per-step packets and drops, shape (reps, hosts, 2 windows, STEPS), canaries first."""
    n = m + CONTROL_RATIO * m
    median, log_sd, floor = SCENARIOS[scenario]
    shape = (reps, n)
    base_packets = np.exp(rng.normal(np.log(2e5), 0.7, shape))
    idle = rng.random(shape) < 0.02
    base_packets[idle] = rng.uniform(50, 700, idle.sum())
    if floor > 0:  # every host expects at least `floor` drops per window at base traffic
        mu = floor * np.exp(np.abs(rng.normal(0.0, log_sd, shape)))
    else:
        mu = median * np.exp(rng.normal(0.0, log_sd, shape))
    gamma = rng.uniform(0.5, 1.5, shape)

    # fleet-wide traffic: a daily ramp inside each window, a level change between windows
    ramp = 1.0 + 0.25 * np.sin(np.linspace(0, np.pi / 2, STEPS))[None, :] * rng.uniform(
        -1, 1, (reps, 1))
    level = rng.uniform(0.6, 1.6, (reps, 1))
    common = np.stack([ramp, ramp * level], axis=1)  # (reps, 2, STEPS)
    host_noise = np.exp(rng.normal(0.0, 0.1, (reps, n, 2)))
    step_noise = np.exp(rng.normal(0.0, 0.05, (reps, n, 2, STEPS)))
    load = common[:, None, :, :] * host_noise[..., None] * step_noise
    packets = np.round(base_packets[..., None, None] * load)

    condition = np.exp(rng.normal(0.0, DRIFT, (reps, n, 2)))
    intensity = (mu[..., None, None] / STEPS) * condition[..., None] * load ** (
        gamma[..., None, None])
    intensity[:, :m, 1, :] *= effect

    burst_mean = 2.5
    bursts = rng.poisson(intensity / burst_mean)
    extra = rng.negative_binomial(np.maximum(bursts, 1), 1.0 / burst_mean)
    drops = np.where(bursts > 0, bursts + extra, 0).astype(float)
    incident = rng.random((reps, n, 2)) < 0.02
    incident_step = rng.integers(0, STEPS, (reps, n, 2))
    incident_size = rng.geometric(1.0 / 30.0, (reps, n, 2))
    r, h, w = np.nonzero(incident)
    drops[r, h, w, incident_step[r, h, w]] += incident_size[r, h, w]

    missing = rng.random((reps, n, 2)) < 0.01
    partial = (rng.random((reps, n, 2)) < 0.01) & ~missing
    coverage = np.where(partial, rng.uniform(0.5, 0.85, (reps, n, 2)), 1.0)
    return {"packets": packets, "drops": drops, "missing": missing, "coverage": coverage}


def _judge_input(sim: Dict[str, np.ndarray], rep: int, m: int) -> JudgeInput:
    n = sim["packets"].shape[1]
    names = [f"c{i}" for i in range(m)] + [f"k{i}" for i in range(n - m)]
    packets = sim["packets"][rep].sum(axis=-1)
    drops = sim["drops"][rep].sum(axis=-1)
    hosts = {}
    for index, name in enumerate(names):
        item = HostWindows(name, "canary" if index < m else "control")
        for w, attr in ((0, "pre"), (1, "post")):
            if not sim["missing"][rep, index, w]:
                setattr(item, attr, WindowCounts(drops=float(drops[index, w]),
                                                 packets=float(packets[index, w]),
                                                 coverage=float(sim["coverage"][rep, index, w])))
        hosts[name] = item
    return JudgeInput(names[:m], names[m:], hosts)


def _baselines(sim: Dict[str, np.ndarray], rep: int, m: int) -> Tuple[str, str]:
    have = ~sim["missing"][rep, :, 1]
    packets = sim["packets"][rep, :, 1, :]
    drops = sim["drops"][rep, :, 1, :]
    canary = np.zeros(packets.shape[0], bool)
    canary[:m] = True
    groups = []
    for mask in (canary & have, ~canary & have):
        groups.append((drops[mask].sum(axis=0), packets[mask].sum(axis=0)))
    (cd, cp), (kd, kp) = groups
    with np.errstate(divide="ignore", invalid="ignore"):
        kayenta = kayenta_mann_whitney(cd / cp, kd / kp).verdict
    poisson = pooled_poisson_rate_ratio(cd.sum(), cp.sum(), kd.sum(), kp.sum()).verdict
    return kayenta, poisson


def run_cell(args: Tuple[int, str, int, float, int]) -> Dict[str, Any]:
    seed, scenario, m, effect, reps = args
    key = [seed, list(SCENARIOS).index(scenario), m, int(effect * 10)]
    rng = np.random.default_rng(np.random.SeedSequence(key))
    sim = simulate(rng, reps, m, effect, scenario)
    policy = Policy()
    counts = {method: 0 for method in METHODS}
    inconclusive = 0
    for rep in range(reps):
        verdict = judge(_judge_input(sim, rep, m), policy).verdict
        counts["judge"] += verdict == FAIL
        inconclusive += verdict == INCONCLUSIVE
        kayenta, poisson = _baselines(sim, rep, m)
        counts["kayenta"] += kayenta == "FAIL"
        counts["poisson"] += poisson == "FAIL"
    return {"scenario": scenario, "canaries": m, "controls": CONTROL_RATIO * m,
            "effect": effect, "reps": reps,
            "fail_rate": {k: v / reps for k, v in counts.items()},
            "inconclusive": inconclusive / reps}


def _pct(value: float) -> str:
    return f"{100 * value:5.1f}%"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=1000, help="fleets per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)

    started = time.time()
    cells = [(args.seed, scenario, m, effect, args.reps)
             for scenario in SCENARIOS for m in SIZES for effect in EFFECTS]
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(run_cell, cells, chunksize=1)
    else:
        results = [run_cell(cell) for cell in cells]
    elapsed = time.time() - started
    table = {(r["scenario"], r["canaries"], r["effect"]): r for r in results}

    busy_8_2x = table[("busy", 8, 2.0)]["fail_rate"]["judge"]
    worst_fa = max(r["fail_rate"]["judge"] for r in results if r["effect"] == 1.0)
    targets = {
        "false_alarm_max": worst_fa,
        "false_alarm_ok": worst_fa <= 0.05,
        "power_busy_8_canaries_2x": busy_8_2x,
        "power_ok": busy_8_2x >= 0.8,
    }
    if args.json:
        json.dump({"seed": args.seed, "reps": args.reps, "seconds": round(elapsed, 1),
                   "cells": results, "targets": targets}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    print(f"Canary judge bench: {args.reps} simulated batches per cell, seed {args.seed}, "
          f"controls = {CONTROL_RATIO} x canaries, {STEPS} steps per window")
    for scenario in SCENARIOS:
        label = ("every host expects >= 20 drops per window" if scenario == "busy"
                 else "median host expects 0.3 drops per window (mostly zero windows)")
        print(f"\nscenario {scenario}: {label}")
        print("  canaries controls  method    false alarm  power 1.5x  power 2x  power 3x"
              "  inconclusive (no change)")
        for m in SIZES:
            for method in METHODS:
                row = [table[(scenario, m, e)] for e in EFFECTS]
                rates = [_pct(r["fail_rate"][method]) for r in row]
                incon = _pct(row[0]["inconclusive"]) if method == "judge" else "    -"
                first = f"  {m:8d} {CONTROL_RATIO * m:8d}" if method == "judge" else " " * 19
                print(f"{first}  {method:8s}  {rates[0]:>11s}  {rates[1]:>10s}  {rates[2]:>8s}"
                      f"  {rates[3]:>8s}  {incon:>12s}")
    print("\nfalse alarm = FAIL without any change; power = FAIL with the regression; the judge "
          "counts INCONCLUSIVE as not detected.")
    print(f"targets: judge false alarms <= 5% at every size: "
          f"{'met' if targets['false_alarm_ok'] else 'MISSED'} (worst {_pct(worst_fa).strip()}); "
          f"power >= 0.8 for 2x at 8 canaries (busy): "
          f"{'met' if targets['power_ok'] else 'MISSED'} ({busy_8_2x:.2f})")
    print(f"elapsed {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
