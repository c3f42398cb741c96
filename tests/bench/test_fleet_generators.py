"""The independent fleet generators (bench/fleet_generators.py): their documents are judge
inputs in both forms, and their statistics are what their models claim (heavy tails,
over-dispersion, silent hosts, traffic shifts, site-wide bursts, missing data, the effect)."""
from __future__ import annotations

import sys
from typing import Dict, List

import locations
import numpy as np
import pytest

from fleet_rollout.judge import judge_input_from_dict

sys.path.append(str(locations.ROOT / "bench"))  # last: bench/'s modules shadow nothing
import fleet_generators as fg

LAYOUT = fg.Layout(canaries=8, controls=32, steps=12, pre_windows=3)
FLEETS = 400  # per statistic: 16,000 hosts


def draw(name: str, fleets: int = FLEETS, effect: float = 1.0, seed: int = 7,
         layout: fg.Layout = LAYOUT) -> List[fg.FleetSample]:
    """Fleets from one generator, each from its own seed of `seed`: the same fleets (hosts,
    rates, traffic) at every effect."""
    seeds = np.random.SeedSequence(seed).spawn(fleets)
    return [fg.GENERATORS[name].sample(np.random.default_rng(s), layout, effect)
            for s in seeds]


def pooled(fleets: List[fg.FleetSample], key: str) -> np.ndarray:
    """A truth entry of every fleet, hosts stacked."""
    return np.concatenate([np.asarray(f.truth[key]) for f in fleets])


def stacked(fleets: List[fg.FleetSample], attr: str) -> np.ndarray:
    return np.concatenate([getattr(f, attr) for f in fleets])


def unit_totals(steps: np.ndarray, length: int) -> np.ndarray:
    """Per-step values (hosts, units * length) -> totals per post-window-long unit."""
    return steps.reshape(steps.shape[0], -1, length).sum(axis=2)


def expected_given_states(fleet: fg.FleetSample) -> np.ndarray:
    """Each post step's expected drops; markov_onoff_fleet's given its drawn on/off chain
    (its truth's mean is over the chain's stationary law: a mostly-off host's ratio to it
    has too heavy a tail to average)."""
    truth = fleet.truth
    if truth["generator"] != "markov_onoff_fleet":
        return truth["mean_post"]
    on_rate = truth["mean_post"] / truth["on_share"][:, None]
    return on_rate * truth["states_post"]


def windows_of(doc: Dict) -> List[Dict]:
    return [w for host in doc["hosts"].values() for w in (host["pre"], host["post"])
            if w is not None]


# --- every generator ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(fg.GENERATORS))
def test_documents_are_judge_inputs_in_both_forms(name: str) -> None:
    layout = fg.Layout(canaries=5, controls=20, steps=12, pre_windows=3)
    for fleet in draw(name, fleets=25, layout=layout):
        with_steps, totals = fleet.document(totals_only=False), fleet.document(totals_only=True)
        for doc in (with_steps, totals):
            data = judge_input_from_dict(doc)
            assert data.canary == fleet.names[:5] and len(data.control) == 20
            assert data.pre_windows == 3.0 and doc["schema_version"] == 1
        assert all("steps" not in w for w in windows_of(totals))
        for host in with_steps["hosts"].values():
            for span, length in (("pre", 36), ("post", 12)):
                window = host[span]
                if window is None:
                    continue
                if window.get("coverage", 1.0) < 1.0:
                    assert "steps" not in window  # a window with a gap has no equal steps
                    continue
                assert len(window["steps"]) == length
                assert sum(window["steps"]) == window["drops"]
        # the same fleet in both forms: the same totals
        for host, entry in with_steps["hosts"].items():
            for span in ("pre", "post"):
                if entry[span] is not None:
                    assert totals["hosts"][host][span]["drops"] == entry[span]["drops"]


def test_generate_returns_the_document_and_its_truth() -> None:
    generator = fg.GENERATORS["lognormal_fleet"]
    doc = generator.generate(np.random.default_rng(3), canaries=3, controls=12, effect=1.5,
                             steps=6, pre_windows=2, totals_only=True)
    again, truth = generator.generate_with_truth(np.random.default_rng(3), 3, 12, 1.5, 6, 2,
                                                 totals_only=True)
    assert doc == again and truth["effect"] == 1.5 and truth["rate"].shape == (15,)
    assert truth["mean_pre"].shape == (15, 12) and truth["mean_post"].shape == (15, 6)
    judge_input_from_dict(doc)
    with pytest.raises(ValueError):
        generator.generate(np.random.default_rng(3), 3, 12, 0.0, 6, 2, False)


