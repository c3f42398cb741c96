"""The yardstick for the canary judge: the most powerful test a scenario allows.

For a simple alternative (the canaries' drop rate times R) against no change, the
Neyman-Pearson lemma makes the likelihood-ratio test the most powerful at any false-alarm level.
With the generating model known, the likelihood of a host's data given the effect is its
likelihood given the host's own unknowns (rate, dispersion, load sensitivity, on/off chain, ...)
integrated over their prior: a Bayes factor per host, ``log p(data | R) - log p(data | 1)``.
Hosts are independent given the fleet-wide draws, so the batch's statistic is the sum over the
canaries, and the test rejects when it exceeds a threshold set on batches without a change
(``threshold``): at the judge's own false-alarm level, its power is the yardstick.

What the yardstick knows beyond the data: the model with its parameters, and the fleet-wide
draws every host shares (site-wide bursts and episodes, a hardware model's drift, the daily
load curve, each host's traffic level); each host's own unknowns are integrated out on a grid.
Knowing the fleet-wide draws can only add power, so the yardstick is at least as strong as the
best test on the data alone: the judge's power over it is a lower bound on the judge's
efficiency. Where a model makes the likelihood of a window's total costly, a moment-matched
negative binomial stands in for it (stated per model below); that loses a little power, never
gains any.

One class per model, each with ``log_marginals(..., effects) -> (len(effects),)``: the sum over
the canaries of each canary's log marginal likelihood at each effect (a host without a post
window adds nothing). ``statistic`` turns them into the log Bayes factor of R against 1.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Dict, Sequence, Tuple

import numpy as np
from scipy.signal import fftconvolve
from scipy.special import betaincinv, gammaln, logsumexp, xlogy
from scipy.stats import nbinom, norm

TINY = 1e-300


def nb_logpmf(x: np.ndarray, mean: np.ndarray, size: np.ndarray) -> np.ndarray:
    """log NegativeBinomial(x; mean, size): variance mean + mean^2 / size."""
    mean = np.maximum(mean, TINY)
    return (gammaln(x + size) - gammaln(size) - gammaln(x + 1.0)
            + size * (np.log(size) - np.log(size + mean)) + xlogy(x, mean / (size + mean)))


def poisson_logpmf(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    mean = np.maximum(mean, TINY)
    return xlogy(x, mean) - mean - gammaln(x + 1.0)


def statistic(log_marginals: np.ndarray, effects: Sequence[float], effect: float) -> float:
    """The batch's log Bayes factor of ``effect`` against no change."""
    index = list(effects)
    return float(log_marginals[index.index(effect)] - log_marginals[index.index(1.0)])


def threshold(null_statistics: Sequence[float], level: float) -> float:
    """The smallest threshold whose false-alarm rate on these no-change batches is at most
    ``level`` (reject when the statistic is above it)."""
    values = np.sort(np.asarray(null_statistics, float))
    allowed = int(math.floor(level * values.size))  # batches that may exceed it
    return float(values[values.size - allowed - 1]) if allowed < values.size else -np.inf


def power(statistics: Sequence[float], limit: float) -> float:
    return float(np.mean(np.asarray(statistics, float) > limit))


def _grid(lo: float, hi: float, points: int) -> Tuple[np.ndarray, float]:
    values = np.linspace(lo, hi, points)
    return values, float(values[1] - values[0])


def _midpoints(lo: float, hi: float, count: int) -> np.ndarray:
    return lo + (hi - lo) * (np.arange(count) + 0.5) / count


# --- bench_judge's own model ---------------------------------------------------------------

