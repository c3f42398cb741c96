"""Fleets for the canary judge drawn from models of their own, not from bench_judge.simulate.

Each generator draws one canary batch from its own model of how NIC drop counters behave
(published descriptions of them: rates that differ by orders of magnitude from host to host,
over-dispersed counts, mostly silent hosts, drops in bursts of heavy-tailed size, site-wide
episodes, traffic that moves between the windows, drops that rise faster than load, on/off
episodes, missing scrapes) and returns a judge input document, the dict that
``fleet_rollout.judge.judge_input_from_dict`` reads (docs/judge.md, "Input format"):

* ``schema_version`` 1, ``canary`` (``c0``, ``c1``, ...) and ``control`` (``k0``, ...) lists,
  ``pre_windows``, and per host ``site``, ``model`` and the ``pre``/``post`` windows;
* the pre window lasts ``pre_windows`` post windows and has ``pre_windows * steps`` steps, the
  post window ``steps`` steps, all steps of one length;
* a window is ``{"drops", "packets"}`` with its per-step drops as ``steps`` (adding up to
  ``drops``), or without ``steps`` when ``totals_only`` (the form that carries each window's
  totals only); ``null`` when the host has no data for it; a window with a gap in its data has
  ``coverage`` below 1, counts of its covered steps only and no ``steps`` in either form.

``effect`` multiplies the canaries' post-window drop rate as each model defines it (1.0: no
change). Every generator draws its latent parameters first and its counts after, so a fresh
``np.random.Generator`` of one seed gives the same fleet (hosts, rates, traffic, episodes,
missing data) and the same pre window at every effect.

``generate_with_truth`` also returns what the generator drew (the model's latent parameters
per host, the fleet's, and each step's expected drops given them), for tests of the
generators' claims and for a likelihood-ratio test that knows the model. Each model function's
docstring states its distributions and parameters exactly.

``GENERATORS`` names them; ``HELD_OUT`` names those kept out of any tuning of the judge, with
the reason for each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from scipy.special import zeta
from scipy.stats import nbinom

SCHEMA_VERSION = 1
PACKET_JITTER = 0.05  # sd of the log of a step's packets around the host's traffic
CHANGE_GAP_STEPS = 6  # steps between the pre and the post window (the change and its reboot)


@dataclass(frozen=True)
class Layout:
    """The batch's shape: how many canary and control hosts, steps per post window and the
    pre window's length in post windows."""
    canaries: int
    controls: int
    steps: int = 12
    pre_windows: int = 3

    def __post_init__(self) -> None:
        if self.canaries < 1 or self.controls < 1:
            raise ValueError("a batch needs at least one canary and one control host")
        if self.steps < 2:
            raise ValueError("a window needs at least 2 steps")
        if not 1 <= self.pre_windows <= 4:
            raise ValueError("pre_windows must be 1 to 4")

    @property
    def hosts(self) -> int:
        return self.canaries + self.controls

    @property
    def pre_steps(self) -> int:
        return self.pre_windows * self.steps

    def names(self) -> List[str]:
        """Host names, canaries first."""
        return ([f"c{i}" for i in range(self.canaries)]
                + [f"k{i}" for i in range(self.controls)])

    def canary_mask(self) -> np.ndarray:
        return np.arange(self.hosts) < self.canaries


@dataclass
class FleetSample:
    """One drawn batch: per-step drops and packets of every host in both windows (canaries
    first), which windows are missing, which steps lack data, and the drawn latents."""
    generator: str
    layout: Layout
    site: List[str]
    model: List[str]
    drops_pre: np.ndarray  # (hosts, pre_steps) integers
    drops_post: np.ndarray  # (hosts, steps)
    packets_pre: np.ndarray
    packets_post: np.ndarray
    truth: Dict[str, Any]
    missing_pre: Optional[np.ndarray] = None  # (hosts,) bool: the window is null
    missing_post: Optional[np.ndarray] = None
    gap_pre: Optional[np.ndarray] = None  # (hosts, pre_steps) bool: the step has no data
    gap_post: Optional[np.ndarray] = None
    effect: float = 1.0
    names: List[str] = field(init=False)

    def __post_init__(self) -> None:
        n = self.layout.hosts
        self.names = self.layout.names()
        if self.missing_pre is None:
            self.missing_pre = np.zeros(n, bool)
        if self.missing_post is None:
            self.missing_post = np.zeros(n, bool)
        if self.gap_pre is None:
            self.gap_pre = np.zeros(self.drops_pre.shape, bool)
        if self.gap_post is None:
            self.gap_post = np.zeros(self.drops_post.shape, bool)

    def document(self, totals_only: bool = False) -> Dict[str, Any]:
        """The judge input document of this batch: with per-step drops, or window totals only."""
        hosts: Dict[str, Any] = {}
        for index, name in enumerate(self.names):
            hosts[name] = {
                "site": self.site[index],
                "model": self.model[index],
                "pre": _window_document(self.drops_pre[index], self.packets_pre[index],
                                        bool(self.missing_pre[index]), self.gap_pre[index],
                                        totals_only),
                "post": _window_document(self.drops_post[index], self.packets_post[index],
                                         bool(self.missing_post[index]), self.gap_post[index],
                                         totals_only),
            }
        m = self.layout.canaries
        return {
            "schema_version": SCHEMA_VERSION,
            "rollout": self.generator,  # the effect stays out of what the judge reads
            "comment": "totals only" if totals_only else "per-step drops",
            "pre_windows": self.layout.pre_windows,
            "canary": self.names[:m],
            "control": self.names[m:],
            "hosts": hosts,
        }


