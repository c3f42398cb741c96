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

Small batches: 1-2 canaries against 20 controls, where only a change of ``large_change`` (5x)
or more decides (fleet_rollout.judge.large_change), over up to 3 fresh post windows (the
rollout's INCONCLUSIVE -> another window): false decisions (FAIL or PASS without a change) over
all windows, the share decided at 5x and 10x either way, and the windows a decision took.

Independent fleets: the judge and the ``rank`` and ``poisson`` baselines on fleets from
generators written apart from this bench's model (fleet_generators.GENERATORS), each in two
input forms (with per-step drops, and window totals only), at no change (false alarms at 5, 8
and 16 canaries) and at 2x with 8 canaries, 3x with 5 and 2x with 16, controls 4 x canaries;
the table says which generators are held out of tuning (fleet_generators.HELD_OUT).
``--independent`` runs only these and records nothing.

The yardstick (``best``, bench/yardstick.py): in every cell, the power of the most powerful
test that knows the generating model (a likelihood-ratio test, each host's unknowns integrated
over their prior), at the judge's false-alarm rate of the same size (at least 1%); the judge's
power over it is its efficiency. Targets on every fleet and input form: false alarms <= 5%,
power >= 0.8 and >= 80% of the best test's at 2x with 8 canaries and 3x with 5. The run writes
its figures to bench/RESULTS.md and the summary table to docs/judge.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from yardstick import BenchYardstick, generator_yardstick, power, statistic, threshold

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
BEST = "best"  # the yardstick: the most powerful test knowing the model (bench/yardstick.py)
BEST_LEVEL_FLOOR = 0.01  # its level: the judge's false alarms at that size, at least this


def simulate(rng: np.random.Generator, reps: int, m: int, effect: float, scenario: str,
             controls: Optional[int] = None, windows: int = 2,
             pre_windows: int = 1) -> Dict[str, np.ndarray]:
    """Per-step packets and drops, shape (reps, hosts, pre_windows + windows - 1, STEPS),
    canaries first: the pre window (pre_windows windows of STEPS steps, one after the other:
    the fleet's traffic ramps on through them), then the post window(s), each post window a
    fresh one after the change; site and model per host, shape (reps, hosts); the fleet-wide
    draws a yardstick may know: each host's site-burst multiplier per step (shape of drops)
    and its hardware model's change of condition after the change (reps, hosts)."""
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
    site_multiplier = np.ones((reps, n, W, STEPS))
    if sc.site_burst > 0:  # a site-wide burst: a run of steps, every host of the site
        hit = rng.random((reps, SITES, W)) < sc.site_burst
        factor = rng.uniform(*sc.site_factor, (reps, SITES, W))
        first = rng.integers(0, STEPS, (reps, SITES, W))
        length = rng.integers(2, 7, (reps, SITES, W))
        steps = np.arange(STEPS)
        inside = (steps >= first[..., None]) & (steps < (first + length)[..., None])
        multiplier = np.where(hit[..., None] & inside, factor[..., None], 1.0)
        site_multiplier = multiplier[np.arange(reps)[:, None], site]  # (reps, hosts, W, STEPS)
        intensity *= site_multiplier
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
            "site": site, "model": model, "pre_windows": np.array(P),
            # the fleet-wide draws, for the yardstick (bench/yardstick.py)
            "site_multiplier": site_multiplier,
            "model_change": np.take_along_axis(model_change, model, axis=1)}


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
    yardstick = BenchYardstick(SCENARIOS[scenario], STEPS)
    alternatives = EFFECTS[1:] if effect == 1.0 else (effect,)
    best: Dict[str, List[float]] = {str(e): [] for e in alternatives}
    for rep in range(reps):
        marginals = yardstick.log_marginals(sim, rep, m, (1.0,) + tuple(alternatives))
        for e in alternatives:
            best[str(e)].append(statistic(marginals, (1.0,) + tuple(alternatives), e))
        result = judge(_judge_input(sim, rep, m), policy)
        verdict = result.verdict
        counts["judge"] += verdict == FAIL
        inconclusive += verdict == INCONCLUSIVE
        counts["rank"] += _rank_fails(result, policy)
        kayenta, poisson = _baselines(sim, rep, m)
        counts["kayenta"] += kayenta == "FAIL"
        counts["poisson"] += poisson == "FAIL"
    return {"scenario": scenario, "canaries": m, "controls": CONTROL_RATIO * m,
            "effect": effect, "reps": reps,
            "fail_rate": {k: v / reps for k, v in counts.items()},
            "inconclusive": inconclusive / reps, "best_statistics": best}