class BenchYardstick:
    """bench_judge.simulate's model. Per host: the drop level ``mu`` (log-normal, or a floor
    times a half-normal factor), the traffic level ``base`` (log-normal; idle hosts uniform
    50-700, whose log is taken here as normal with that law's mean and sd), the load exponent
    ``gamma`` (uniform 0.5-1.5), silent or not, a condition per window (log-normal, sd
    ``drift``) and incidents. A step's intensity is
    ``mu / STEPS * c_w * (packets / base)^gamma * site multiplier * model change * E``, so with
    ``u = ln mu - gamma ln base`` it is ``exp(u) / STEPS * c_w * packets^gamma * ...``: the grid
    runs over ``u`` (its prior the convolution of the two, per gamma) and 5 values of gamma.

    A window's total given ``u`` and gamma is a compound Poisson sum of geometric bursts
    (Polya-Aeppli), times the window's log-normal condition, plus an incident (a geometric
    jump of mean 30) with the scenario's probability: each part a negative binomial with its
    exact mean and variance. Per-step drops add nothing about the effect beyond the total (the
    effect scales every step alike), so the yardstick reads window totals. Site multipliers
    and model changes are the fleet-wide draws it is given."""

    GAMMAS = 5
    POINTS = 400
    BASE_MEDIAN, BASE_SD = 2e5, 0.7
    IDLE_SHARE, IDLE_LOG_MEAN, IDLE_LOG_SD = 0.02, 5.75, 0.55
    SILENT_LEVEL = 0.02
    INCIDENT_MEAN, INCIDENT_VAR = 30.0, 870.0

    def __init__(self, scenario: Any, steps: int) -> None:
        self.sc = scenario
        self.steps = steps
        self.gammas = _midpoints(0.5, 1.5, self.GAMMAS)
        grids, weights = [], []
        for gamma in self.gammas:
            u, log_prior = self._prior(gamma)
            grids.append(u)
            weights.append(log_prior)
        self.u = np.stack(grids)  # (gammas, points)
        self.log_prior = np.stack(weights) - np.log(self.GAMMAS)

    def _components(self, gamma: float) -> list:
        """(weight, kind, centre, sd): the prior of u as a mixture (silent or not, idle or
        not); kind "floor" is a floor times exp(|N(0, log_sd)|)."""
        sc = self.sc
        parts = []
        for idle, idle_weight in ((False, 1 - self.IDLE_SHARE), (True, self.IDLE_SHARE)):
            base_mean = self.IDLE_LOG_MEAN if idle else math.log(self.BASE_MEDIAN)
            base_sd = gamma * (self.IDLE_LOG_SD if idle else self.BASE_SD)
            for silent, silent_weight in ((False, 1 - sc.silent), (True, sc.silent)):
                if silent_weight <= 0:
                    continue
                weight = idle_weight * silent_weight
                if silent:
                    parts.append((weight, "normal",
                                  math.log(self.SILENT_LEVEL) - gamma * base_mean, base_sd))
                elif sc.floor > 0:
                    parts.append((weight, "floor", math.log(sc.floor) - gamma * base_mean,
                                  base_sd))
                else:
                    parts.append((weight, "normal", math.log(sc.median) - gamma * base_mean,
                                  math.hypot(sc.log_sd, base_sd)))
        return parts

    def _prior(self, gamma: float) -> Tuple[np.ndarray, np.ndarray]:
        parts = self._components(gamma)
        lo = min(c - 7 * sd for _, _, c, sd in parts)
        hi = max(c + 7 * sd + (7 * self.sc.log_sd if k == "floor" else 0)
                 for _, k, c, sd in parts)
        u, du = _grid(lo, hi, self.POINTS)
        density = np.zeros_like(u)
        for weight, kind, centre, sd in parts:
            if kind == "normal":
                density += weight * norm.pdf(u, centre, sd)
            else:  # |A| + B, A ~ N(0, log_sd), B ~ N(0, sd): a skew-normal
                s1, s2 = self.sc.log_sd, sd
                s = math.hypot(s1, s2)
                y = u - centre
                density += weight * 2.0 / s * norm.pdf(y / s) * norm.cdf(y * s1 / (s2 * s))
        return u, np.log(np.maximum(density * du, TINY))

    def _window_loglik(self, x: np.ndarray, m0: np.ndarray) -> np.ndarray:
        """log p(total x | expected drops m0 at condition 1): negative binomials of the
        compound Poisson's and the condition's mean and variance, with and without an
        incident."""
        sc = self.sc
        b, s2 = sc.burst_mean, sc.drift ** 2
        mean = m0 * math.exp(s2 / 2)
        var = mean * (2 * b - 1) + m0 ** 2 * (math.exp(2 * s2) - math.exp(s2))
        plain = nb_logpmf(x, mean, mean ** 2 / np.maximum(var - mean, TINY))
        if sc.incident <= 0:
            return plain
        mean2 = mean + self.INCIDENT_MEAN
        var2 = var + self.INCIDENT_VAR
        hit = nb_logpmf(x, mean2, mean2 ** 2 / (var2 - mean2))
        return np.logaddexp(plain + math.log1p(-sc.incident), hit + math.log(sc.incident))

    def log_marginals(self, sim: Dict[str, np.ndarray], rep: int, m: int,
                      effects: Sequence[float], post: int = 1) -> np.ndarray:
        P = int(sim["pre_windows"])
        windows = list(range(P)) + [P - 1 + post]
        packets = sim["packets"][rep, :m][:, windows]  # (m, W, steps)
        x = sim["drops"][rep, :m][:, windows].sum(axis=-1)  # (m, W)
        have = ~sim["missing"][rep, :m][:, windows]
        multiplier = sim["site_multiplier"][rep, :m][:, windows]
        change = np.ones((m, len(windows)))
        change[:, P:] = sim["model_change"][rep, :m, None]
        # sum over steps of packets^gamma times the site multiplier: (m, gammas, W)
        load = (packets[:, None] ** self.gammas[None, :, None, None]
                * multiplier[:, None]).sum(axis=-1) * change[:, None, :]
        m0 = (np.exp(self.u)[None, :, :, None] / self.steps) * load[:, :, None, :]
        pre = (self._window_loglik(x[:, None, None, :P], m0[..., :P])
               * have[:, None, None, :P]).sum(axis=-1)
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            ll = self._window_loglik(x[:, None, None, P], m0[..., P] * effect) * have[:, None,
                                                                                      None, P]
            out[i] = logsumexp(self.log_prior[None] + pre + ll, axis=(1, 2)).sum()
        return out


# --- fleet_generators: lognormal_fleet ------------------------------------------------------

