#!/usr/bin/env python3
"""Canary judge evaluation: false alarms and detection power on simulated fleets.

Every simulated batch has m canary and 4m control hosts over 4 sites and 2 hardware models
(canaries spread over the sites as the plan spreads them), a pre and a post window of K steps
(think 12 x 5 minutes), and realistic trouble:

* hosts differ a lot: traffic spreads over a log-normal (sd 0.7), the drop level over another
  (sd 1.2 to 2.0 by scenario), and each host reacts to load differently (drops per packet grow
  with load^gamma, gamma 0.5-1.5); some scenarios add nearly silent hosts (20-30%);
* the fleet's traffic changes between the windows (x0.6 to x1.6 for everybody, plus a daily
  ramp inside each window and per-host noise); each host's condition also drifts from window to
  window (log-normal, sd 0.2); a hardware model's condition may change for all its hosts;
* drops come in bursts (geometric burst sizes, mean 2.5 to 10: over-dispersion), incidents add a
  large burst (2-5% of host windows, mean 30 drops), and site-wide bursts multiply every host's
  drops at one site for a run of steps (canary and control alike);
* collection is imperfect: 1-2% of host windows are missing, 1% cover only part of the window,
  and 2% of the hosts are nearly idle (below the policy's minimum traffic).

Scenarios: ``busy`` (every host expects >= 20 drops per window) and ``sparse`` (median 0.3:
mostly zero windows); the three ``harsh`` ones vary heterogeneity, over-dispersion and burst
structure widely and are calibrated so that a plain rank test on the hosts' log rate changes
(``rank``) sees a 2x change at 8 canaries 30-46% of the time, about what an evaluation on fleets
unlike this bench found (0.50).

A regression of R multiplies the canaries' post-window drop intensity by R. Methods:
``judge`` (fleet_rollout.judge with the default policy: the real code path, guards and all,
with the hosts' site, hardware model and per-step drops), ``rank`` (a plain rank test:
the same guards and ceiling, then Mann-Whitney on e, fleet_rollout.judge.baselines.rank_test),
``kayenta`` (Mann-Whitney on the raw post-window drop-rate series of canary vs control group,
fleet_rollout.judge.baselines) and ``poisson`` (pooled Poisson rate-ratio test on summed
post-window counts). Seeded: the same --seed prints the same table.

Targets: false alarms <= 5% in every scenario and size; power >= 0.8 for 2x at 8 canaries in
"busy"; in the harsh scenarios power >= 0.8 for 2x at 8 canaries and for 3x at 5.

Small batches: 1-2 canaries against 20 controls, where only a change of ``large_change`` (5x)
or more decides (fleet_rollout.judge.large_change), over up to 3 fresh post windows (the
rollout's INCONCLUSIVE -> another window): false decisions (FAIL or PASS without a change) over
all windows, the share decided at 5x and 10x either way, and the windows a decision took.

``--independent``: instead, the judge and the ``rank`` and ``poisson`` baselines on fleets from
generators written apart from this bench's model (fleet_generators.GENERATORS), each in two
input forms (with per-step drops, and window totals only), at no change (false alarms at 5, 8
and 16 canaries) and at 2x with 8 canaries, 3x with 5 and 2x with 16, controls 4 x canaries;
the table says which generators are held out of tuning (fleet_generators.HELD_OUT).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fleet_rollout.counters.deltas import WindowCounts
from fleet_rollout.judge.baselines import (
    kayenta_mann_whitney,
    pooled_poisson_rate_ratio,
    rank_test,
)
from fleet_rollout.judge.core import FAIL, INCONCLUSIVE, PASS, Verdict, judge
from fleet_rollout.judge.inputs import HostWindows, JudgeInput, judge_input_from_dict
from fleet_rollout.judge.policy import Policy
from fleet_rollout.profile import DEFAULTS, MAX_PRE_WINDOWS

DEFAULT_PRE_WINDOWS = int(DEFAULTS["canary"]["pre_windows"])

SIZES = (3, 5, 8, 16)
EFFECTS = (1.0, 1.5, 2.0, 3.0)
CONTROL_RATIO = 4
STEPS = 12
SITES = 4
MODELS = 2


@dataclass(frozen=True)
class Scenario:
    """How a simulated fleet misbehaves (see the module text)."""
    label: str
    median: float  # expected drops per host and window at base traffic (median host)
    log_sd: float  # host-to-host spread of that level (log-normal)
    floor: float = 0.0  # every host expects at least this many (0: no floor)
    burst_mean: float = 2.5  # mean size of a drop burst (over-dispersion)
    incident: float = 0.02  # share of host windows with an incident (mean 30 drops)
    silent: float = 0.0  # share of hosts that (nearly) never drop: 0.02 drops per window
    drift: float = 0.2  # sd of the log of a host's condition, window to window
    site_burst: float = 0.0  # chance per site and window of a site-wide burst
    site_factor: Tuple[float, float] = (1.0, 1.0)  # its intensity multiplier range
    model_drift: float = 0.0  # sd of a hardware model's common change between windows
    missing: float = 0.01  # share of host windows without data
    harsh: bool = False  # the power targets apply


SCENARIOS = {
    "busy": Scenario("every host expects >= 20 drops per window", 20.0, 1.2, floor=20.0),
    "sparse": Scenario("median host expects 0.3 drops per window (mostly zero windows)",
                       0.3, 1.5),
    "harsh": Scenario("host spread sd 2.0 (median 100 drops per window), bursts of 4, 30% silent "
                      "hosts, site bursts (30% of site windows, x2-x6), model drift 0.2, 2% "
                      "missing", 100.0, 2.0, burst_mean=4.0, silent=0.3, site_burst=0.3,
                      site_factor=(2.0, 6.0), model_drift=0.2, missing=0.02, harsh=True),
    "harsh-bursty": Scenario("bursts of 10, incidents in 5% of windows, host spread sd 1.6 "
                             "(median 150), 20% silent, site bursts (20%, x2-x4), 2% missing",
                             150.0, 1.6, burst_mean=10.0, incident=0.05, silent=0.2,
                             site_burst=0.2, site_factor=(2.0, 4.0), missing=0.02, harsh=True),
    "harsh-sites": Scenario("site bursts in 60% of site windows (x3-x10), model drift 0.3, host "
                            "spread sd 1.6 (median 100), bursts of 3, 30% silent, 2% missing",
                            100.0, 1.6, burst_mean=3.0, silent=0.3, site_burst=0.6,
                            site_factor=(3.0, 10.0), model_drift=0.3, missing=0.02,
                            harsh=True),
}
METHODS = ("judge", "rank", "kayenta", "poisson")


def simulate(rng: np.random.Generator, reps: int, m: int, effect: float, scenario: str,
             controls: Optional[int] = None, windows: int = 2,
             pre_windows: int = 1) -> Dict[str, np.ndarray]:
    """Per-step packets and drops, shape (reps, hosts, pre_windows + windows - 1, STEPS),
    canaries first: the pre window (pre_windows windows of STEPS steps, one after the other:
    the fleet's traffic ramps on through them), then the post window(s), each post window a
    fresh one after the change; site and model per host, shape (reps, hosts)."""
    sc = SCENARIOS[scenario]
    n = m + (CONTROL_RATIO * m if controls is None else controls)
    P = pre_windows
    W = P + windows - 1
    shape = (reps, n)
    base_packets = np.exp(rng.normal(np.log(2e5), 0.7, shape))
    idle = rng.random(shape) < 0.02
    base_packets[idle] = rng.uniform(50, 700, idle.sum())
    if sc.floor > 0:  # every host expects at least `floor` drops per window at base traffic
        mu = sc.floor * np.exp(np.abs(rng.normal(0.0, sc.log_sd, shape)))
    else:
        mu = sc.median * np.exp(rng.normal(0.0, sc.log_sd, shape))
    silent = rng.random(shape) < sc.silent
    mu[silent] = 0.02
    gamma = rng.uniform(0.5, 1.5, shape)
    # canaries spread over the sites as the plan spreads them; controls wherever they are
    site = rng.integers(0, SITES, shape)
    site[:, :m] = (np.arange(m)[None, :] + rng.integers(0, SITES, (reps, 1))) % SITES
    model = rng.integers(0, MODELS, shape)

    # fleet-wide traffic: a daily ramp inside each window (on through a long pre window), a
    # level change between the pre window and each post window
    amplitude = rng.uniform(-1, 1, (reps, 1))
    ramp = 1.0 + 0.25 * np.sin(np.linspace(0, np.pi / 2, STEPS))[None, :] * amplitude
    pre_ramp = 1.0 + 0.25 * np.sin(np.linspace(0, np.pi / 2, P * STEPS))[None, :] * amplitude
    level = rng.uniform(0.6, 1.6, (reps, W - P))
    common = np.stack([pre_ramp[:, k * STEPS:(k + 1) * STEPS] for k in range(P)]
                      + [ramp * level[:, k:k + 1] for k in range(W - P)],
                      axis=1)  # (reps, W, STEPS)
    host_noise = np.exp(rng.normal(0.0, 0.1, (reps, n, W)))
    step_noise = np.exp(rng.normal(0.0, 0.05, (reps, n, W, STEPS)))
    load = common[:, None, :, :] * host_noise[..., None] * step_noise
    packets = np.round(base_packets[..., None, None] * load)

    condition = np.exp(rng.normal(0.0, sc.drift, (reps, n, W)))
    model_change = np.exp(rng.normal(0.0, sc.model_drift, (reps, MODELS)))
    condition[:, :, P:] *= np.take_along_axis(model_change, model, axis=1)[..., None]
    intensity = (mu[..., None, None] / STEPS) * condition[..., None] * load ** (
        gamma[..., None, None])
    if sc.site_burst > 0:  # a site-wide burst: a run of steps, every host of the site
        hit = rng.random((reps, SITES, W)) < sc.site_burst
        factor = rng.uniform(*sc.site_factor, (reps, SITES, W))
        first = rng.integers(0, STEPS, (reps, SITES, W))
        length = rng.integers(2, 7, (reps, SITES, W))
        steps = np.arange(STEPS)
        inside = (steps >= first[..., None]) & (steps < (first + length)[..., None])
        multiplier = np.where(hit[..., None] & inside, factor[..., None], 1.0)
        intensity *= multiplier[np.arange(reps)[:, None], site]  # (reps, hosts, W, STEPS)
    intensity[:, :m, P:, :] *= effect

    bursts = rng.poisson(intensity / sc.burst_mean)
    extra = rng.negative_binomial(np.maximum(bursts, 1), 1.0 / sc.burst_mean)
    drops = np.where(bursts > 0, bursts + extra, 0).astype(float)
    incident = rng.random((reps, n, W)) < sc.incident
    incident_step = rng.integers(0, STEPS, (reps, n, W))
    incident_size = rng.geometric(1.0 / 30.0, (reps, n, W))
    r, h, w = np.nonzero(incident)
    drops[r, h, w, incident_step[r, h, w]] += incident_size[r, h, w]

    missing = rng.random((reps, n, W)) < sc.missing
    partial = (rng.random((reps, n, W)) < 0.01) & ~missing
    coverage = np.where(partial, rng.uniform(0.5, 0.85, (reps, n, W)), 1.0)
    return {"packets": packets, "drops": drops, "missing": missing, "coverage": coverage,
            "site": site, "model": model, "pre_windows": np.array(P)}


def _judge_input(sim: Dict[str, np.ndarray], rep: int, m: int, post: int = 1) -> JudgeInput:
    """The judge's input of one simulated batch with its `post`-th post window; a pre window
    of several windows is one window of all their steps (a missing or partial scrape: its
    first)."""
    n = sim["packets"].shape[1]
    P = int(sim["pre_windows"])
    names = [f"c{i}" for i in range(m)] + [f"k{i}" for i in range(n - m)]
    hosts = {}
    for index, name in enumerate(names):
        item = HostWindows(name, "canary" if index < m else "control",
                           site=f"site{sim['site'][rep, index]}",
                           model=f"model{sim['model'][rep, index]}")
        for span, attr in ((slice(0, P), "pre"), (slice(P - 1 + post, P + post), "post")):
            if not sim["missing"][rep, index, span.start]:
                steps = sim["drops"][rep, index, span].reshape(-1)
                setattr(item, attr, WindowCounts(
                    drops=float(steps.sum()),
                    packets=float(sim["packets"][rep, index, span].sum()),
                    coverage=float(sim["coverage"][rep, index, span.start])))
                setattr(item, f"steps_{attr}", [float(x) for x in steps])
        hosts[name] = item
    return JudgeInput(names[:m], names[m:], hosts, pre_windows=float(P))


def _baselines(sim: Dict[str, np.ndarray], rep: int, m: int) -> Tuple[str, str]:
    post = int(sim["pre_windows"])
    have = ~sim["missing"][rep, :, post]
    packets = sim["packets"][rep, :, post, :]
    drops = sim["drops"][rep, :, post, :]
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


def run_cell(args: Tuple[int, str, int, float, int, int]) -> Dict[str, Any]:
    seed, scenario, m, effect, reps, pre_windows = args
    key = [seed, list(SCENARIOS).index(scenario), m, int(effect * 10)]
    rng = np.random.default_rng(np.random.SeedSequence(key))
    sim = simulate(rng, reps, m, effect, scenario, pre_windows=pre_windows)
    policy = Policy()
    counts = {method: 0 for method in METHODS}
    inconclusive = 0
    for rep in range(reps):
        result = judge(_judge_input(sim, rep, m), policy)
        verdict = result.verdict
        counts["judge"] += verdict == FAIL
        inconclusive += verdict == INCONCLUSIVE
        if result.reason == "ceiling":
            counts["rank"] += 1
        elif result.reason != "guards":  # the same guards and ceiling, then a rank test
            e = {g: [h.e for h in result.hosts if h.usable and h.group == g]
                 for g in ("canary", "control")}
            counts["rank"] += rank_test(e["canary"], e["control"], policy.alpha,
                                        policy.min_regression_ratio,
                                        policy.ci_level).verdict == "FAIL"
        kayenta, poisson = _baselines(sim, rep, m)
        counts["kayenta"] += kayenta == "FAIL"
        counts["poisson"] += poisson == "FAIL"
    return {"scenario": scenario, "canaries": m, "controls": CONTROL_RATIO * m,
            "effect": effect, "reps": reps,
            "fail_rate": {k: v / reps for k, v in counts.items()},
            "inconclusive": inconclusive / reps}


SMALL_SIZES = (1, 2)
SMALL_CONTROLS = 20
SMALL_EFFECTS = (1.0, 5.0, 10.0, 0.2, 0.1)
SMALL_WINDOWS = 3  # post windows a small batch may take (INCONCLUSIVE -> another window)


def run_small_cell(args: Tuple[int, str, int, float, int, int]) -> Dict[str, Any]:
    """1-2 canaries against SMALL_CONTROLS controls: the large-change path over up to
    SMALL_WINDOWS fresh post windows, stopping at the first PASS or FAIL."""
    seed, scenario, m, effect, reps, pre_windows = args
    key = [seed, 100 + list(SCENARIOS).index(scenario), m, int(effect * 100)]
    rng = np.random.default_rng(np.random.SeedSequence(key))
    sim = simulate(rng, reps, m, effect, scenario, controls=SMALL_CONTROLS,
                   windows=1 + SMALL_WINDOWS, pre_windows=pre_windows)
    policy = Policy()
    fails = passes = 0
    windows: List[int] = []
    for rep in range(reps):
        for post in range(1, SMALL_WINDOWS + 1):
            verdict = judge(_judge_input(sim, rep, m, post), policy).verdict
            if verdict != INCONCLUSIVE:
                fails += verdict == FAIL
                passes += verdict == PASS
                windows.append(post)
                break
    return {"scenario": scenario, "canaries": m, "controls": SMALL_CONTROLS, "effect": effect,
            "reps": reps, "fail_rate": fails / reps, "pass_rate": passes / reps,
            "mean_windows": float(np.mean(windows)) if windows else None}


def _pct(value: float) -> str:
    return f"{100 * value:5.1f}%"


def record_results(args: argparse.Namespace, table: Dict[Any, Dict[str, Any]],
                   targets: Dict[str, Any]) -> None:
    """This run's figures in bench/RESULTS.md (results.py): the worst false-alarm rate, the
    power for 2x at 8 canaries and 3x at 5 per scenario, the small batches' false decisions."""
    import results as bench_results

    run = f"{args.reps} batches per cell, pre window {args.pre_windows}"
    figures = [(f"false alarms, worst cell ({run})", round(targets["false_alarm_max"], 3),
                "rate")]
    for name in SCENARIOS:
        for m, effect in ((8, 2.0), (5, 3.0)):
            figures.append((f"power, {name}, {effect:g}x at {m} canaries",
                            round(table[(name, m, effect)]["fail_rate"]["judge"], 3), "rate"))
    figures.append(("small batches: false decisions, worst cell",
                    round(targets["small_batch_false_decision_max"], 3), "rate"))
    bench_results.record("bench-judge", figures)


INDEPENDENT_CELLS = ((5, 1.0), (8, 1.0), (16, 1.0), (8, 2.0), (5, 3.0), (16, 2.0))
INDEPENDENT_FORMS = (("steps", False), ("totals", True))  # per-step drops; window totals only
INDEPENDENT_METHODS = ("judge", "rank", "poisson")


def _rank_fails(result: Verdict, policy: Policy) -> bool:
    """The plain rank test behind the judge's own guards and ceiling (the `rank` baseline)."""
    if result.reason == "ceiling":
        return True
    if result.reason == "guards":
        return False
    e = {g: [h.e for h in result.hosts if h.usable and h.group == g]
         for g in ("canary", "control")}
    return rank_test(e["canary"], e["control"], policy.alpha, policy.min_regression_ratio,
                     policy.ci_level).verdict == "FAIL"


def _pooled_poisson_fails(data: JudgeInput) -> bool:
    """The pooled Poisson baseline on the post windows' totals of the hosts that have one."""
    sums = []
    for group in ("canary", "control"):
        windows = [h.post for h in data.group(group) if h.post is not None]
        sums += [sum(w.drops for w in windows), sum(w.packets for w in windows)]
    return pooled_poisson_rate_ratio(*sums).verdict == "FAIL"


def run_independent_cell(args: Tuple[int, str, int, float, int, int]) -> Dict[str, Any]:
    """One generator of fleet_generators at one size and effect: the same fleets in both input
    forms through the judge and the `rank` and `poisson` baselines."""
    from fleet_generators import GENERATORS, Layout

    seed, name, m, effect, reps, pre_windows = args
    key = [seed, 200 + list(GENERATORS).index(name), m, int(effect * 10)]
    rng = np.random.default_rng(np.random.SeedSequence(key))
    layout = Layout(m, CONTROL_RATIO * m, STEPS, pre_windows)
    policy = Policy()
    counts = {form: {method: 0 for method in INDEPENDENT_METHODS} for form, _ in
              INDEPENDENT_FORMS}
    inconclusive = {form: 0 for form, _ in INDEPENDENT_FORMS}
    for _ in range(reps):
        fleet = GENERATORS[name].sample(rng, layout, effect)
        for form, totals_only in INDEPENDENT_FORMS:
            data = judge_input_from_dict(fleet.document(totals_only), policy.metric)
            result = judge(data, policy)
            counts[form]["judge"] += result.verdict == FAIL
            inconclusive[form] += result.verdict == INCONCLUSIVE
            counts[form]["rank"] += _rank_fails(result, policy)
            counts[form]["poisson"] += _pooled_poisson_fails(data)
    return {"generator": name, "canaries": m, "controls": CONTROL_RATIO * m, "effect": effect,
            "reps": reps,
            "forms": {form: {"fail_rate": {k: v / reps for k, v in counts[form].items()},
                             "inconclusive": inconclusive[form] / reps}
                      for form, _ in INDEPENDENT_FORMS}}


def run_independent(args: argparse.Namespace) -> int:
    """The --independent table: judge and baselines on fleets from fleet_generators."""
    from fleet_generators import GENERATORS, HELD_OUT

    started = time.time()
    cells = [(args.seed, name, m, effect, args.reps, args.pre_windows)
             for name in GENERATORS for m, effect in INDEPENDENT_CELLS]
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(run_independent_cell, cells, chunksize=1)
    else:
        results = [run_independent_cell(cell) for cell in cells]
    elapsed = time.time() - started
    if args.json:
        json.dump({"seed": args.seed, "reps": args.reps, "pre_windows": args.pre_windows,
                   "seconds": round(elapsed, 1), "held_out": HELD_OUT, "cells": results},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"Canary judge on independent fleets: {args.reps} batches per cell, seed {args.seed}, "
          f"controls = {CONTROL_RATIO} x canaries, {STEPS} steps per window, pre window "
          f"{args.pre_windows} x post window")
    for name, generator in GENERATORS.items():
        print(f"  {name}: {generator.summary}")
    for name, reason in HELD_OUT.items():
        print(f"  held out of tuning: {name}: {reason}")
    print("\n  generator              form    held out  cell                  judge FAIL"
          "  inconclusive  rank FAIL  poisson FAIL")
    for r in results:
        what = "false alarms" if r["effect"] == 1.0 else f"power {r['effect']:g}x"
        cell = f"{what} at {r['canaries']}"
        for form, _ in INDEPENDENT_FORMS:
            row = r["forms"][form]
            rates = row["fail_rate"]
            held = "yes" if r["generator"] in HELD_OUT else "no"
            print(f"  {r['generator']:22s} {form:7s} {held:8s}  {cell:20s}"
                  f"  {_pct(rates['judge']):>10s}  {_pct(row['inconclusive']):>12s}"
                  f"  {_pct(rates['rank']):>9s}  {_pct(rates['poisson']):>12s}")
    print("\nfalse alarms = FAIL without any change; power = FAIL with the regression "
          "(INCONCLUSIVE counts as not detected); the same fleets in both forms.")
    print(f"elapsed {elapsed:.0f} s")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=1000, help="fleets per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--pre-windows", type=int, default=DEFAULT_PRE_WINDOWS,
                        choices=range(1, MAX_PRE_WINDOWS + 1), metavar="K",
                        help="the pre window lasts K post windows (default: the profile's "
                        f"canary.pre_windows default, {DEFAULT_PRE_WINDOWS})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--independent", action="store_true",
                        help="only the fleets of bench/fleet_generators.py (both input forms, "
                        "held-out generators marked); nothing is written to RESULTS.md")
    args = parser.parse_args(argv)
    if args.independent:
        return run_independent(args)

    started = time.time()
    cells = [(args.seed, scenario, m, effect, args.reps, args.pre_windows)
             for scenario in SCENARIOS for m in SIZES for effect in EFFECTS]
    small_cells = [(args.seed, scenario, m, effect, args.reps, args.pre_windows)
                   for scenario in SCENARIOS for m in SMALL_SIZES for effect in SMALL_EFFECTS]
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(run_cell, cells, chunksize=1)
            small = pool.map(run_small_cell, small_cells, chunksize=1)
    else:
        results = [run_cell(cell) for cell in cells]
        small = [run_small_cell(cell) for cell in small_cells]
    elapsed = time.time() - started
    table = {(r["scenario"], r["canaries"], r["effect"]): r for r in results}
    small_table = {(r["scenario"], r["canaries"], r["effect"]): r for r in small}
    small_false = max(r["fail_rate"] + r["pass_rate"] for r in small if r["effect"] == 1.0)

    busy_8_2x = table[("busy", 8, 2.0)]["fail_rate"]["judge"]
    worst_fa = max(r["fail_rate"]["judge"] for r in results if r["effect"] == 1.0)
    harsh = {name: {"2x_at_8": table[(name, 8, 2.0)]["fail_rate"]["judge"],
                    "3x_at_5": table[(name, 5, 3.0)]["fail_rate"]["judge"]}
             for name, scenario in SCENARIOS.items() if scenario.harsh}
    targets = {
        "false_alarm_max": worst_fa,
        "false_alarm_ok": worst_fa <= 0.05,
        "power_busy_8_canaries_2x": busy_8_2x,
        "power_ok": busy_8_2x >= 0.8,
        "power_harsh": harsh,
        "power_harsh_ok": all(min(p.values()) >= 0.8 for p in harsh.values()),
        "small_batch_false_decision_max": small_false,
        "small_batch_false_decision_ok": small_false <= 0.05,
    }
    record_results(args, table, targets)
    if args.json:
        json.dump({"seed": args.seed, "reps": args.reps, "pre_windows": args.pre_windows,
                   "seconds": round(elapsed, 1),
                   "cells": results, "small_batches": small, "targets": targets},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    print(f"Canary judge bench: {args.reps} simulated batches per cell, seed {args.seed}, "
          f"controls = {CONTROL_RATIO} x canaries, {STEPS} steps per window, pre window "
          f"{args.pre_windows} x post window, {SITES} sites, {MODELS} hardware models")
    for name, scenario in SCENARIOS.items():
        print(f"\nscenario {name}: {scenario.label}")
        print("  canaries controls  method    false alarm  power 1.5x  power 2x  power 3x"
              "  inconclusive (no change)")
        for m in SIZES:
            for method in METHODS:
                row = [table[(name, m, e)] for e in EFFECTS]
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
    for name, power in harsh.items():
        print(f"  {name}: power >= 0.8 for 2x at 8 canaries ({power['2x_at_8']:.2f}) and 3x at 5 "
              f"({power['3x_at_5']:.2f}): {'met' if min(power.values()) >= 0.8 else 'MISSED'}")
    print(f"\nsmall batches: 1-2 canaries vs {SMALL_CONTROLS} controls, only a change of "
          f"{Policy().large_change:g}x or more decides, up to {SMALL_WINDOWS} post windows "
          "(INCONCLUSIVE -> another window)")
    print("  scenario      canaries  false FAIL  false PASS  FAIL 5x  FAIL 10x  PASS 1/5  "
          "PASS 1/10  windows (10x, 1/10)")
    for name in SCENARIOS:
        for m in SMALL_SIZES:
            row = {e: small_table[(name, m, e)] for e in SMALL_EFFECTS}
            lat = [row[e]["mean_windows"] for e in (10.0, 0.1)]
            lat_text = ", ".join("-" if v is None else f"{v:.2f}" for v in lat)
            print(f"  {name:13s} {m:8d}  {_pct(row[1.0]['fail_rate']):>10s}  "
                  f"{_pct(row[1.0]['pass_rate']):>10s}  {_pct(row[5.0]['fail_rate']):>7s}  "
                  f"{_pct(row[10.0]['fail_rate']):>8s}  {_pct(row[0.2]['pass_rate']):>8s}  "
                  f"{_pct(row[0.1]['pass_rate']):>9s}  {lat_text:>19s}")
    print(f"  target: false decisions (FAIL or PASS without a change, over all windows) <= 5%: "
          f"{'met' if targets['small_batch_false_decision_ok'] else 'MISSED'} "
          f"(worst {_pct(small_false).strip()})")
    print(f"elapsed {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