@pytest.mark.parametrize("name", [n for n in fg.GENERATORS if n != "ring_overflow_fleet"])
def test_effect_multiplies_the_canaries_expected_post_rate(name: str) -> None:
    base, doubled = draw(name, fleets=50, seed=11), draw(name, fleets=50, effect=2.0, seed=11)
    m = LAYOUT.canaries
    own = "bursts_post" if name == "pareto_bursts_fleet" else "mean_post"  # site bursts stay
    for one, two in zip(base, doubled):
        np.testing.assert_array_equal(one.drops_pre, two.drops_pre)  # the same fleet
        np.testing.assert_allclose(two.truth[own][:m], 2.0 * one.truth[own][:m])
        np.testing.assert_allclose(two.truth[own][m:], one.truth[own][m:])


@pytest.mark.parametrize("name", [n for n in fg.GENERATORS if n != "pareto_bursts_fleet"])
def test_drawn_counts_average_their_expected_drops(name: str) -> None:
    """The canaries' post windows at 2x: drops over the truth's expected drops average 1
    (pareto_bursts_fleet's sizes have no variance to average with: its own test below)."""
    fleets = draw(name, effect=2.0)
    m = LAYOUT.canaries
    drops = np.concatenate([f.drops_post[:m].sum(axis=1) for f in fleets])
    expected = np.concatenate([expected_given_states(f)[:m].sum(axis=1) for f in fleets])
    busy = expected >= 1.0
    assert busy.sum() > 1000
    assert abs(np.mean(drops[busy] / expected[busy]) - 1.0) < 0.12


# --- lognormal_fleet ----------------------------------------------------------------------

def test_lognormal_host_rates_are_heavy_tailed() -> None:
    fleets = draw("lognormal_fleet")
    silent, rate = pooled(fleets, "silent"), pooled(fleets, "rate")
    log_rate = np.log(rate[~silent])
    assert abs(log_rate.std() - fg.LN_RATE_SD) < 0.05
    assert np.percentile(rate[~silent], 99) / np.median(rate[~silent]) > 80  # exp(2.33 * 2)
    # what the judge sees: the hosts' pre-window drop rates spread as widely
    observed = stacked(fleets, "drops_pre").sum(axis=1) / stacked(fleets, "packets_pre").sum(
        axis=1)
    observed = observed[~silent & (observed > 0)]
    assert np.percentile(observed, 99) / np.median(observed) > 50


def test_lognormal_windows_are_negative_binomial() -> None:
    fleets = draw("lognormal_fleet")
    silent, k = pooled(fleets, "silent"), pooled(fleets, "k")
    counts = unit_totals(stacked(fleets, "drops_pre"), LAYOUT.steps)[~silent]
    mean = unit_totals(pooled(fleets, "mean_pre"), LAYOUT.steps)[~silent]
    k = np.broadcast_to(k[~silent, None], mean.shape)
    busy = mean >= 1.0  # below, one drop makes the estimate below jump by 1/M^2
    counts, mean, k = counts[busy], mean[busy], k[busy]
    # E[(x - M)^2 - x] = M^2 / k for NB(mean M, size k): the dispersion is the drawn one
    ratio = k * ((counts - mean) ** 2 - counts) / mean ** 2
    assert abs(ratio.mean() - 1.0) < 0.1
    assert np.mean((counts - mean) ** 2 / mean) > 20  # variance/mean: far from Poisson's 1
    assert k.min() >= fg.LN_K_RANGE[0] and k.max() <= fg.LN_K_RANGE[1]
    assert np.median(k) < 2.5  # small k: the variance grows with the square of the mean


def test_lognormal_silent_hosts_are_a_fifth_and_mostly_zero() -> None:
    fleets = draw("lognormal_fleet")
    silent = pooled(fleets, "silent")
    assert 0.18 < silent.mean() < 0.22
    windows = unit_totals(stacked(fleets, "drops_pre"), LAYOUT.steps)
    assert (windows[silent] == 0).mean() > 0.93  # 1 - 0.997^12 = 3.5% with a burst
    assert (windows[~silent] == 0).mean() < 0.3