class LognormalYardstick:
    """lognormal_fleet: per host silent or not; a rate ``r`` (log-normal) and a dispersion
    ``k`` (log-uniform) integrated on a grid. A non-silent host's post-window-long units are
    negative binomials (exact); with per-step drops the pre window's units are read one by one,
    with totals only the pre window's total is a negative binomial of size ``pre_windows * k``
    (exact when its units carry equal traffic, within the 5% packet jitter here). A silent
    host's windows: each step a geometric burst with probability q, exact in both forms. How
    a unit's drops split over its steps says nothing of r or the effect and is not read."""

    POINTS, DISPERSIONS = 300, 6

    def __init__(self) -> None:
        import fleet_generators as fg
        self.fg = fg
        centre, sd = math.log(fg.LN_RATE_MEDIAN), fg.LN_RATE_SD
        self.u, du = _grid(centre - 6 * sd, centre + 6 * sd, self.POINTS)
        low, high = (math.log(v) for v in fg.LN_K_RANGE)
        self.k = np.exp(_midpoints(low, high, self.DISPERSIONS))
        self.log_prior = (np.log(norm.pdf(self.u, centre, sd) * du)
                          - math.log(self.DISPERSIONS) + math.log1p(-fg.LN_SILENT))

    def _silent(self, x: np.ndarray, q: np.ndarray, totals_only: bool,
                steps: int) -> np.ndarray:
        """log p of silent windows: x (hosts, steps) per step, or (hosts,) totals."""
        p = 1.0 / self.fg.LN_SILENT_BURST_MEAN
        if not totals_only:
            burst = np.log(q)[:, None] + math.log(p) + (x - 1) * math.log1p(-p)
            return np.where(x == 0, np.log1p(-q)[:, None], burst).sum(axis=1)
        bursts = np.arange(steps + 1)[None, :]
        log_binom = (gammaln(steps + 1.0) - gammaln(bursts + 1.0) - gammaln(steps - bursts + 1.0)
                     + xlogy(bursts, q[:, None]) + xlogy(steps - bursts, 1 - q[:, None]))
        xx = x[:, None]
        sizes = (gammaln(np.maximum(xx, 1)) - gammaln(np.maximum(bursts, 1))
                 - gammaln(np.maximum(xx - bursts + 1, 1)) + bursts * math.log(p)
                 + (xx - bursts) * math.log1p(-p))
        sizes = np.where(bursts == 0, np.where(xx == 0, 0.0, -np.inf),
                         np.where(xx >= bursts, sizes, -np.inf))
        return logsumexp(log_binom + sizes, axis=1)

    def log_marginals(self, fleet: Any, totals_only: bool,
                      effects: Sequence[float]) -> np.ndarray:
        fg, lay = self.fg, fleet.layout
        m, steps, P = lay.canaries, lay.steps, lay.pre_windows
        r = np.exp(self.u)[None, :, None]  # (1, points, 1)
        k = self.k[None, None, :]  # (1, 1, dispersions)
        if totals_only:
            units_x = fleet.drops_pre[:m].sum(axis=1, keepdims=True)
            units_n = fleet.packets_pre[:m].sum(axis=1, keepdims=True)
            size = P * k
        else:
            units_x = fleet.drops_pre[:m].reshape(m, P, steps).sum(axis=2)
            units_n = fleet.packets_pre[:m].reshape(m, P, steps).sum(axis=2)
            size = k
        pre = sum(nb_logpmf(units_x[:, u, None, None], r * units_n[:, u, None, None], size)
                  for u in range(units_x.shape[1]))
        post_x = fleet.drops_post[:m].sum(axis=1)[:, None, None]
        post_n = fleet.packets_post[:m].sum(axis=1)[:, None, None]
        q = np.full(m, fg.LN_SILENT_BURST_PROB)
        silent_pre = (self._silent(fleet.drops_pre[:m].sum(axis=1), q, True, lay.pre_steps)
                      if totals_only else self._silent(fleet.drops_pre[:m], q, False, 0))
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            busy = self.log_prior[None, :, None] + pre + nb_logpmf(post_x, r * post_n * effect,
                                                                  k)
            qe = np.minimum(1.0, q * effect)
            silent = silent_pre + (self._silent(fleet.drops_post[:m].sum(axis=1), qe, True,
                                                steps)
                                   if totals_only else self._silent(fleet.drops_post[:m], qe,
                                                                    False, 0))
            host = np.logaddexp(logsumexp(busy, axis=(1, 2)), silent + math.log(fg.LN_SILENT))
            out[i] = host.sum()
        return out


# --- fleet_generators: pareto_bursts_fleet --------------------------------------------------