def attach_best(null: Dict[str, Any], cells: List[Dict[str, Any]]) -> None:
    """The yardstick's figures of one size: its level (the judge's false-alarm rate in the
    no-change cell ``null``, at least BEST_LEVEL_FLOOR) as the null cell's ``best`` rate, and
    in each power cell its power at that level (the threshold set on the null cell's batches);
    the raw statistics are dropped."""
    level = max(null["fail_rate"]["judge"], BEST_LEVEL_FLOOR)
    for cell in cells:
        limit = threshold(null["best_statistics"][str(cell["effect"])], level)
        cell["fail_rate"][BEST] = power(cell["best_statistics"][str(cell["effect"])], limit)
    null["fail_rate"][BEST] = level
    for cell in [null] + cells:
        cell.pop("best_statistics", None)


def efficiency(cell: Dict[str, Any]) -> Optional[float]:
    """The judge's power over the yardstick's (None when the yardstick sees nothing)."""
    best = cell["fail_rate"][BEST]
    return cell["fail_rate"]["judge"] / best if best > 0 else None


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


INDEPENDENT_CELLS = ((5, 1.0), (8, 1.0), (16, 1.0), (8, 2.0), (5, 3.0), (16, 2.0))
INDEPENDENT_FORMS = (("steps", False), ("totals", True))  # per-step drops; window totals only
INDEPENDENT_METHODS = ("judge", "rank", "poisson")
TARGET_CELLS = ((8, 2.0), (5, 3.0))  # the power targets: 2x at 8 canaries, 3x at 5
TARGET_FALSE_ALARMS, TARGET_POWER, TARGET_EFFICIENCY = 0.05, 0.8, 0.8
DOCS_PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "judge.md")


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


def _alternatives(m: int, effect: float) -> Tuple[float, ...]:
    """The effects a cell's yardstick statistics are needed for: its own, or in a no-change
    cell every effect measured at its size."""
    if effect != 1.0:
        return (effect,)
    return tuple(e for size, e in INDEPENDENT_CELLS if size == m and e != 1.0)


def run_independent_cell(args: Tuple[int, str, int, float, int, int]) -> Dict[str, Any]:
    """One generator of fleet_generators at one size and effect: the same fleets in both input
    forms through the judge, the `rank` and `poisson` baselines and the yardstick."""
    from fleet_generators import GENERATORS, Layout

    seed, name, m, effect, reps, pre_windows = args
    key = [seed, 200 + list(GENERATORS).index(name), m, int(effect * 10)]
    rng = np.random.default_rng(np.random.SeedSequence(key))
    layout = Layout(m, CONTROL_RATIO * m, STEPS, pre_windows)
    policy = Policy()
    yardstick = generator_yardstick(name)
    alternatives = _alternatives(m, effect)
    effects = (1.0,) + alternatives
    counts = {form: {method: 0 for method in INDEPENDENT_METHODS} for form, _ in
              INDEPENDENT_FORMS}
    inconclusive = {form: 0 for form, _ in INDEPENDENT_FORMS}
    best: Dict[str, Dict[str, List[float]]] = {
        form: {str(e): [] for e in alternatives} for form, _ in INDEPENDENT_FORMS}
    for _ in range(reps):
        fleet = GENERATORS[name].sample(rng, layout, effect)
        for form, totals_only in INDEPENDENT_FORMS:
            data = judge_input_from_dict(fleet.document(totals_only), policy.metric)
            result = judge(data, policy)
            counts[form]["judge"] += result.verdict == FAIL
            inconclusive[form] += result.verdict == INCONCLUSIVE
            counts[form]["rank"] += _rank_fails(result, policy)
            counts[form]["poisson"] += _pooled_poisson_fails(data)
            marginals = yardstick.log_marginals(fleet, totals_only, effects)
            for e in alternatives:
                best[form][str(e)].append(statistic(marginals, effects, e))
    return {"generator": name, "canaries": m, "controls": CONTROL_RATIO * m, "effect": effect,
            "reps": reps,
            "forms": {form: {"canaries": m, "effect": effect,
                             "fail_rate": {k: v / reps for k, v in counts[form].items()},
                             "inconclusive": inconclusive[form] / reps,
                             "best_statistics": best[form]}
                      for form, _ in INDEPENDENT_FORMS}}