def test_lognormal_traffic_shifts_within_15_percent() -> None:
    fleets = draw("lognormal_fleet")
    shift = pooled(fleets, "shift")
    assert np.abs(shift).max() <= 0.15 and np.abs(shift).max() > 0.149
    ratio = (stacked(fleets, "packets_post").mean(axis=1)
             / stacked(fleets, "packets_pre").mean(axis=1))
    # the steps' jitter moves a window's mean packets by 1.7% (sd): 16,000 hosts within 5.4 sd
    assert np.all(np.abs(ratio - 1.0) < 0.15 + 0.09)
    np.testing.assert_allclose(ratio, 1.0 + shift, atol=0.09)
    assert np.std(ratio / (1.0 + shift)) < 0.02


# --- pareto_bursts_fleet ------------------------------------------------------------------

def test_pareto_burst_sizes_have_the_tail_index_they_claim() -> None:
    sizes = fg.pareto_burst_sizes(np.random.default_rng(5), fg.PB_ALPHA, 300_000)
    assert sizes.min() == 1
    # P(S >= s) = s^-alpha: the tail index from the share above 10 and above 100
    alpha = np.log((sizes >= 10).sum() / (sizes >= 100).sum()) / np.log(10)
    assert abs(alpha - fg.PB_ALPHA) < 0.1
    assert abs((sizes >= 10).mean() - 10 ** -fg.PB_ALPHA) < 0.002


def test_pareto_steps_with_drops_follow_the_burst_rates() -> None:
    """A step has drops unless it has no burst (sizes are >= 1): P = 1 - exp(-expected
    bursts), the canaries' own bursts doubled at 2x, the site's not."""
    fleets = draw("pareto_bursts_fleet", effect=2.0)
    m = LAYOUT.canaries
    dropping = np.concatenate([f.drops_post[:m] > 0 for f in fleets])
    bursts = np.concatenate([f.truth["bursts_post"][:m] + f.truth["site_bursts_post"][:m]
                             for f in fleets])
    assert abs(dropping.mean() - np.mean(1.0 - np.exp(-bursts))) < 0.01


def test_pareto_fleet_steps_are_heavy_tailed_and_overdispersed() -> None:
    fleets = draw("pareto_bursts_fleet")
    steps = stacked(fleets, "drops_post").ravel()
    dropping = steps[steps > 0]
    assert np.percentile(dropping, 99.9) / np.median(dropping) > 40
    counts = stacked(fleets, "drops_post").sum(axis=1)
    mean = pooled(fleets, "mean_post").sum(axis=1)
    assert np.mean((counts - mean) ** 2 / mean) > 10  # compound Pareto: variance/mean >> 1
    silent = pooled(fleets, "silent")
    assert 0.18 < silent.mean() < 0.22
    assert np.abs(pooled(fleets, "shift")).max() <= fg.PB_SHIFT


def test_pareto_site_episodes_hit_every_host_of_the_site() -> None:
    fleets = draw("pareto_bursts_fleet")
    inside, outside, same_site, other_site = [], [], [], []
    for fleet in fleets:
        site = fleet.truth["site_index"]
        episode = fleet.truth["site_bursts_post"] > 0  # (hosts, steps)
        dropping = fleet.drops_post > 0
        quiet = fleet.truth["silent"]  # silent hosts drop almost only in episodes
        inside.append(dropping[quiet][episode[quiet]])
        outside.append(dropping[quiet][~episode[quiet]])
        signal = np.log1p(fleet.drops_post)
        for a in range(0, fleet.layout.hosts, 5):
            for b in range(a + 1, fleet.layout.hosts, 7):
                if signal[a].std() > 0 and signal[b].std() > 0:
                    r = np.corrcoef(signal[a], signal[b])[0, 1]
                    (same_site if site[a] == site[b] else other_site).append(r)
    share_inside, share_outside = np.concatenate(inside).mean(), np.concatenate(outside).mean()
    assert share_inside > 0.6 and share_outside < 0.01
    assert np.mean(same_site) > np.mean(other_site) + 0.05
    happens = np.concatenate([f.truth["episodes"]["happens"].ravel() for f in fleets])
    assert abs(happens.mean() - fg.PB_EPISODE_PROB) < 0.03


# --- diurnal_missing_fleet ----------------------------------------------------------------