@lru_cache(maxsize=4)
def compound_pareto_table(alpha: float, x_max: int = 16384, lam_min: float = 1e-6,
                          lam_max: float = 600.0, spacing: float = 0.025,
                          size: int = 1 << 17) -> Tuple[np.ndarray, float, float]:
    """log P(X = x) of a compound Poisson sum of discrete Pareto sizes (P(S >= s) = s^-alpha)
    for x = 0..x_max, at rates exp(ln lam_min + i * spacing) up to lam_max: rows by the
    characteristic function (FFT over ``size`` points, the size law cut there)."""
    s = np.arange(size, dtype=float)
    sizes = np.zeros(size)
    sizes[1:] = s[1:] ** -alpha - (s[1:] + 1) ** -alpha
    transform = np.fft.rfft(sizes)
    rows = int(math.ceil(math.log(lam_max / lam_min) / spacing)) + 1
    table = np.empty((rows, x_max + 1), np.float32)
    for i in range(rows):
        lam = lam_min * math.exp(i * spacing)
        pmf = np.fft.irfft(np.exp(lam * (transform - 1.0)), size)[:x_max + 1]
        # at least one burst of the whole size: a floor that holds where the FFT's rounding
        # (about 1e-16) is larger than the probability
        one_burst = lam * math.exp(-lam) * sizes[:x_max + 1]
        table[i] = np.log(np.maximum(pmf, np.maximum(one_burst, 1e-300)))
    return table, math.log(lam_min), spacing


class ParetoYardstick:
    """pareto_bursts_fleet: per host silent (burst rate 0.002) or a burst rate ``b`` (Gamma
    0.6, mean 0.6) on a grid. A step's drops are a compound Poisson sum of Pareto(1.5) sizes at
    rate ``b * load * E + site episode rate``, exact (compound_pareto_table; beyond its largest
    count, one big burst: rate times the size's probability). With per-step drops each step is
    read; with totals only, each window's total at the summed rate. The site episodes and each
    host's traffic level (its load) are the fleet-wide draws it is given."""

    POINTS = 300

    def __init__(self) -> None:
        import fleet_generators as fg
        self.fg = fg
        self.alpha = fg.PB_ALPHA
        self.table, self.log_lam_min, self.spacing = compound_pareto_table(self.alpha)
        shape, scale = fg.PB_RATE_SHAPE, fg.PB_RATE_MEAN / fg.PB_RATE_SHAPE
        self.u, du = _grid(-16.0, math.log(30.0), self.POINTS)
        log_density = (shape * self.u - np.exp(self.u) / scale - gammaln(shape)
                       - shape * math.log(scale))
        self.log_prior = log_density + math.log(du) + math.log1p(-fg.PB_SILENT)

    def logpmf(self, x: np.ndarray, lam: np.ndarray) -> np.ndarray:
        x, lam = np.broadcast_arrays(x, lam)
        position = (np.log(np.maximum(lam, TINY)) - self.log_lam_min) / self.spacing
        last = self.table.shape[0] - 1
        inside = (position >= 0) & (position < last)
        row = np.clip(np.floor(position).astype(np.int64), 0, last - 1)
        frac = np.clip(position - row, 0.0, 1.0)
        x_max = self.table.shape[1] - 1
        col = np.minimum(x, x_max).astype(np.int64)
        table = ((1 - frac) * self.table[row, col] + frac * self.table[row + 1, col])
        big = np.maximum(x, 1).astype(float)
        log_size = np.log(np.maximum(big ** -self.alpha - (big + 1) ** -self.alpha, TINY))
        one_burst = np.log(np.maximum(lam, TINY)) + log_size - lam
        small = np.where(x == 0, -lam, one_burst)  # rates below the table: at most one burst
        value = np.where(inside, table, small)
        return np.where(x > x_max, np.log(np.maximum(lam, TINY)) + log_size, value)

    def log_marginals(self, fleet: Any, totals_only: bool,
                      effects: Sequence[float]) -> np.ndarray:
        fg, m = self.fg, fleet.layout.canaries
        truth = fleet.truth
        traffic = truth["traffic"][:m, None]
        rates = np.concatenate([np.exp(self.u), [fg.PB_SILENT_RATE]])
        log_prior = np.concatenate([self.log_prior, [math.log(fg.PB_SILENT)]])

        def window(drops: np.ndarray, packets: np.ndarray, episode: np.ndarray,
                   effect: float) -> np.ndarray:
            lam = (rates[None, :, None] * (packets / traffic)[:, None, :] * effect
                   + episode[:m, None, :])
            if totals_only:
                return self.logpmf(drops[:m].sum(axis=1)[:, None], lam.sum(axis=2))
            return self.logpmf(drops[:m, None, :], lam).sum(axis=2)

        pre = window(fleet.drops_pre, fleet.packets_pre[:m], truth["site_bursts_pre"], 1.0)
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            post = window(fleet.drops_post, fleet.packets_post[:m], truth["site_bursts_post"],
                          effect)
            out[i] = logsumexp(log_prior[None] + pre + post, axis=1).sum()
        return out


# --- fleet_generators: diurnal_missing_fleet ------------------------------------------------