def attach_best_by_size(rows: List[Dict[str, Any]]) -> None:
    """attach_best over rows of one fleet and input form, size by size."""
    for m in sorted({row["canaries"] for row in rows}):
        same = [row for row in rows if row["canaries"] == m]
        null = next(row for row in same if row["effect"] == 1.0)
        attach_best(null, [row for row in same if row["effect"] != 1.0])


def summary_rows(table: Dict[Any, Dict[str, Any]], independent: List[Dict[str, Any]]
                 ) -> List[Dict[str, Any]]:
    """One row per fleet and input form: the worst false-alarm rates, and at each target cell
    the judge's, the yardstick's and the baselines' power and the judge's efficiency."""
    from fleet_generators import GENERATORS, HELD_OUT

    rows = []
    for name in SCENARIOS:
        cells = {(m, e): table[(name, m, e)] for m in SIZES for e in EFFECTS}
        rows.append(_summary(name, "steps", "tuned on", cells))
    for name in GENERATORS:
        for form, _ in INDEPENDENT_FORMS:
            cells = {(r["canaries"], r["effect"]): r["forms"][form] for r in independent
                     if r["generator"] == name}
            rows.append(_summary(name, form, "held out" if name in HELD_OUT else "tuned on",
                                 cells))
    return rows


def _summary(name: str, form: str, role: str, cells: Dict[Tuple[int, float], Dict[str, Any]]
             ) -> Dict[str, Any]:
    nulls = [cell for (m, e), cell in cells.items() if e == 1.0]
    row: Dict[str, Any] = {
        "fleet": name, "form": form, "role": role,
        "false_alarms": {method: max(c["fail_rate"][method] for c in nulls)
                         for method in ("judge", "rank", "poisson")},
        "cells": {}}
    for m, effect in TARGET_CELLS:
        cell = cells[(m, effect)]
        row["cells"][f"{effect:g}x at {m}"] = {
            "judge": cell["fail_rate"]["judge"], BEST: cell["fail_rate"][BEST],
            "efficiency": efficiency(cell), "rank": cell["fail_rate"]["rank"],
            "poisson": cell["fail_rate"]["poisson"]}
    cellwise = row["cells"].values()
    row["met"] = {
        "false_alarms": row["false_alarms"]["judge"] <= TARGET_FALSE_ALARMS,
        "power": all(c["judge"] >= TARGET_POWER for c in cellwise),
        "efficiency": all(c["efficiency"] is not None and c["efficiency"] >= TARGET_EFFICIENCY
                          for c in cellwise)}
    return row