def test_diurnal_drops_rise_faster_than_traffic() -> None:
    fleets = draw("diurnal_missing_fleet")
    load = np.concatenate([np.concatenate([f.truth["load_pre"], f.truth["load_post"]], axis=1)
                           for f in fleets])
    drops = np.concatenate([np.concatenate([f.drops_pre, f.drops_post], axis=1)
                            for f in fleets])
    packets = np.concatenate([np.concatenate([f.packets_pre, f.packets_post], axis=1)
                              for f in fleets])
    rate = pooled(fleets, "rate")[:, None]
    per_packet = drops / (rate * packets)  # drops per packet relative to the host's rate
    high, low = load > 1.2, load < 0.8
    assert high.sum() > 10000 and low.sum() > 10000
    # drops per packet rise with load: drops rise faster than traffic
    assert per_packet[high].mean() / per_packet[low].mean() > 1.5


def test_diurnal_traffic_ramps_across_the_windows() -> None:
    fleets = draw("diurnal_missing_fleet")
    change = np.array([np.median(f.truth["load_post"].mean(axis=1)
                                 / f.truth["load_pre"].mean(axis=1)) for f in fleets])
    assert np.mean(np.abs(change - 1.0) > 0.05) > 0.4  # the fleet's load moves between windows
    pre_start = np.array([np.median(f.truth["load_pre"][:, :6]) for f in fleets])
    pre_end = np.array([np.median(f.truth["load_pre"][:, -6:]) for f in fleets])
    assert np.mean(np.abs(pre_end / pre_start - 1.0) > 0.05) > 0.4  # and within the pre window


def test_diurnal_models_differ_and_windows_go_missing() -> None:
    fleets = draw("diurnal_missing_fleet")
    model, rate = pooled(fleets, "model_index"), pooled(fleets, "rate")
    assert 3.0 < np.median(rate[model == 1]) / np.median(rate[model == 0]) < 5.3
    windows = [w for f in fleets for host in f.document()["hosts"].values()
               for w in (host["pre"], host["post"])]
    missing = np.mean([w is None for w in windows])
    assert 0.02 < missing < 0.04
    partial = [w for w in windows if w is not None and w.get("coverage", 1.0) < 1.0]
    assert 0.025 < len(partial) / len(windows) < 0.055
    assert all("steps" not in w and 0.5 <= w["coverage"] < 1.0 for w in partial)


def test_diurnal_steps_are_overdispersed() -> None:
    fleets = draw("diurnal_missing_fleet")
    drops, mean = stacked(fleets, "drops_post"), pooled(fleets, "mean_post")
    busy = mean > 5
    # Poisson-log-normal: variance mu + (e - 1) mu^2
    assert np.mean((drops[busy] - mean[busy]) ** 2 / mean[busy]) > 10
    excess = ((drops[busy] - mean[busy]) ** 2 - drops[busy]) / mean[busy] ** 2
    assert abs(excess.mean() - (np.e - 1.0)) < 0.35


# --- markov_onoff_fleet -------------------------------------------------------------------

def test_markov_hosts_switch_on_and_off() -> None:
    fleets = draw("markov_onoff_fleet")
    states = np.concatenate([f.truth["states_pre"] for f in fleets])
    on_share = pooled(fleets, "on_share")
    assert abs(states.mean() - on_share.mean()) < 0.01  # the chain starts stationary
    # ON runs last 1 / P(ON -> OFF) steps on average
    leave = pooled(fleets, "leave_on")
    switches = (states[:, 1:] & ~states[:, :-1]).sum()
    on_steps = states[:, :-1].sum()
    assert abs(switches / on_steps - np.mean(leave * on_share) / np.mean(on_share)) < 0.03
    assert np.mean(on_share < 0.02) > 0.15  # mostly silent hosts


def test_markov_windows_are_overdispersed_with_silent_stretches() -> None:
    fleets = draw("markov_onoff_fleet")
    counts = unit_totals(stacked(fleets, "drops_pre"), LAYOUT.steps)
    mean = unit_totals(pooled(fleets, "mean_pre"), LAYOUT.steps)
    busy = mean > 20
    assert np.mean((counts[busy] - mean[busy]) ** 2 / mean[busy]) > 10
    # a Poisson window expecting 20+ drops is never empty; an OFF stretch empties it
    assert np.mean(counts[busy] == 0) > 0.1
    level = np.array([f.truth["level"] for f in fleets])
    assert level.min() >= 0.85 and level.max() <= 1.15


# --- ring_overflow_fleet ------------------------------------------------------------------