@lru_cache(maxsize=2)
def poisson_lognormal_table(sigma: float, x_max: int = 400, lo: float = -24.0,
                            hi: float = 14.0, spacing: float = 0.02
                            ) -> Tuple[np.ndarray, float, float]:
    """log P(X = x), X ~ Poisson(mu * F), F = exp(Normal(-sigma^2 / 2, sigma)), for x =
    0..x_max at ln mu = lo + i * spacing up to hi: each x's Poisson likelihood over the log
    intensity convolved with the normal kernel (trapezoid on the grid)."""
    pad = 9 * sigma
    nu = np.arange(lo - pad, hi + pad + spacing / 2, spacing)
    offsets = np.arange(-pad, pad + spacing / 2, spacing)
    kernel = norm.pdf(offsets, -sigma ** 2 / 2, sigma) * spacing  # density of ln F
    rows = int(round((hi - lo) / spacing)) + 1
    table = np.empty((rows, x_max + 1))
    for x in range(x_max + 1):
        poisson = np.exp(x * nu - np.exp(nu) - gammaln(x + 1.0))
        # P(x | ln mu = lo + i h) = sum over offsets o of poisson(lo + i h + o) * kernel(o)
        full = fftconvolve(poisson, kernel[::-1], mode="valid")
        table[:, x] = np.log(np.maximum(full[:rows], TINY))
    return table, lo, spacing


class DiurnalYardstick:
    """diurnal_missing_fleet: per host a rate ``r`` (log-normal about its model's median, the
    model read from its label) and a convexity ``c`` (uniform 1-3) on a grid; each step
    Poisson-log-normal with mean ``r * packets * exp(c (load - 1)) * E``, exact with per-step
    drops (poisson_lognormal_table; above its largest count, the log-normal density of
    count / mean). A window with totals only, or with a gap (its covered steps), is read as a
    negative binomial of its total's exact mean and variance. A missing window is left out.
    Each step's load (the daily curve and the host's traffic level) is the fleet-wide draw it
    is given."""

    POINTS, CONVEXITIES = 200, 5

    def __init__(self) -> None:
        import fleet_generators as fg
        self.fg = fg
        self.sigma = fg.DM_FRAILTY_SD
        self.table, self.lo, self.spacing = poisson_lognormal_table(self.sigma)
        sd = fg.DM_RATE_SD
        self.z, dz = _grid(-6.5 * sd, 6.5 * sd, self.POINTS)
        self.c = _midpoints(*fg.DM_CONVEXITY, self.CONVEXITIES)
        self.log_prior = (np.log(norm.pdf(self.z, 0, sd) * dz)[:, None]
                          - math.log(self.CONVEXITIES))  # (points, convexities)

    def step_logpmf(self, x: np.ndarray, log_mean: np.ndarray) -> np.ndarray:
        x, log_mean = np.broadcast_arrays(x, log_mean)
        last = self.table.shape[0] - 1
        position = np.clip((log_mean - self.lo) / self.spacing, 0, last - 1e-9)
        row = np.floor(position).astype(np.int64)
        frac = position - row
        x_max = self.table.shape[1] - 1
        col = np.minimum(x, x_max).astype(np.int64)
        value = (1 - frac) * self.table[row, col] + frac * self.table[np.minimum(row + 1, last),
                                                                      col]
        big = np.maximum(x, 1).astype(float)
        lognormal = (norm.logpdf(np.log(big) - log_mean, -self.sigma ** 2 / 2, self.sigma)
                     - np.log(big))
        return np.where(x > x_max, lognormal, value)

    def _window(self, drops: np.ndarray, log_mean: np.ndarray, missing: np.ndarray,
                gap: np.ndarray, totals_only: bool) -> np.ndarray:
        """(hosts, points, convexities) log-likelihood of one window; log_mean (hosts, points,
        convexities, steps)."""
        covered = ~gap[:, None, None, :]
        mean = np.where(covered, np.exp(log_mean), 0.0).sum(axis=-1)
        spread = math.exp(self.sigma ** 2) - 1
        var = mean + spread * np.where(covered, np.exp(2 * log_mean), 0.0).sum(axis=-1)
        total = np.where(gap, 0, drops).sum(axis=1)[:, None, None]
        as_total = nb_logpmf(total, mean, mean ** 2 / np.maximum(var - mean, TINY))
        if totals_only:
            value = as_total
        else:
            steps = self.step_logpmf(drops[:, None, None, :], log_mean).sum(axis=-1)
            value = np.where(gap.any(axis=1)[:, None, None], as_total, steps)
        return np.where(missing[:, None, None], 0.0, value)

    def log_marginals(self, fleet: Any, totals_only: bool,
                      effects: Sequence[float]) -> np.ndarray:
        fg, m, truth = self.fg, fleet.layout.canaries, fleet.truth
        medians = np.array(list(fg.DM_MODEL_RATES.values()))[truth["model_index"][:m]]
        log_rate = np.log(medians)[:, None] + self.z[None, :]  # (m, points)

        def log_mean(packets: np.ndarray, load: np.ndarray, effect: float) -> np.ndarray:
            return (log_rate[:, :, None, None] + np.log(packets[:m])[:, None, None, :]
                    + self.c[None, None, :, None] * (load[:m] - 1.0)[:, None, None, :]
                    + math.log(effect))

        pre = self._window(fleet.drops_pre[:m], log_mean(fleet.packets_pre, truth["load_pre"],
                                                         1.0),
                           fleet.missing_pre[:m], fleet.gap_pre[:m], totals_only)
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            post = self._window(fleet.drops_post[:m],
                                log_mean(fleet.packets_post, truth["load_post"], effect),
                                fleet.missing_post[:m], fleet.gap_post[:m], totals_only)
            out[i] = logsumexp(self.log_prior[None] + pre + post, axis=(1, 2)).sum()
        return out