def _share(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(rows: List[Dict[str, Any]], args: argparse.Namespace) -> str:
    """The summary as bench-judge writes it into docs/judge.md."""
    head = ("| fleet | input | tuning | false alarms, worst size: judge / rank / poisson "
            "| 2x at 8: judge / best test / judge÷best | 3x at 5: judge / best test / "
            "judge÷best | 2x at 8: rank / poisson |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for row in rows:
        fa = row["false_alarms"]
        two, three = row["cells"]["2x at 8"], row["cells"]["3x at 5"]
        lines.append(
            f"| {row['fleet']} | {row['form']} | {row['role']} "
            f"| {_pct(fa['judge']).strip()} / {_pct(fa['rank']).strip()} / "
            f"{_pct(fa['poisson']).strip()} "
            f"| {two['judge']:.2f} / {two[BEST]:.2f} / {_share(two['efficiency'])} "
            f"| {three['judge']:.2f} / {three[BEST]:.2f} / {_share(three['efficiency'])} "
            f"| {two['rank']:.2f} / {two['poisson']:.2f} |")
    return (f"{args.reps} batches per cell (seed {args.seed}, pre window {args.pre_windows}, "
            f"controls {CONTROL_RATIO} x canaries); the best test at the judge's false-alarm "
            f"rate of the same size, at least {BEST_LEVEL_FLOOR:.0%}.\n\n" + head
            + "\n".join(lines))


def print_summary(rows: List[Dict[str, Any]]) -> None:
    print(f"\ntargets on every fleet and input form: judge false alarms <= "
          f"{TARGET_FALSE_ALARMS:.0%}; power >= {TARGET_POWER} and >= {TARGET_EFFICIENCY:.0%} of "
          "the best test's at 2x with 8 canaries and 3x with 5")
    print("  fleet                  input   tuning    false alarms  2x at 8: judge  best  "
          "judge/best   3x at 5: judge  best  judge/best   met (alarms, power, efficiency)")
    for row in rows:
        two, three = row["cells"]["2x at 8"], row["cells"]["3x at 5"]
        met = ", ".join("met" if row["met"][k] else "MISSED"
                        for k in ("false_alarms", "power", "efficiency"))
        print(f"  {row['fleet']:22s} {row['form']:7s} {row['role']:8s}  "
              f"{_pct(row['false_alarms']['judge']):>12s}  {two['judge']:14.2f}  "
              f"{two[BEST]:4.2f}  {_share(two['efficiency']):>10s}   {three['judge']:14.2f}  "
              f"{three[BEST]:4.2f}  {_share(three['efficiency']):>10s}   {met}")


def print_independent(results: List[Dict[str, Any]], reps: int, seed: int,
                      pre_windows: int) -> None:
    from fleet_generators import GENERATORS, HELD_OUT

    print(f"\nIndependent fleets (bench/fleet_generators.py): {reps} batches per cell, seed "
          f"{seed}, controls = {CONTROL_RATIO} x canaries, {STEPS} steps per window, pre window "
          f"{pre_windows} x post window, each fleet in both input forms")
    for name, generator in GENERATORS.items():
        print(f"  {name}: {generator.summary}")
    for name, reason in HELD_OUT.items():
        print(f"  held out of tuning: {name}: {reason}")
    print("\n  generator              form    held out  cell                  judge FAIL"
          "  inconclusive  rank FAIL  poisson FAIL  best test")
    for r in results:
        what = "false alarms" if r["effect"] == 1.0 else f"power {r['effect']:g}x"
        cell = f"{what} at {r['canaries']}"
        for form, _ in INDEPENDENT_FORMS:
            row = r["forms"][form]
            rates = row["fail_rate"]
            held = "yes" if r["generator"] in HELD_OUT else "no"
            print(f"  {r['generator']:22s} {form:7s} {held:8s}  {cell:20s}"
                  f"  {_pct(rates['judge']):>10s}  {_pct(row['inconclusive']):>12s}"
                  f"  {_pct(rates['rank']):>9s}  {_pct(rates['poisson']):>12s}"
                  f"  {_pct(rates[BEST]):>9s}")
    print("  (best test: in a no-change row its level, the judge's false alarms at that size, "
          f"at least {BEST_LEVEL_FLOOR:.0%})")


def cells_run(pool: Any, run: Callable[[Any], Dict[str, Any]], cells: List[Any],
              label: str) -> List[Dict[str, Any]]:
    """`run` over `cells` (in `pool` when there is one), in order, with a progress line on
    stderr as each cell ends."""
    started = time.time()
    mapped = pool.imap(run, cells, chunksize=1) if pool is not None else map(run, cells)
    results = []
    for done, result in enumerate(mapped, 1):
        results.append(result)
        print(f"bench-judge: {label} {done}/{len(cells)} cells, {time.time() - started:.0f} s",
              file=sys.stderr, flush=True)
    return results


def independent_cells(args: argparse.Namespace, pool: Any) -> List[Dict[str, Any]]:
    """Every generator's cells, the yardstick attached."""
    from fleet_generators import GENERATORS

    cells = [(args.seed, name, m, effect, args.reps, args.pre_windows)
             for name in GENERATORS for m, effect in INDEPENDENT_CELLS]
    results = cells_run(pool, run_independent_cell, cells, "independent fleets")
    for name in GENERATORS:
        for form, _ in INDEPENDENT_FORMS:
            attach_best_by_size([r["forms"][form] for r in results if r["generator"] == name])
    return results


def record_results(args: argparse.Namespace, targets: Dict[str, Any],
                   rows: List[Dict[str, Any]]) -> None:
    """This run's figures in bench/RESULTS.md (results.py): the worst false-alarm rate of the
    bench's scenarios, per fleet and input form the judge's power, the best test's and the
    efficiency at the target cells, the small batches' false decisions; and the summary table
    in docs/judge.md."""
    import results as bench_results

    run = f"{args.reps} batches per cell, pre window {args.pre_windows}"
    figures = [(f"false alarms, worst cell of the bench's scenarios ({run})",
                round(targets["false_alarm_max"], 3), "rate")]
    for row in rows:
        label = (row["fleet"] if row["fleet"] in SCENARIOS
                 else f"{row['fleet']} ({row['form']}, {row['role']})")
        if row["fleet"] not in SCENARIOS:
            figures.append((f"false alarms, worst size, {label}",
                            round(row["false_alarms"]["judge"], 3), "rate"))
        for cell, values in row["cells"].items():
            figures.append((f"power, {label}, {cell} canaries", round(values["judge"], 3),
                            "rate"))
            figures.append((f"best test's power, {label}, {cell} canaries",
                            round(values[BEST], 3), "rate"))
    figures.append(("small batches: false decisions, worst cell",
                    round(targets["small_batch_false_decision_max"], 3), "rate"))
    head = bench_results.commit()  # before either file changes
    bench_results.record("bench-judge", figures, head=head)
    bench_results.write_section(DOCS_PAGE, "bench-judge", markdown_table(rows, args), head=head)


def run_independent(args: argparse.Namespace) -> int:
    """--independent: the fleets of fleet_generators only, printed, nothing recorded."""
    started = time.time()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = independent_cells(args, pool)
    else:
        results = independent_cells(args, None)
    elapsed = time.time() - started
    if args.json:
        from fleet_generators import HELD_OUT
        json.dump({"seed": args.seed, "reps": args.reps, "pre_windows": args.pre_windows,
                   "seconds": round(elapsed, 1), "held_out": HELD_OUT, "cells": results},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print_independent(results, args.reps, args.seed, args.pre_windows)
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
                        "held-out generators marked); nothing is written")
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
            results = cells_run(pool, run_cell, cells, "scenarios")
            small = cells_run(pool, run_small_cell, small_cells, "small batches")
            independent = independent_cells(args, pool)
    else:
        results = cells_run(None, run_cell, cells, "scenarios")
        small = cells_run(None, run_small_cell, small_cells, "small batches")
        independent = independent_cells(args, None)
    elapsed = time.time() - started
    table = {(r["scenario"], r["canaries"], r["effect"]): r for r in results}
    for name in SCENARIOS:
        for m in SIZES:
            attach_best(table[(name, m, 1.0)], [table[(name, m, e)] for e in EFFECTS[1:]])
    small_table = {(r["scenario"], r["canaries"], r["effect"]): r for r in small}
    small_false = max(r["fail_rate"] + r["pass_rate"] for r in small if r["effect"] == 1.0)
    rows = summary_rows(table, independent)

    worst_fa = max(r["fail_rate"]["judge"] for r in results if r["effect"] == 1.0)
    targets = {
        "false_alarm_max": worst_fa,
        "false_alarm_ok": worst_fa <= TARGET_FALSE_ALARMS,
        "small_batch_false_decision_max": small_false,
        "small_batch_false_decision_ok": small_false <= 0.05,
        "fleets": rows,
    }
    record_results(args, targets, rows)
    if args.json:
        json.dump({"seed": args.seed, "reps": args.reps, "pre_windows": args.pre_windows,
                   "seconds": round(elapsed, 1), "cells": results, "small_batches": small,
                   "independent": independent, "targets": targets}, sys.stdout, indent=2)
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
            for method in METHODS + (BEST,):
                row = [table[(name, m, e)] for e in EFFECTS]
                rates = [_pct(r["fail_rate"][method]) for r in row]
                incon = _pct(row[0]["inconclusive"]) if method == "judge" else "    -"
                first = f"  {m:8d} {CONTROL_RATIO * m:8d}" if method == "judge" else " " * 19
                print(f"{first}  {method:8s}  {rates[0]:>11s}  {rates[1]:>10s}  {rates[2]:>8s}"
                      f"  {rates[3]:>8s}  {incon:>12s}")
    print("\nfalse alarm = FAIL without any change; power = FAIL with the regression; the judge "
          "counts INCONCLUSIVE as not detected; best = the most powerful test knowing the "
          "model (bench/yardstick.py) at the judge's false-alarm rate of that size, at least "
          f"{BEST_LEVEL_FLOOR:.0%} (its false-alarm column: that level).")
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
    print_independent(independent, args.reps, args.seed, args.pre_windows)
    print_summary(rows)
    print(f"elapsed {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