def _window_document(drops: np.ndarray, packets: np.ndarray, missing: bool, gap: np.ndarray,
                     totals_only: bool) -> Optional[Dict[str, Any]]:
    """One window of the document: null when missing; the covered steps' counts and their
    coverage when some steps lack data; the per-step drops unless totals only."""
    if missing:
        return None
    covered = ~gap
    window: Dict[str, Any] = {"drops": int(drops[covered].sum()),
                              "packets": int(packets[covered].sum())}
    if gap.any():
        window["coverage"] = round(float(covered.mean()), 6)
    elif not totals_only:
        window["steps"] = [int(x) for x in drops]
    return window


ModelFunction = Callable[[np.random.Generator, Layout, float], FleetSample]


@dataclass(frozen=True)
class Generator:
    """A fleet model: ``sample`` draws a FleetSample; ``generate`` its judge input document."""
    name: str
    summary: str
    sample: ModelFunction

    def generate(self, rng: np.random.Generator, canaries: int, controls: int, effect: float,
                 steps: int, pre_windows: int, totals_only: bool) -> Dict[str, Any]:
        """A judge input document of one batch (see the module text)."""
        return self.generate_with_truth(rng, canaries, controls, effect, steps, pre_windows,
                                        totals_only)[0]

    def generate_with_truth(self, rng: np.random.Generator, canaries: int, controls: int,
                            effect: float, steps: int, pre_windows: int,
                            totals_only: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The document and what the model drew to make it (FleetSample.truth)."""
        if not effect > 0:
            raise ValueError("effect must be positive")
        fleet = self.sample(rng, Layout(canaries, controls, steps, pre_windows), effect)
        return fleet.document(totals_only), fleet.truth


# --- shared pieces: labels, traffic, timeline ---------------------------------------------

def spread_labels(rng: np.random.Generator, layout: Layout, count: int) -> np.ndarray:
    """Label indices 0..count-1 per host: canaries round-robin from a random first label (as
    the plan spreads a batch), controls uniformly at random."""
    labels = rng.integers(0, count, layout.hosts)
    labels[:layout.canaries] = (np.arange(layout.canaries) + rng.integers(0, count)) % count
    return labels


def _label_names(indices: np.ndarray, prefix: str) -> List[str]:
    return [f"{prefix}{i}" for i in indices]


def jittered_packets(rng: np.random.Generator, level: np.ndarray) -> np.ndarray:
    """Packets per step: the given level times a log-normal jitter (sd PACKET_JITTER), rounded,
    at least 1."""
    jitter = np.exp(rng.normal(0.0, PACKET_JITTER, level.shape))
    return np.maximum(np.round(level * jitter), 1.0)


def _window_units(array: np.ndarray, steps: int) -> List[np.ndarray]:
    """The pre window's steps cut into post-window-long units."""
    return [array[:, u * steps:(u + 1) * steps] for u in range(array.shape[1] // steps)]


def _as_counts(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(np.int64)


# --- generator 1: log-normal rates, negative-binomial windows ------------------------------

LN_SITES, LN_MODELS = 4, 2
LN_TRAFFIC_MEDIAN, LN_TRAFFIC_SD = 2.5e5, 0.8  # packets per step
LN_SHIFT = 0.15  # post traffic = pre traffic * (1 + U(-0.15, 0.15)) per host
LN_RATE_MEDIAN, LN_RATE_SD = 8e-6, 2.0  # drops per packet, log-normal over hosts
LN_K_RANGE = (0.8, 5.0)  # negative-binomial dispersion k, log-uniform over hosts
LN_SILENT = 0.2  # share of mostly silent hosts
LN_SILENT_BURST_PROB = 0.003  # per step
LN_SILENT_BURST_MEAN = 15.0  # geometric burst size (support 1, 2, ...)


def negative_binomial_window(rng: np.random.Generator, mean: np.ndarray,
                             k: np.ndarray) -> np.ndarray:
    """Per-step counts of one window whose total is NB(mean = mean.sum(1), size k) per host:
    step j is Poisson(G_j), G_j ~ Gamma(shape k * pi_j, scale M / k) independently, with
    M the window's expected total and pi_j = mean_j / M (Gamma sums at one scale: the total's
    Gamma is Gamma(k, M / k), so the window total is NB with mean M and variance M + M^2/k)."""
    total = mean.sum(axis=1, keepdims=True)
    share = np.divide(mean, total, out=np.zeros_like(mean), where=total > 0)
    scale = np.broadcast_to(total / k[:, None], mean.shape)
    intensity = rng.gamma(k[:, None] * share, scale)
    return _as_counts(rng.poisson(intensity))


def silent_bursts(rng: np.random.Generator, drops: np.ndarray, silent: np.ndarray,
                  prob: np.ndarray) -> None:
    """The silent hosts' steps of a window, in place: a Geometric(1 / LN_SILENT_BURST_MEAN)
    burst with probability ``prob`` (per host), else 0, independently per step."""
    hit = rng.random(drops.shape) < prob[:, None]
    sizes = rng.geometric(1.0 / LN_SILENT_BURST_MEAN, drops.shape)
    drops[silent] = np.where(hit, sizes, 0)[silent]


def lognormal_fleet(rng: np.random.Generator, layout: Layout, effect: float) -> FleetSample:
    """Log-normal drop rates over hosts, negative-binomial window counts, mostly silent hosts,
    per-host traffic shifts.

    Hosts: sites ``site0..site3`` and models ``model0..model1`` (spread_labels; labels only,
    neither changes any parameter). Per host h, drawn independently:

    * traffic ``T_h ~ LogNormal(ln 2.5e5, 0.8)`` packets per step before the change and
      ``T_h * (1 + d_h)`` after, ``d_h ~ Uniform(-0.15, 0.15)``; a step's packets are that level
      times ``exp(Normal(0, 0.05))``, rounded (at least 1): ``n_hj``;
    * ``silent_h ~ Bernoulli(0.2)``;
    * drop rate per packet ``r_h ~ LogNormal(ln 8e-6, 2.0)`` (0 for a silent host) and
      dispersion ``k_h = exp(Uniform(ln 0.8, ln 5.0))``.

    Counts. A non-silent host's expected drops in step j are ``mu_hj = r_h * n_hj``, times
    ``effect`` in a canary's post window. Per post-window-long unit u (the pre window has
    ``pre_windows`` of them, the post window one) with ``M_u = sum_j mu_hj``, the unit's total
    is ``NegativeBinomial(mean M_u, size k_h)`` (variance ``M_u + M_u^2 / k_h``), independently
    per unit; its steps are independent ``NB(size k_h * mu_hj / M_u, p = k_h / (k_h + M_u))``
    (Poisson of ``Gamma(k_h mu_hj / M_u, scale M_u / k_h)``), which add up to that total.
    A silent host drops in a step with probability ``q = 0.003`` (``min(1, q * effect)`` in a
    canary's post window), independently per step, a ``Geometric(1/15)`` burst (mean 15,
    support 1, 2, ...); otherwise 0.

    No missing windows. Truth: ``traffic``, ``shift``, ``silent``, ``rate``, ``k``,
    ``burst_prob`` (per host, post window, effect included), ``burst_mean``; ``mean_pre`` and
    ``mean_post``: each step's expected drops (``mu_hj``, or ``q * 15`` for a silent host).
    """
    n, steps = layout.hosts, layout.steps
    canary = layout.canary_mask()
    site = spread_labels(rng, layout, LN_SITES)
    model = spread_labels(rng, layout, LN_MODELS)
    traffic = rng.lognormal(np.log(LN_TRAFFIC_MEDIAN), LN_TRAFFIC_SD, n)
    shift = rng.uniform(-LN_SHIFT, LN_SHIFT, n)
    silent = rng.random(n) < LN_SILENT
    rate = np.where(silent, 0.0, rng.lognormal(np.log(LN_RATE_MEDIAN), LN_RATE_SD, n))
    k = np.exp(rng.uniform(np.log(LN_K_RANGE[0]), np.log(LN_K_RANGE[1]), n))
    packets_pre = jittered_packets(rng, np.repeat(traffic[:, None], layout.pre_steps, axis=1))
    packets_post = jittered_packets(rng, np.repeat((traffic * (1 + shift))[:, None], steps,
                                                   axis=1))
    scale = np.where(canary, effect, 1.0)
    mean_pre = rate[:, None] * packets_pre
    mean_post = rate[:, None] * packets_post * scale[:, None]

    burst_pre = np.full(n, LN_SILENT_BURST_PROB)
    burst_post = np.minimum(1.0, burst_pre * scale)
    drops_pre = np.concatenate([negative_binomial_window(rng, unit, k)
                                for unit in _window_units(mean_pre, steps)], axis=1)
    silent_bursts(rng, drops_pre, silent, burst_pre)
    drops_post = negative_binomial_window(rng, mean_post, k)
    silent_bursts(rng, drops_post, silent, burst_post)
    mean_pre[silent] = burst_pre[silent, None] * LN_SILENT_BURST_MEAN
    mean_post[silent] = burst_post[silent, None] * LN_SILENT_BURST_MEAN
    truth = {
        "generator": "lognormal_fleet", "effect": effect, "canary": canary,
        "traffic": traffic, "shift": shift, "silent": silent, "rate": rate, "k": k,
        "burst_prob": np.where(silent, burst_post, 0.0), "burst_mean": LN_SILENT_BURST_MEAN,
        "mean_pre": mean_pre, "mean_post": mean_post,
    }
    return FleetSample("lognormal_fleet", layout, _label_names(site, "site"),
                       _label_names(model, "model"), drops_pre, drops_post, packets_pre,
                       packets_post, truth, effect=effect)


# --- generator 2: compound Poisson with Pareto bursts and site-wide episodes ---------------

PB_SITES, PB_MODELS = 3, 2
PB_TRAFFIC_MEDIAN, PB_TRAFFIC_SD = 1.5e5, 0.6
PB_SHIFT = 0.10
PB_ALPHA = 1.5  # Pareto tail index of burst sizes
PB_RATE_SHAPE, PB_RATE_MEAN = 0.6, 0.6  # Gamma burst rate per step over non-silent hosts
PB_SILENT, PB_SILENT_RATE = 0.2, 0.002
PB_EPISODE_PROB = 0.35  # per site and post-window-long unit
PB_EPISODE_MAX_STEPS = 4
PB_EPISODE_RATE = (0.5, 4.0)  # extra bursts per step per host, log-uniform


def pareto_burst_sizes(rng: np.random.Generator, alpha: float, count: int) -> np.ndarray:
    """``count`` burst sizes ``floor(U ** (-1 / alpha))``, U ~ Uniform(0, 1]: integers >= 1
    with ``P(S >= s) = s ** -alpha`` exactly (a discrete Pareto; mean zeta(alpha) for alpha > 1,
    infinite variance for alpha <= 2)."""
    u = 1.0 - rng.random(count)  # (0, 1]
    return np.floor(u ** (-1.0 / alpha))


def compound_sums(rng: np.random.Generator, bursts: np.ndarray, alpha: float) -> np.ndarray:
    """Each cell's drops: the sum of its burst count's Pareto sizes."""
    flat = bursts.ravel()
    sizes = pareto_burst_sizes(rng, alpha, int(flat.sum()))
    cell = np.repeat(np.arange(flat.size), flat)
    return _as_counts(np.bincount(cell, weights=sizes, minlength=flat.size)).reshape(bursts.shape)


def site_spans(rng: np.random.Generator, sites: int, units: int, steps: int, prob: float,
               max_steps: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per site and post-window-long unit, whether a span happens (probability ``prob``), its
    first step (uniform over the unit) and its length (uniform 1..max_steps, cut at the unit's
    end); and each step's membership, shape (sites, units, steps)."""
    happens = rng.random((sites, units)) < prob
    first = rng.integers(0, steps, (sites, units))
    length = rng.integers(1, max_steps + 1, (sites, units))
    index = np.arange(steps)
    inside = ((index >= first[..., None]) & (index < (first + length)[..., None])
              & happens[..., None])
    return happens, first, length, inside


def site_episodes(rng: np.random.Generator, sites: int, units: int,
                  steps: int) -> Dict[str, np.ndarray]:
    """Site-wide episodes per site and post-window-long unit: whether one happens (probability
    PB_EPISODE_PROB), its first step (uniform over the unit), its length (uniform 1..4, cut at
    the unit's end) and its rate of extra bursts per step (log-uniform 0.5..4)."""
    happens, first, length, inside = site_spans(rng, sites, units, steps, PB_EPISODE_PROB,
                                                PB_EPISODE_MAX_STEPS)
    low, high = np.log(PB_EPISODE_RATE[0]), np.log(PB_EPISODE_RATE[1])
    rate = np.exp(rng.uniform(low, high, (sites, units)))
    per_step = np.where(inside, rate[..., None], 0.0).reshape(sites, units * steps)
    return {"happens": happens, "first": first, "length": length, "rate": rate,
            "per_step": per_step}


def pareto_bursts_fleet(rng: np.random.Generator, layout: Layout, effect: float) -> FleetSample:
    """Drops in bursts: a compound Poisson process with Pareto burst sizes, and site-wide
    episodes that add bursts to every host of a site, canary and control alike.

    Hosts: sites ``site0..site2`` and models ``model0..model1`` (spread_labels; the model is a
    label only). Per host h, drawn independently:

    * traffic ``T_h ~ LogNormal(ln 1.5e5, 0.6)`` packets per step before, ``T_h (1 + d_h)``
      after, ``d_h ~ Uniform(-0.10, 0.10)``; a step's packets ``n_hj`` are that level times
      ``exp(Normal(0, 0.05))``, rounded (at least 1); the step's load ``l_hj = n_hj / T_h``;
    * ``silent_h ~ Bernoulli(0.2)``: burst rate ``b_h = 0.002`` per step; otherwise
      ``b_h ~ Gamma(shape 0.6, scale 1.0)`` (mean 0.6 bursts per step).

    Site episodes, per site s and post-window-long unit u (``pre_windows`` units before, one
    after), independently: with probability 0.35 an episode of ``L ~ Uniform{1..4}`` steps from
    a first step uniform over the unit's steps (cut at the unit's end), with extra-burst rate
    ``eta_su = exp(Uniform(ln 0.5, ln 4))`` per step: ``e_hj = eta`` inside it for every host of
    the site, 0 elsewhere.

    Counts. In step j host h has ``N_hj ~ Poisson(b_h * l_hj * E)`` bursts of its own (E =
    ``effect`` in a canary's post window, else 1) plus ``Poisson(e_hj)`` site bursts (load and
    effect do not change them), independently; each burst drops ``S = floor(U^(-1/1.5))``
    packets (pareto_burst_sizes, ``P(S >= s) = s^-1.5``, mean zeta(1.5) = 2.612), all sizes
    independent; the step's drops are the sum. No missing windows.

    Truth: ``traffic``, ``shift``, ``silent``, ``burst_rate`` (``b_h``), ``alpha``,
    ``burst_mean`` (zeta(1.5)), ``episodes`` (site_episodes: ``happens``, ``first``,
    ``length``, ``rate`` per site and unit, units in time order, the post window last),
    ``site_index``; ``bursts_pre/post`` (each step's expected own bursts, effect included),
    ``site_bursts_pre/post`` (expected site bursts), ``mean_pre/post`` (expected drops: their
    sum times zeta(1.5)).
    """
    n, steps, P = layout.hosts, layout.steps, layout.pre_windows
    canary = layout.canary_mask()
    site = spread_labels(rng, layout, PB_SITES)
    model = spread_labels(rng, layout, PB_MODELS)
    traffic = rng.lognormal(np.log(PB_TRAFFIC_MEDIAN), PB_TRAFFIC_SD, n)
    shift = rng.uniform(-PB_SHIFT, PB_SHIFT, n)
    silent = rng.random(n) < PB_SILENT
    rate = np.where(silent, PB_SILENT_RATE,
                    rng.gamma(PB_RATE_SHAPE, PB_RATE_MEAN / PB_RATE_SHAPE, n))
    episodes = site_episodes(rng, PB_SITES, P + 1, steps)
    packets_pre = jittered_packets(rng, np.repeat(traffic[:, None], layout.pre_steps, axis=1))
    packets_post = jittered_packets(rng, np.repeat((traffic * (1 + shift))[:, None], steps,
                                                   axis=1))
    scale = np.where(canary, effect, 1.0)
    own_pre = rate[:, None] * packets_pre / traffic[:, None]
    own_post = rate[:, None] * packets_post / traffic[:, None] * scale[:, None]
    site_pre = episodes["per_step"][site, :layout.pre_steps]
    site_post = episodes["per_step"][site, layout.pre_steps:]

    drops = []
    for own, shared in ((own_pre, site_pre), (own_post, site_post)):
        bursts = rng.poisson(own) + rng.poisson(shared)
        drops.append(compound_sums(rng, bursts, PB_ALPHA))
    burst_mean = float(zeta(PB_ALPHA))  # E[S] = sum over s >= 1 of P(S >= s)
    truth = {
        "generator": "pareto_bursts_fleet", "effect": effect, "canary": canary,
        "traffic": traffic, "shift": shift, "silent": silent, "burst_rate": rate,
        "alpha": PB_ALPHA, "burst_mean": burst_mean, "episodes": episodes, "site_index": site,
        "bursts_pre": own_pre, "bursts_post": own_post,
        "site_bursts_pre": site_pre, "site_bursts_post": site_post,
        "mean_pre": (own_pre + site_pre) * burst_mean,
        "mean_post": (own_post + site_post) * burst_mean,
    }
    return FleetSample("pareto_bursts_fleet", layout, _label_names(site, "site"),
                       _label_names(model, "model"), drops[0], drops[1], packets_pre,
                       packets_post, truth, effect=effect)


# --- generator 3: diurnal traffic, convex drops, missing data ------------------------------

DM_SITES = 4
DM_DAY_STEPS = 288  # a day of 5-minute steps
DM_SITE_OFFSET_STEPS = 24  # two hours between neighbouring sites' days
DM_AMPLITUDE = (0.2, 0.5)
DM_TRAFFIC_MEDIAN, DM_TRAFFIC_SD = 2e5, 0.7
DM_MODEL_RATES = {"modelA": 3e-6, "modelB": 1.2e-5}  # median drops per packet at mean load
DM_RATE_SD = 1.3
DM_CONVEXITY = (1.0, 3.0)  # c_h: the drop rate per packet grows as exp(c_h * (load - 1))
DM_FRAILTY_SD = 1.0  # log-normal per-step multiplier of the intensity (mean 1)
DM_MISSING = 0.03  # share of host windows without data
DM_PARTIAL = 0.04  # share of the other host windows with a gap of consecutive steps


def diurnal_load(t: np.ndarray, amplitude: float, offset: np.ndarray) -> np.ndarray:
    """The fleet's relative load at step ``t`` (steps since midnight at site0) for sites with
    the given offsets: ``1 + amplitude * sin(2 pi (t + offset) / 288)``; shape (sites, t)."""
    return 1.0 + amplitude * np.sin(2 * np.pi * (t[None, :] + offset[:, None]) / DM_DAY_STEPS)


def window_gaps(rng: np.random.Generator, hosts: int, steps: int, share: float,
                missing: np.ndarray) -> np.ndarray:
    """Steps without data: in a share of the windows that are not missing, a run of 1 to
    max(1, steps // 4) consecutive steps (uniform) at a uniform position."""
    gapped = (rng.random(hosts) < share) & ~missing
    length = rng.integers(1, max(1, steps // 4) + 1, hosts)
    first = rng.integers(0, steps - length + 1)
    index = np.arange(steps)
    inside = (index >= first[:, None]) & (index < (first + length)[:, None])
    return inside & gapped[:, None]


def diurnal_missing_fleet(rng: np.random.Generator, layout: Layout,
                          effect: float) -> FleetSample:
    """Diurnal traffic that ramps across the windows, a drop rate that rises faster than load,
    two hardware models with different baselines, missing windows and gaps.

    Fleet: the time of day of the pre window's first step ``t0 ~ Uniform{0..287}`` (5-minute
    steps, 288 a day) and an amplitude ``A ~ Uniform(0.2, 0.5)``. The pre window covers steps
    ``t0 .. t0 + P*K - 1`` (K steps per post window, P = pre_windows), the post window starts
    6 steps after the pre window ends (the change and its reboot). Four sites ``site0..site3``
    whose days are offset by ``24 * s`` steps: site s's load at step t is
    ``D_s(t) = 1 + A sin(2 pi (t + 24 s) / 288)``.

    Per host h (sites and models by spread_labels): model ``modelA`` or ``modelB``; traffic
    ``T_h ~ LogNormal(ln 2e5, 0.7)``; a step's packets ``n_hj = round(T_h * D_s(t_j) *
    exp(Normal(0, 0.05)))`` (at least 1), its load ``l_hj = n_hj / T_h``; drop rate per packet
    at load 1 ``r_h ~ LogNormal(ln r_model, 1.3)``, r_model 3e-6 (modelA) or 1.2e-5 (modelB);
    convexity ``c_h ~ Uniform(1, 3)``.

    Counts. Step j's expected drops ``mu_hj = r_h * n_hj * exp(c_h (l_hj - 1))`` (drops per
    packet rise with load, so drops rise faster than traffic), times ``effect`` in a canary's
    post window; its drops ``Poisson(mu_hj * F_hj)`` with a per-step frailty
    ``F_hj = exp(Normal(-0.5, 1.0))`` (mean 1; variance ``mu + (e - 1) mu^2``), all independent.

    Data: each host window is missing (null) with probability 0.03; of the others 4% have a gap
    (window_gaps): a run of 1..max(1, steps // 4) consecutive steps without data, the
    window's counts those of its other steps, its coverage their share, no per-step drops.

    Truth: ``t0``, ``amplitude``, ``site_offset``, ``site_index``, ``model_index`` (0 = modelA),
    ``traffic``, ``rate``, ``convexity``, ``frailty_sd``, ``load_pre/post`` (``l_hj``),
    ``mean_pre/post`` (``mu_hj``), ``missing_pre/post``, ``gap_pre/post``.
    """
    n, steps = layout.hosts, layout.steps
    canary = layout.canary_mask()
    models = list(DM_MODEL_RATES)
    t0 = int(rng.integers(0, DM_DAY_STEPS))
    amplitude = float(rng.uniform(*DM_AMPLITUDE))
    site = spread_labels(rng, layout, DM_SITES)
    model = spread_labels(rng, layout, len(models))
    traffic = rng.lognormal(np.log(DM_TRAFFIC_MEDIAN), DM_TRAFFIC_SD, n)
    median_rate = np.array([DM_MODEL_RATES[name] for name in models])[model]
    rate = median_rate * np.exp(rng.normal(0.0, DM_RATE_SD, n))
    convexity = rng.uniform(*DM_CONVEXITY, n)
    offset = DM_SITE_OFFSET_STEPS * np.arange(DM_SITES)
    t_pre = t0 + np.arange(layout.pre_steps)
    t_post = t0 + layout.pre_steps + CHANGE_GAP_STEPS + np.arange(steps)
    missing_pre = rng.random(n) < DM_MISSING
    missing_post = rng.random(n) < DM_MISSING
    gap_pre = window_gaps(rng, n, layout.pre_steps, DM_PARTIAL, missing_pre)
    gap_post = window_gaps(rng, n, steps, DM_PARTIAL, missing_post)
    packets, loads, means = [], [], []
    for t, scale in ((t_pre, np.ones(n)), (t_post, np.where(canary, effect, 1.0))):
        level = traffic[:, None] * diurnal_load(t, amplitude, offset)[site]
        counts = jittered_packets(rng, level)
        load = counts / traffic[:, None]
        packets.append(counts)
        loads.append(load)
        means.append(rate[:, None] * counts * np.exp(convexity[:, None] * (load - 1.0))
                     * scale[:, None])
    drops = []
    for mean in means:
        frailty = np.exp(rng.normal(-0.5 * DM_FRAILTY_SD ** 2, DM_FRAILTY_SD, mean.shape))
        drops.append(_as_counts(rng.poisson(mean * frailty)))
    truth = {
        "generator": "diurnal_missing_fleet", "effect": effect, "canary": canary,
        "t0": t0, "amplitude": amplitude, "site_offset": offset, "site_index": site,
        "model_index": model, "traffic": traffic, "rate": rate, "convexity": convexity,
        "frailty_sd": DM_FRAILTY_SD, "load_pre": loads[0], "load_post": loads[1],
        "mean_pre": means[0], "mean_post": means[1], "missing_pre": missing_pre,
        "missing_post": missing_post, "gap_pre": gap_pre, "gap_post": gap_post,
    }
    return FleetSample("diurnal_missing_fleet", layout, _label_names(site, "site"),
                       [models[i] for i in model], drops[0], drops[1], packets[0], packets[1],
                       truth, missing_pre=missing_pre, missing_post=missing_post,
                       gap_pre=gap_pre, gap_post=gap_post, effect=effect)


# --- generator 4: on/off episodes (a hidden two-state Markov chain) ------------------------

MO_SITES = 4
MO_TRAFFIC_MEDIAN, MO_TRAFFIC_SD = 3e5, 0.5
MO_LEVEL = (0.85, 1.15)  # the fleet's traffic after / before
MO_ON_SHARE = (0.5, 2.5)  # Beta parameters of the stationary share of ON steps
MO_ON_SHARE_MAX = 0.6
MO_LEAVE_ON = (0.2, 0.6)  # P(ON -> OFF) per step, uniform over hosts
MO_ON_RATE_MEDIAN, MO_ON_RATE_SD = 20.0, 1.2  # drops per ON step at load 1, log-normal
MO_MISSING = 0.01


def on_off_states(rng: np.random.Generator, on_share: np.ndarray, leave_on: np.ndarray,
                  length: int) -> np.ndarray:
    """A stationary two-state Markov chain per host over ``length`` steps (True = ON):
    the first state ON with probability ``on_share``; then OFF -> ON with probability
    ``a = leave_on * on_share / (1 - on_share)`` and ON -> OFF with ``leave_on``."""
    enter_on = leave_on * on_share / (1.0 - on_share)
    states = np.empty((on_share.size, length), bool)
    states[:, 0] = rng.random(on_share.size) < on_share
    for t in range(1, length):
        u = rng.random(on_share.size)
        states[:, t] = np.where(states[:, t - 1], u >= leave_on, u < enter_on)
    return states


def markov_onoff_fleet(rng: np.random.Generator, layout: Layout, effect: float) -> FleetSample:
    """Drops in on/off episodes: each host's NIC switches between a quiet state (no drops) and
    a dropping one, a hidden two-state Markov chain per host, one step at a time.

    Fleet: traffic level after the change ``L ~ Uniform(0.85, 1.15)`` times the level before,
    for every host. Per host h (sites ``site0..site3`` by spread_labels, one model
    ``model0``): traffic ``T_h ~ LogNormal(ln 3e5, 0.5)`` packets per step before, ``T_h L``
    after; a step's packets ``n_hj`` that level times ``exp(Normal(0, 0.05))``, rounded (at
    least 1), its load ``l_hj = n_hj / T_h``; stationary ON share
    ``pi_h = min(Beta(0.5, 2.5), 0.6)``; ``P(ON -> OFF) = b_h ~ Uniform(0.2, 0.6)`` per step,
    ``P(OFF -> ON) = a_h = b_h pi_h / (1 - pi_h)``; ON rate ``lam_h ~ LogNormal(ln 20, 1.2)``
    drops per ON step at load 1.

    Counts. The chain (on_off_states) starts stationary at the pre window's first step and runs
    through the 6 steps between the windows into the post window. A step's drops are
    ``Poisson(lam_h * l_hj * E)`` when ON (E = ``effect`` in a canary's post window, else 1)
    and 0 when OFF. Each host window is missing (null) with probability 0.01.

    Truth: ``level``, ``traffic``, ``on_share``, ``leave_on``, ``enter_on``, ``on_rate``,
    ``states_pre/post`` (the drawn chain), ``mean_pre/post`` (each step's expected drops over
    the chain's stationary law: ``pi_h lam_h l_hj E``), ``missing_pre/post``.
    """
    n, steps = layout.hosts, layout.steps
    canary = layout.canary_mask()
    level = float(rng.uniform(*MO_LEVEL))
    site = spread_labels(rng, layout, MO_SITES)
    traffic = rng.lognormal(np.log(MO_TRAFFIC_MEDIAN), MO_TRAFFIC_SD, n)
    on_share = np.minimum(rng.beta(*MO_ON_SHARE, n), MO_ON_SHARE_MAX)
    leave_on = rng.uniform(*MO_LEAVE_ON, n)
    on_rate = rng.lognormal(np.log(MO_ON_RATE_MEDIAN), MO_ON_RATE_SD, n)
    missing_pre = rng.random(n) < MO_MISSING
    missing_post = rng.random(n) < MO_MISSING
    states = on_off_states(rng, on_share, leave_on,
                           layout.pre_steps + CHANGE_GAP_STEPS + steps)
    states_pre = states[:, :layout.pre_steps]
    states_post = states[:, layout.pre_steps + CHANGE_GAP_STEPS:]
    packets_pre = jittered_packets(rng, np.repeat(traffic[:, None], layout.pre_steps, axis=1))
    packets_post = jittered_packets(rng, np.repeat(traffic[:, None] * level, steps, axis=1))
    scale = np.where(canary, effect, 1.0)
    on_pre = on_rate[:, None] * packets_pre / traffic[:, None]
    on_post = on_rate[:, None] * packets_post / traffic[:, None] * scale[:, None]
    drops_pre = _as_counts(rng.poisson(on_pre) * states_pre)
    drops_post = _as_counts(rng.poisson(on_post) * states_post)
    truth = {
        "generator": "markov_onoff_fleet", "effect": effect, "canary": canary, "level": level,
        "traffic": traffic, "on_share": on_share, "leave_on": leave_on,
        "enter_on": leave_on * on_share / (1.0 - on_share), "on_rate": on_rate,
        "states_pre": states_pre, "states_post": states_post,
        "mean_pre": on_share[:, None] * on_pre, "mean_post": on_share[:, None] * on_post,
        "missing_pre": missing_pre, "missing_post": missing_post,
    }
    return FleetSample("markov_onoff_fleet", layout, _label_names(site, "site"),
                       ["model0"] * n, drops_pre, drops_post, packets_pre, packets_post, truth,
                       missing_pre=missing_pre, missing_post=missing_post, effect=effect)


# --- generator 5: ring overflow (a backlog above the ring's size is dropped) ---------------

RO_SITES = 3
RO_RING = {"model0": 32, "model1": 64}  # the ring's size: a step's backlog above it is dropped
RO_TRAFFIC_MEDIAN, RO_TRAFFIC_SD = 2.5e5, 0.6
RO_BACKLOG_SHARE, RO_BACKLOG_SD = 0.6, 0.5  # a host's mean backlog at load 1 over its ring
RO_SHAPE = (0.7, 3.0)  # negative-binomial size of a step's backlog, uniform over hosts
RO_LEVEL = (0.9, 1.1)  # the fleet's traffic after / before
RO_SURGE_PROB, RO_SURGE_MAX_STEPS, RO_SURGE_LOAD = 0.3, 3, (1.3, 2.0)
RO_MISSING = 0.02


def overflow_moments(mean: np.ndarray, size: np.ndarray, ring: np.ndarray
                     ) -> Tuple[np.ndarray, np.ndarray]:
    """E[(A - C)+] and E[(A - C)+^2] for a backlog A ~ NB(mean, size) over a ring of C
    (arrays broadcast; C an integer): from the backlog's moments less its part below C."""
    mean, size, ring = np.broadcast_arrays(np.asarray(mean, float), np.asarray(size, float),
                                           np.asarray(ring))
    below = np.arange(int(ring.max()))
    p = (size / (size + np.maximum(mean, 1e-300)))[..., None]
    pmf = nbinom.pmf(below, size[..., None], p)
    short = np.maximum(ring[..., None] - below, 0)  # C - a below the ring, 0 above it
    first = mean - ring + (short * pmf).sum(axis=-1)
    variance = mean + mean ** 2 / size
    second = variance + (mean - ring) ** 2 - (short ** 2 * pmf).sum(axis=-1)
    return first, second


@lru_cache(maxsize=None)
def drain_slowdown(effect: float, ring: int) -> float:
    """The factor g on every backlog that makes the reference host of a ring of this size
    (mean backlog RO_BACKLOG_SHARE * ring at load 1, backlog size 1.5) drop ``effect`` times
    as much: bisection on ln g, g between 1 and effect (the overflow is convex in the mean
    backlog and 0 at 0, so it rises at least as fast as the backlog)."""
    if effect == 1.0:
        return 1.0
    mean = RO_BACKLOG_SHARE * ring
    target = effect * float(overflow_moments(np.array(mean), np.array(1.5), np.array(ring))[0])
    low, high = sorted((0.0, math.log(effect)))
    for _ in range(60):
        middle = 0.5 * (low + high)
        value = float(overflow_moments(np.array(mean * math.exp(middle)), np.array(1.5),
                                       np.array(ring))[0])
        low, high = (middle, high) if value < target else (low, middle)
    return math.exp(0.5 * (low + high))


def site_surges(rng: np.random.Generator, sites: int, units: int, steps: int) -> np.ndarray:
    """Per site and step, the load factor of site-wide traffic surges: per post-window-long
    unit, with probability RO_SURGE_PROB a surge of 1..RO_SURGE_MAX_STEPS steps (uniform, cut
    at the unit's end) from a uniform first step, its load factor Uniform(1.3, 2.0); 1
    elsewhere. Shape (sites, units * steps)."""
    inside = site_spans(rng, sites, units, steps, RO_SURGE_PROB, RO_SURGE_MAX_STEPS)[3]
    factor = rng.uniform(*RO_SURGE_LOAD, (sites, units))
    return np.where(inside, factor[..., None], 1.0).reshape(sites, units * steps)


def ring_overflow_fleet(rng: np.random.Generator, layout: Layout, effect: float) -> FleetSample:
    """Drops as ring overflow: in each step a host's receive backlog peaks at a random level,
    and what the ring cannot hold is dropped. Drops are then a threshold of the load: rare and
    small on most hosts, frequent and large on a few, and far more than proportional to
    traffic; a change that slows the drain raises both how often and how much a host drops.

    Fleet: traffic level after the change ``L ~ Uniform(0.9, 1.1)`` times the level before, for
    every host; per site (``site0..site2``) and post-window-long unit (``pre_windows`` units
    before, one after) site_surges: surges that multiply the site's traffic by 1.3-2.0 for
    1-3 steps. The slowdown ``g = drain_slowdown(effect, C)`` per model.

    Per host h (sites and models by spread_labels): model ``model0`` (ring ``C = 32``) or
    ``model1`` (``C = 64``); traffic ``T_h ~ LogNormal(ln 2.5e5, 0.6)`` packets per step
    before; a step's packets ``n_hj = round(T_h * level_j * surge_sj * exp(Normal(0, 0.05)))``
    (at least 1; level_j is 1 before and L after), its load ``l_hj = n_hj / T_h``; mean backlog
    at load 1 ``B_h = C * LogNormal(ln 0.6, 0.5)``; backlog size ``k_h ~ Uniform(0.7, 3)``.

    Counts. Step j's backlog ``A_hj ~ NB(mean B_h * l_hj * G, size k_h)`` (variance
    ``mu + mu^2 / k_h``), G = g in a canary's post window, else 1; its drops
    ``max(0, A_hj - C)``, all steps independent. The effect is on the drain, so a canary's
    expected drops rise by ``effect`` at the reference backlog (60% of the ring at load 1,
    size 1.5), by more on a host that seldom overflows and by less on one that often does.
    Each host window is missing (null) with probability 0.02.

    Truth: ``level``, ``surge`` (per site and step, units in time order, the post window
    last), ``site_index``, ``ring`` (C per host), ``slowdown`` (g per host: 1 for controls),
    ``traffic``, ``backlog`` (``B_h``), ``backlog_size`` (``k_h``), ``load_pre/post``
    (``l_hj``), ``mean_pre/post`` (each step's expected drops, ``E[(A - C)+]``),
    ``missing_pre/post``.
    """
    n, steps, P = layout.hosts, layout.steps, layout.pre_windows
    canary = layout.canary_mask()
    models = list(RO_RING)
    level = float(rng.uniform(*RO_LEVEL))
    site = spread_labels(rng, layout, RO_SITES)
    model = spread_labels(rng, layout, len(models))
    ring = np.array([RO_RING[name] for name in models])[model]
    traffic = rng.lognormal(np.log(RO_TRAFFIC_MEDIAN), RO_TRAFFIC_SD, n)
    backlog = ring * rng.lognormal(np.log(RO_BACKLOG_SHARE), RO_BACKLOG_SD, n)
    size = rng.uniform(*RO_SHAPE, n)
    missing_pre = rng.random(n) < RO_MISSING
    missing_post = rng.random(n) < RO_MISSING
    surge = site_surges(rng, RO_SITES, P + 1, steps)
    slowdown = np.where(canary, np.array([drain_slowdown(effect, RO_RING[name])
                                          for name in models])[model], 1.0)
    packets, loads, means, drops = [], [], [], []
    for factor, scale, span in ((1.0, np.ones(n), slice(0, layout.pre_steps)),
                                (level, slowdown, slice(layout.pre_steps, None))):
        counts = jittered_packets(rng, traffic[:, None] * factor * surge[site, span])
        load = counts / traffic[:, None]
        mean = backlog[:, None] * load * scale[:, None]
        packets.append(counts)
        loads.append(load)
        means.append(overflow_moments(mean, size[:, None], ring[:, None])[0])
        backlogs = rng.negative_binomial(size[:, None], size[:, None] / (size[:, None] + mean))
        drops.append(_as_counts(np.maximum(backlogs - ring[:, None], 0)))
    truth = {
        "generator": "ring_overflow_fleet", "effect": effect, "canary": canary,
        "level": level, "surge": surge, "site_index": site, "ring": ring,
        "slowdown": slowdown, "traffic": traffic, "backlog": backlog, "backlog_size": size,
        "load_pre": loads[0], "load_post": loads[1], "mean_pre": means[0],
        "mean_post": means[1], "missing_pre": missing_pre, "missing_post": missing_post,
    }
    return FleetSample("ring_overflow_fleet", layout, _label_names(site, "site"),
                       [models[i] for i in model], drops[0], drops[1], packets[0], packets[1],
                       truth, missing_pre=missing_pre, missing_post=missing_post, effect=effect)


GENERATORS: Dict[str, Generator] = {
    "lognormal_fleet": Generator(
        "lognormal_fleet", "log-normal host rates (sd 2.0), negative-binomial windows "
        "(k 0.8-5), 20% mostly silent hosts, traffic shifts up to +-15%", lognormal_fleet),
    "pareto_bursts_fleet": Generator(
        "pareto_bursts_fleet", "compound Poisson bursts of Pareto size (alpha 1.5), Gamma "
        "burst rates, 20% silent hosts, additive site-wide episodes", pareto_bursts_fleet),
    "diurnal_missing_fleet": Generator(
        "diurnal_missing_fleet", "diurnal traffic ramp across the windows, drops convex in "
        "load, two models (x4 apart), Poisson-log-normal steps, missing windows and gaps",
        diurnal_missing_fleet),
    "markov_onoff_fleet": Generator(
        "markov_onoff_fleet", "on/off drop episodes (a hidden two-state Markov chain per "
        "host), Poisson drops when on, a fleet traffic change of +-15%", markov_onoff_fleet),
    "ring_overflow_fleet": Generator(
        "ring_overflow_fleet", "drops as the overflow of a negative-binomial backlog over the "
        "ring's size (two sizes), site-wide traffic surges, a change that slows the drain",
        ring_overflow_fleet),
}

HELD_OUT: Dict[str, str] = {
    "ring_overflow_fleet": "drops as a threshold of a random backlog and a change on the "
                           "drain: neither the judge's bursts nor any tuning fleet's model",
}