# --- fleet_generators: markov_onoff_fleet ---------------------------------------------------

class MarkovYardstick:
    """markov_onoff_fleet: per host the ON share ``pi`` (Beta(0.5, 2.5) capped at 0.6; 12
    quantile points), the leaving rate ``b`` (uniform 0.2-0.6; 3 points) and the ON rate
    ``lam`` (log-normal; 61 points about the host's own estimate, or over the prior for a host
    with few drops). With per-step drops: the forward algorithm over the pre window, the 6
    steps between (unobserved) and the post window, exact. With totals only: each window's
    total given the number of ON steps in it (its law from the chain, started stationary), the
    pre and post windows taken as independent (they share the chain across 6 steps). Each
    host's traffic level (its load) is the fleet-wide draw it is given."""

    SHARES, LEAVES, POINTS = 12, 3, 61

    def __init__(self) -> None:
        import fleet_generators as fg
        self.fg = fg
        a, b = fg.MO_ON_SHARE
        self.pi = np.minimum(betaincinv(a, b, _midpoints(0.0, 1.0, self.SHARES)),
                             fg.MO_ON_SHARE_MAX)
        self.leave = _midpoints(*fg.MO_LEAVE_ON, self.LEAVES)
        share, leave = np.meshgrid(self.pi, self.leave, indexing="ij")
        self.share = share.ravel()  # (chains,)
        self.leave_on = leave.ravel()
        self.enter_on = self.leave_on * self.share / (1 - self.share)

    def _rate_grid(self, drops_pre: np.ndarray, drops_post: np.ndarray, load_pre: np.ndarray,
                   load_post: np.ndarray, effect: float) -> Tuple[np.ndarray, np.ndarray]:
        """Per host a grid of ln lam and its log prior weights (hosts, points)."""
        fg = self.fg
        centre, sd = math.log(fg.MO_ON_RATE_MEDIAN), fg.MO_ON_RATE_SD
        total = drops_pre.sum(axis=1) + drops_post.sum(axis=1)
        exposure = ((load_pre * (drops_pre > 0)).sum(axis=1)
                    + effect * (load_post * (drops_post > 0)).sum(axis=1))
        estimate = np.log((total + 0.5) / np.maximum(exposure, 0.5))
        half = np.where(total >= 30, 8.0 / np.sqrt(np.maximum(total, 1)), 7 * sd)
        lo = np.where(total >= 30, estimate - half, centre - half)
        hi = np.where(total >= 30, estimate + half, centre + half)
        lo, hi = np.maximum(lo, centre - 7 * sd), np.minimum(hi, centre + 7 * sd)
        hi = np.maximum(hi, lo + 1e-3)
        step = (hi - lo) / (self.POINTS - 1)
        grid = lo[:, None] + step[:, None] * np.arange(self.POINTS)[None, :]
        weights = norm.logpdf(grid, centre, sd) + np.log(step)[:, None]
        return grid, weights

    def _emission(self, drops: np.ndarray, lam: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """log p(step | OFF), (hosts, 1, 1, steps), and log p(step | ON), (hosts, points, 1,
        steps): lam (hosts, points, 1, steps) is the ON step's expected drops."""
        off = np.where(drops == 0, 0.0, -np.inf)[:, None, None, :]
        on = poisson_logpmf(drops[:, None, None, :], lam)
        return off, on

    def _forward(self, off: np.ndarray, on: np.ndarray, start: np.ndarray,
                 log_scale: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The chain's forward pass: ``start`` (..., 2) the state law before the first step's
        emission; returns the law after the last step (normalised) and the log-likelihood."""
        state = start
        a, b = self.enter_on[None, None, :], self.leave_on[None, None, :]
        for t in range(on.shape[-1]):
            if t > 0:
                state = np.stack([state[..., 0] * (1 - a) + state[..., 1] * b,
                                  state[..., 0] * a + state[..., 1] * (1 - b)], axis=-1)
            peak = np.maximum(off[..., t], on[..., t])
            weighted = np.stack([state[..., 0] * np.exp(off[..., t] - peak),
                                 state[..., 1] * np.exp(on[..., t] - peak)], axis=-1)
            norm_ = weighted.sum(axis=-1)
            log_scale = log_scale + np.log(np.maximum(norm_, TINY)) + peak
            state = weighted / np.maximum(norm_, TINY)[..., None]
        return state, log_scale

    def _after(self, state: np.ndarray, steps: int) -> np.ndarray:
        """The state law ``steps`` transitions later (two-state chain, closed form)."""
        a, b = self.enter_on[None, None, :], self.leave_on[None, None, :]
        pi = a / (a + b)
        decay = (1 - a - b) ** steps
        on = pi + (state[..., 1] - pi) * decay
        return np.stack([1 - on, on], axis=-1)

    @staticmethod
    @lru_cache(maxsize=64)
    def _on_counts(share: float, leave: float, steps: int) -> np.ndarray:
        """P(K ON steps among ``steps``), the chain started stationary."""
        enter = leave * share / (1 - share)
        law = np.zeros((steps + 1, 2))
        law[0, 0], law[1, 1] = 1 - share, share
        for _ in range(steps - 1):
            nxt = np.zeros_like(law)
            nxt[:, 0] = law[:, 0] * (1 - enter) + law[:, 1] * leave
            nxt[1:, 1] = law[:-1, 0] * enter + law[:-1, 1] * (1 - leave)
            law = nxt
        return law.sum(axis=1)

    def _totals(self, total: np.ndarray, lam: np.ndarray, mean_load: np.ndarray,
                steps: int) -> np.ndarray:
        """(hosts, points, chains) log p of a window total given the ON-step count's law."""
        counts = np.arange(steps + 1)
        law = np.stack([self._on_counts(float(s), float(b), steps)
                        for s, b in zip(self.share, self.leave_on)])  # (chains, K)
        mean = lam[:, :, None, None] * mean_load[:, None, None, None] * counts[None, None, None]
        x = total[:, None, None, None]
        pois = np.where(counts[None, None, None] == 0, np.where(x == 0, 0.0, -np.inf),
                        poisson_logpmf(x, mean))
        return logsumexp(np.log(np.maximum(law, TINY))[None, None] + pois, axis=-1)

    def log_marginals(self, fleet: Any, totals_only: bool,
                      effects: Sequence[float]) -> np.ndarray:
        fg, m = self.fg, fleet.layout.canaries
        traffic = fleet.truth["traffic"][:m, None]
        load_pre = fleet.packets_pre[:m] / traffic
        load_post = fleet.packets_post[:m] / traffic
        drops_pre, drops_post = fleet.drops_pre[:m], fleet.drops_post[:m]
        have_pre = ~fleet.missing_pre[:m]
        have_post = ~fleet.missing_post[:m]
        chains = self.share.size
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            grid, weights = self._rate_grid(drops_pre * have_pre[:, None],
                                            drops_post * have_post[:, None],
                                            load_pre, load_post, effect)
            lam = np.exp(grid)
            if totals_only:
                pre = self._totals(drops_pre.sum(axis=1), lam, load_pre.mean(axis=1),
                                   drops_pre.shape[1])
                post = self._totals(drops_post.sum(axis=1), lam * effect,
                                    load_post.mean(axis=1), drops_post.shape[1])
                ll = (np.where(have_pre[:, None, None], pre, 0.0)
                      + np.where(have_post[:, None, None], post, 0.0))
            else:
                shape = (m, self.POINTS, chains, 2)
                stationary = np.stack([1 - self.share, self.share], axis=-1)
                start = np.broadcast_to(stationary[None, None], shape)
                log_scale = np.zeros(shape[:3])
                off, on = self._emission(drops_pre, lam[:, :, None, None] * load_pre[:, None,
                                                                                      None])
                state, ll_pre = self._forward(off, on, start, log_scale)
                state = np.where(have_pre[:, None, None, None],
                                 self._after(state, fg.CHANGE_GAP_STEPS + 1),
                                 start)
                ll_pre = np.where(have_pre[:, None, None], ll_pre, 0.0)
                off, on = self._emission(drops_post, lam[:, :, None, None] * effect
                                         * load_post[:, None, None])
                # the forward pass applies one transition between its steps, none before the
                # first: the law handed over already stands at the post window's first step
                _, ll = self._forward(off, on, state, ll_pre)
                ll = np.where(have_post[:, None, None], ll, ll_pre)
            host = logsumexp(weights[:, :, None] + ll - math.log(chains), axis=(1, 2))
            out[i] = host.sum()
        return out


# --- fleet_generators: ring_overflow_fleet -------------------------------------------------

class RingYardstick:
    """ring_overflow_fleet: per host the mean backlog at load 1 ``B`` (log-normal about its
    ring's share, 100 points over 5 sd each way) and the backlog's size ``k`` (uniform 0.7-3;
    5 points), the ring read from the host's model label. With per-step drops, exact: a step
    without drops has ``P(A <= C)``, a step with d drops ``P(A = C + d)``. With totals only: a
    window's zero total has its exact probability (every step at most C); a positive total is
    read as 1 plus a negative binomial with the exact mean and variance of the total given that
    it is positive (from each step's ``E[(A - C)+]`` and ``E[(A - C)+^2]``, interpolated in the
    backlog's log mean on a table). A missing window is left out. Each step's load (the fleet
    level, the site surges, the host's traffic) is the fleet-wide draw it is given, and the
    slowdown of R is the generator's drain_slowdown."""

    POINTS, SIZES, TABLE = 100, 5, 600

    def __init__(self) -> None:
        import fleet_generators as fg
        self.fg = fg
        sd = fg.RO_BACKLOG_SD
        self.z, dz = _grid(-5.0 * sd, 5.0 * sd, self.POINTS)
        self.size = _midpoints(*fg.RO_SHAPE, self.SIZES)
        self.log_prior = (np.log(norm.pdf(self.z, 0, sd) * dz)[:, None]
                          - math.log(self.SIZES))  # (points, sizes)
        self.log_mu = np.linspace(-8.0, 8.0, self.TABLE)
        self.tables = {}  # per ring: log P(A <= C), log E[(A - C)+], log E[(A - C)+^2]
        for ring in fg.RO_RING.values():
            mean = np.exp(self.log_mu)[None, :] * ring
            size = self.size[:, None]
            first, second = fg.overflow_moments(mean, size, np.array(ring))
            self.tables[ring] = (nbinom.logcdf(ring, size, size / (size + mean)),
                                 np.log(np.maximum(first, TINY)),
                                 np.log(np.maximum(second, TINY)))

    def _interpolated(self, table: np.ndarray, log_share: np.ndarray) -> np.ndarray:
        """A (sizes, TABLE) table of logs at log(mean backlog / ring), shape (..., sizes,
        steps)."""
        position = np.clip((log_share - self.log_mu[0]) / (self.log_mu[1] - self.log_mu[0]),
                           0, self.TABLE - 1 - 1e-9)
        row = np.floor(position).astype(np.int64)
        frac = position - row
        sizes = np.arange(self.SIZES)[:, None]
        return (1 - frac) * table[sizes, row] + frac * table[sizes, row + 1]

    def _window(self, drops: np.ndarray, log_share: np.ndarray, ring: np.ndarray,
                missing: np.ndarray, totals_only: bool) -> np.ndarray:
        """(hosts, points, sizes) log-likelihood of one window; log_share (hosts, points, 1,
        steps) the log of each step's mean backlog over the ring."""
        shape = log_share.shape[:2] + (self.SIZES, log_share.shape[-1])
        log_zero, first, second = (np.empty(shape) for _ in range(3))
        for ring_size, tables in self.tables.items():
            rows = ring == ring_size
            for out, table in list(zip((log_zero, first, second), tables))[
                    :1 if not totals_only else 3]:
                out[rows] = self._interpolated(table, log_share[rows])
        if not totals_only:
            size = self.size[None, None, :, None]
            mean = np.exp(log_share) * ring[:, None, None, None]
            x = drops[:, None, None, :]
            value = np.where(x > 0, nb_logpmf(ring[:, None, None, None] + x, mean, size),
                             log_zero).sum(axis=-1)
        else:
            first, second = np.exp(first), np.exp(second)
            log_zero = log_zero.sum(axis=-1)  # every step at most C
            total_mean = first.sum(axis=-1)
            total_var = (second - first ** 2).sum(axis=-1)
            positive = -np.expm1(np.minimum(log_zero, -TINY))
            mean1 = total_mean / positive  # the total given that it is positive
            var1 = np.maximum((total_var + total_mean ** 2) / positive - mean1 ** 2, TINY)
            shifted = np.maximum(mean1 - 1.0, 1e-9)
            excess = np.maximum(var1 - shifted, 1e-9 * shifted)
            total = drops.sum(axis=1)[:, None, None]
            value = np.where(total > 0,
                             np.log(positive) + nb_logpmf(np.maximum(total - 1, 0), shifted,
                                                          shifted ** 2 / excess),
                             log_zero)
        return np.where(missing[:, None, None], 0.0, value)

    def log_marginals(self, fleet: Any, totals_only: bool,
                      effects: Sequence[float]) -> np.ndarray:
        fg, m, truth = self.fg, fleet.layout.canaries, fleet.truth
        ring = np.array([fg.RO_RING[name] for name in fleet.model[:m]])
        base = math.log(fg.RO_BACKLOG_SHARE) + self.z  # (points,)

        def log_share(load: np.ndarray, slowdown: np.ndarray) -> np.ndarray:
            return (base[None, :, None, None] + np.log(load[:m] * slowdown[:, None])
                    [:, None, None, :])

        pre = self._window(fleet.drops_pre[:m], log_share(truth["load_pre"], np.ones(m)),
                           ring, fleet.missing_pre[:m], totals_only)
        out = np.empty(len(effects))
        for i, effect in enumerate(effects):
            slowdown = np.array([fg.drain_slowdown(effect, int(c)) for c in ring])
            post = self._window(fleet.drops_post[:m], log_share(truth["load_post"], slowdown),
                                ring, fleet.missing_post[:m], totals_only)
            out[i] = logsumexp(self.log_prior[None] + pre + post, axis=(1, 2)).sum()
        return out


GENERATOR_YARDSTICKS = {"lognormal_fleet": LognormalYardstick,
                        "pareto_bursts_fleet": ParetoYardstick,
                        "diurnal_missing_fleet": DiurnalYardstick,
                        "markov_onoff_fleet": MarkovYardstick,
                        "ring_overflow_fleet": RingYardstick}


@lru_cache(maxsize=None)
def generator_yardstick(name: str) -> Any:
    """The yardstick of a fleet_generators generator, by its name (built once per process)."""
    return GENERATOR_YARDSTICKS[name]()