def test_ring_overflow_moments_are_those_of_the_drawn_overflow() -> None:
    rng = np.random.default_rng(5)
    for mean, size, ring in ((10.0, 0.7, 32), (40.0, 3.0, 32), (20.0, 1.5, 64)):
        backlog = rng.negative_binomial(size, size / (size + mean), 400_000)
        overflow = np.maximum(backlog - ring, 0).astype(float)
        first, second = fg.overflow_moments(np.array(mean), np.array(size), np.array(ring))
        assert abs(overflow.mean() / first - 1) < 0.03, (mean, size, ring)
        assert abs(np.mean(overflow ** 2) / second - 1) < 0.06, (mean, size, ring)


def test_ring_slowdown_multiplies_the_reference_hosts_drops_by_the_effect() -> None:
    for ring in fg.RO_RING.values():
        mean = fg.RO_BACKLOG_SHARE * ring
        base = fg.overflow_moments(np.array(mean), np.array(1.5), np.array(ring))[0]
        for effect in (0.5, 2.0, 3.0):
            g = fg.drain_slowdown(effect, ring)
            assert min(1.0, effect) < g < max(1.0, effect)  # the overflow is convex
            after = fg.overflow_moments(np.array(mean * g), np.array(1.5), np.array(ring))[0]
            assert abs(after / base - effect) < 1e-6


def test_ring_effect_is_larger_on_hosts_that_seldom_overflow() -> None:
    base, doubled = draw("ring_overflow_fleet", fleets=100), draw("ring_overflow_fleet",
                                                                  fleets=100, effect=2.0)
    m = LAYOUT.canaries
    before = np.concatenate([f.truth["mean_post"][:m].sum(axis=1) for f in base])
    after = np.concatenate([f.truth["mean_post"][:m].sum(axis=1) for f in doubled])
    controls = np.concatenate([f.truth["mean_post"][m:] for f in base])
    again = np.concatenate([f.truth["mean_post"][m:] for f in doubled])
    np.testing.assert_allclose(controls, again)  # controls unchanged
    ratio = after / before
    busy = before >= np.quantile(before, 0.75)
    quiet = (before > 0) & (before <= np.quantile(before, 0.25))
    assert 1.6 < np.median(ratio) < 2.5
    assert np.median(ratio[quiet]) > np.median(ratio[busy]) > 1.2


def test_ring_drops_rise_faster_than_load_and_site_surges_hit_every_host() -> None:
    fleets = draw("ring_overflow_fleet")
    load = pooled(fleets, "load_pre")
    drops = stacked(fleets, "drops_pre").astype(float)
    backlog = pooled(fleets, "backlog")
    normal, surged = load < 1.15, load > 1.5
    assert surged.sum() > 10_000
    per_load = [drops[mask].sum() / (load * backlog[:, None])[mask].sum()
                for mask in (normal, surged)]
    assert per_load[1] > 1.5 * per_load[0]  # the threshold: drops rise faster than load
    for fleet in fleets[:50]:  # a surge raises the packets of every host of its site alike
        surge = fleet.truth["surge"][:, :LAYOUT.pre_steps]
        factor = fleet.packets_pre / fleet.truth["traffic"][:, None]
        expected = surge[fleet.truth["site_index"]]
        assert np.all(np.abs(np.log(factor / expected)) < 5 * fg.PACKET_JITTER)


def test_ring_steps_are_heavy_tailed_overdispersed_and_a_fifth_of_hosts_silent() -> None:
    fleets = draw("ring_overflow_fleet")
    steps = stacked(fleets, "drops_pre")
    positive = steps[steps > 0]
    assert np.quantile(positive, 0.99) > 8 * np.median(positive)  # heavy tail
    counts = unit_totals(steps, LAYOUT.steps)
    mean = unit_totals(pooled(fleets, "mean_pre"), LAYOUT.steps)
    busy = mean > 20
    assert np.mean((counts[busy] - mean[busy]) ** 2 / mean[busy]) > 10  # over-dispersed
    silent = stacked(fleets, "drops_post").sum(axis=1) == 0
    assert 0.1 < silent.mean() < 0.35
    missing = stacked(fleets, "missing_pre")
    assert 0.01 < missing.mean() < 0.03


def test_registry_names_the_held_out_generators() -> None:
    assert len(fg.GENERATORS) >= 3 and len(fg.HELD_OUT) >= 1
    assert set(fg.HELD_OUT) < set(fg.GENERATORS)  # some generators are left for tuning
    assert all(reason for reason in fg.HELD_OUT.values())
    for name, generator in fg.GENERATORS.items():
        assert generator.name == name and generator.sample.__doc__
