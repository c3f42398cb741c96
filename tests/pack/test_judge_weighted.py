"""The judge's weighted permutation test (fleet_rollout.judge.weighted): strata by site
and hardware model, weights by what a host can tell, clipped incidents, its level under the null,
and the input fields that feed it (site, model, per-step drops)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import pytest

from fleet_rollout.errors import ConfigError
from fleet_rollout.judge import judge, judge_input_from_dict, weighted
from fleet_rollout.judge.core import FAIL, PASS
from fleet_rollout.judge.weighted import HostData, choose_strata, weighted_test

PACKETS = 5_000_000


def _doc(hosts: Dict[str, Dict[str, Any]], canary: List[str]) -> Dict[str, Any]:
    return {"canary": canary, "control": [h for h in hosts if h not in canary], "hosts": hosts}


def _host(pre: float, post: float, site: Optional[str] = None,
          model: Optional[str] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {"pre": {"drops": pre, "packets": PACKETS},
                           "post": {"drops": post, "packets": PACKETS}}
    if site:
        out["site"] = site
    if model:
        out["model"] = model
    return out


def _fleet(seed: int, canaries: int = 8, controls: int = 32, effect: float = 1.0,
           burst_site: Optional[str] = None, burst: float = 1.0,
           canary_sites: int = 4) -> Dict[str, Any]:
    """Controls over 4 sites, canaries over the first `canary_sites`; each host's level differs
    a lot, drops are over-dispersed."""
    rng = np.random.default_rng(seed)
    hosts = {}
    names = [f"c{i}" for i in range(canaries)] + [f"k{i}" for i in range(controls)]
    for i, name in enumerate(names):
        site = f"s{i % (canary_sites if name.startswith('c') else 4)}"
        level = 200 * np.exp(rng.normal(0, 1.0))
        factor = effect if name.startswith("c") else 1.0
        if site == burst_site:
            factor *= burst
        pre = rng.negative_binomial(20, 20 / (20 + level))
        post = rng.negative_binomial(20, 20 / (20 + level * factor))
        hosts[name] = _host(float(pre), float(post), site)
    return _doc(hosts, names[:canaries])


def test_a_site_wide_burst_is_compared_within_the_site() -> None:
    """Every host of site s1, canary and control alike, drops 8x more after the change: within
    the site that is no regression. Half the canaries but a quarter of the controls are at s1,
    so without sites the burst looks like one (clipping keeps it from a FAIL here)."""
    doc = _fleet(4, burst_site="s1", burst=8.0, canary_sites=2)
    with_sites = judge(judge_input_from_dict(doc))
    assert with_sites.verdict == PASS and with_sites.test.strata == "site"
    assert "within site" in with_sites.explanation
    for host in doc["hosts"].values():
        host.pop("site")
    blind = judge(judge_input_from_dict(doc))
    assert blind.test.strata == "none"
    assert blind.test.ratio > with_sites.test.ratio * 1.5
    assert blind.test.p_value < with_sites.test.p_value


def test_a_regression_fails_within_sites() -> None:
    verdict = judge(judge_input_from_dict(_fleet(5, effect=2.5, burst_site="s2", burst=3.0)))
    assert verdict.verdict == FAIL and verdict.reason == "regression"
    assert verdict.test.strata == "site" and 1.8 < verdict.test.ratio < 3.5
    assert verdict.test.ci_ratio[0] > 1.0


def test_silent_hosts_weigh_little() -> None:
    hosts = {f"k{i}": _host(400.0 + 10 * i, 410.0 + 7 * i) for i in range(10)}
    hosts.update({f"q{i}": _host(0.0, 1.0 if i % 2 else 0.0) for i in range(6)})
    hosts.update({f"c{i}": _host(300.0 + 5 * i, 310.0) for i in range(4)})
    verdict = judge(judge_input_from_dict(_doc(hosts, [f"c{i}" for i in range(4)])))
    weight = {h.host: h.weight for h in verdict.hosts}
    busiest = max(weight.values())
    assert all(weight[f"q{i}"] < 0.05 * busiest for i in range(6))
    assert verdict.verdict == PASS


def test_one_incident_does_not_decide_a_batch() -> None:
    """One canary of eight with a burst 10x its usual drops, the others as before: clipped."""
    rng = np.random.default_rng(11)
    hosts = {}
    for i in range(40):
        name = f"c{i}" if i < 8 else f"k{i}"
        level = float(rng.integers(150, 400))
        post = level * (10.0 if name == "c0" else 1.0) + float(rng.integers(-20, 20))
        hosts[name] = _host(level, post)
    verdict = judge(judge_input_from_dict(_doc(hosts, [f"c{i}" for i in range(8)])))
    assert verdict.verdict == PASS
    assert verdict.test.p_value > 0.025


def test_the_same_input_gives_the_same_p_value() -> None:
    doc = _fleet(7, effect=1.4)
    first = judge(judge_input_from_dict(doc)).test
    second = judge(judge_input_from_dict(doc)).test
    assert first.p_value == second.p_value and first.permutations == weighted.PERMUTATIONS


def test_level_holds_under_random_relabelling() -> None:
    """One over-dispersed, heterogeneous fleet without any change; canaries drawn at random
    within sites 400 times: FAIL (p < 0.025) about 2.5% of the time, never far above it."""
    rng = np.random.default_rng(2024)
    base = _fleet(9, canaries=0, controls=48)["hosts"]
    names = sorted(base)
    rejected = 0
    for _ in range(400):
        canary = set()
        for site in ("s0", "s1", "s2", "s3"):
            members = [n for n in names if base[n]["site"] == site]
            canary |= set(rng.choice(members, size=2, replace=False))
        data = []
        for name in names:
            pre, post = base[name]["pre"]["drops"], base[name]["post"]["drops"]
            e = np.log((post + 0.5) / PACKETS) - np.log((pre + 0.5) / PACKETS)
            data.append(HostData(name, name in canary, float(e), pre, post, base[name]["site"]))
        rejected += weighted_test(data, permutations=1000).p_value < 0.025
    assert rejected / 400 <= 0.05


def test_strata_fall_back_when_a_canary_stratum_lacks_controls() -> None:
    def host(name: str, canary: bool, site: str, model: str) -> HostData:
        return HostData(name, canary, 0.0, 10.0, 10.0, site, model)

    hosts = [host("c0", True, "a", "m1"), host("c1", True, "b", "m2")]
    hosts += [host(f"k{i}", False, "a" if i % 2 else "b", "m1" if i < 6 else "m2")
              for i in range(12)]
    level, ids = choose_strata(hosts)
    assert level == "site" and len(set(ids.tolist())) == 2  # site+model: b/m1 has 3 controls
    assert choose_strata([HostData("c", True, 0.0, 1.0, 1.0),
                          HostData("k", False, 0.0, 1.0, 1.0)])[0] == "none"


def test_many_canaries_use_the_normal_approximation(monkeypatch) -> None:
    doc = _fleet(13, canaries=64, controls=64, effect=1.15)
    normal = judge(judge_input_from_dict(doc)).test
    assert normal.permutations == 0
    monkeypatch.setattr(weighted, "NORMAL_FROM", 10_000)
    exact = judge(judge_input_from_dict(doc)).test
    assert exact.permutations == weighted.PERMUTATIONS
    assert abs(normal.p_value - exact.p_value) < 0.02 + 0.2 * exact.p_value


def test_per_step_drops_give_the_over_dispersion() -> None:
    hosts = {}
    rng = np.random.default_rng(4)
    for i in range(20):
        windows = {}
        for label in ("pre", "post"):
            steps = [float(x) for x in rng.negative_binomial(2, 2 / (2 + 30), 12)]
            windows[label] = {"drops": sum(steps), "packets": PACKETS, "steps": steps}
        hosts[f"c{i}" if i < 5 else f"k{i}"] = windows
    verdict = judge(judge_input_from_dict(_doc(hosts, [f"c{i}" for i in range(5)])))
    assert verdict.test.phi > 5  # negative binomial with size 2 around 30: var/mean about 16


@pytest.mark.parametrize("entry, message", [
    ({"drops": 5, "packets": PACKETS, "steps": [1, 2]}, "add up to 3, but drops is 5"),
    ({"drops": 3, "packets": PACKETS, "steps": [1, -1, 3]}, "steps[1]"),
    ({"drops": 3, "packets": PACKETS, "steps": "3"}, "per-step drop counts"),
])
def test_bad_steps_are_refused_with_the_field(entry: Dict[str, Any], message: str) -> None:
    hosts = {"c0": {"pre": entry, "post": {"drops": 1, "packets": PACKETS}},
             "k0": _host(1, 1)}
    with pytest.raises(ConfigError) as err:
        judge_input_from_dict(_doc(hosts, ["c0"]))
    assert "hosts.c0.pre.steps" in str(err.value) and message in str(err.value)


def test_site_and_model_must_be_names() -> None:
    hosts = {"c0": dict(_host(1, 1), site=7), "k0": _host(1, 1)}
    with pytest.raises(ConfigError, match=r"hosts\.c0\.site: must be a non-empty string"):
        judge_input_from_dict(_doc(hosts, ["c0"]))


def test_the_ceiling_looks_at_what_the_site_did() -> None:
    """A site-wide burst takes canary c1 and every control of its site from 0.6% to 1.8% drops:
    above the 1% ceiling, but the change did not do it. A canary elsewhere that does the same
    alone still fails the ceiling."""
    def window(drops: float) -> Dict[str, Any]:
        return {"drops": drops, "packets": 1_000_000}

    hosts: Dict[str, Any] = {}
    for i in range(8):
        hosts[f"k{i}"] = {"pre": window(6000 + i), "post": window(18000 + i), "site": "s1"}
        hosts[f"j{i}"] = {"pre": window(6000 + i), "post": window(6000 + i), "site": "s2"}
    hosts["c1"] = {"pre": window(6000), "post": window(18000), "site": "s1"}
    hosts["c2"] = {"pre": window(6000), "post": window(6100), "site": "s2"}
    hosts["c3"] = {"pre": window(6000), "post": window(6050), "site": "s2"}
    doc = _doc(hosts, ["c1", "c2", "c3"])
    verdict = judge(judge_input_from_dict(doc))
    assert verdict.reason != "ceiling" and not verdict.ceiling_breaches
    doc["hosts"]["c2"]["post"]["drops"] = 18000  # 0.6% -> 1.8% where its site stayed put
    verdict = judge(judge_input_from_dict(doc))
    assert verdict.verdict == FAIL and [h.host for h in verdict.ceiling_breaches] == ["c2"]
    assert "absolute ceiling" in verdict.explanation


def _steps_host(rng: np.random.Generator, level: float, site: str, burst: float,
                steps: range) -> Dict[str, Any]:
    """Per-step drops of one host: `level` per step, x`burst` in the post window's `steps`."""
    pre = [int(x) for x in rng.poisson(level, 12)]
    post = [int(rng.poisson(level * (burst if i in steps else 1.0))) for i in range(12)]
    return {"pre": {"drops": sum(pre), "packets": PACKETS, "steps": pre},
            "post": {"drops": sum(post), "packets": PACKETS, "steps": post}, "site": site}


def test_a_short_site_burst_is_seen_in_the_steps_and_taken_out() -> None:
    """A 3x burst over 4 of 12 steps of site a's post window raises every host there by 5/3.
    Site a has too few controls to be a stratum (3), so without per-step drops its 4 canaries
    look like a regression; with them, the judge sees the burst in the site's profile and
    passes. A burst in a site without canaries changes nothing either way."""
    rng = np.random.default_rng(5)
    hosts = {f"c{i}": _steps_host(rng, 100, "a", 3.0, range(3, 7)) for i in range(4)}
    hosts.update({f"k{i}": _steps_host(rng, 100, "a", 3.0, range(3, 7)) for i in range(3)})
    hosts.update({f"j{i}": _steps_host(rng, 100, "b", 1.0, range(0)) for i in range(12)})
    doc = _doc(hosts, [f"c{i}" for i in range(4)])
    with_steps = judge(judge_input_from_dict(doc))
    assert with_steps.test.strata == "none" and with_steps.verdict == PASS
    assert with_steps.test.ratio == pytest.approx(1.0, abs=0.1)
    for host in hosts.values():
        for window in ("pre", "post"):
            del host[window]["steps"]
    without = judge(judge_input_from_dict(doc))
    assert without.verdict == FAIL and without.test.ratio == pytest.approx(5 / 3, rel=0.1)


def test_the_site_profile_measures_a_burst_and_ignores_the_labels() -> None:
    flat = np.full((8, 12), 50.0)
    assert weighted.transient(flat) == pytest.approx(0.0)
    burst = flat.copy()
    burst[:, 2:5] *= 4.0  # 3 of 12 steps at 4x: (9 + 12) / 12 times the drops
    assert weighted.transient(burst) == pytest.approx(np.log(21 / 12))
    assert weighted.transient(burst[:3]) == 0.0  # 3 dropping hosts cannot say
    one = flat.copy()
    one[0, 2:5] *= 40.0  # one host's incident: its weight is capped, the site barely moves
    assert weighted.transient(one) < 0.25 * np.log(1 + 3 * 39 / 12)
    rng = np.random.default_rng(3)
    hosts = [HostData(f"h{i}", i < 3, 0.0, 600.0, 600.0, "a",
                      steps_pre=list(rng.poisson(50, 12)),
                      steps_post=list(rng.poisson(50, 12) * np.r_[1, 1, 4, 4, 4, [1] * 7]))
             for i in range(8)]
    shifted = weighted.site_transients(hosts)
    for host in hosts:
        host.canary = not host.canary
    assert list(weighted.site_transients(hosts)) == list(shifted)
    assert shifted[0] > 0.4 and len(set(shifted)) == 1


def _history_fleet(seed: int, pre_windows: int, effect: float) -> Dict[str, Any]:
    """8 canaries and 32 controls at one site, levels spread wide, over-dispersed drops, each
    host's condition drifting from window to window; the pre window `pre_windows` windows."""
    rng = np.random.default_rng(seed)
    hosts = {}
    names = [f"c{i}" for i in range(8)] + [f"k{i}" for i in range(32)]
    for name in names:
        level = 20 * np.exp(rng.normal(0, 1.0))
        drift = np.exp(rng.normal(0, 0.3, pre_windows + 1))
        means = level * drift * np.r_[np.ones(pre_windows),
                                      effect if name.startswith("c") else 1.0]
        drops = rng.negative_binomial(5, 5 / (5 + means))
        hosts[name] = {"pre": {"drops": float(drops[:-1].sum()),
                               "packets": PACKETS * pre_windows},
                       "post": {"drops": float(drops[-1]), "packets": PACKETS}}
    doc = _doc(hosts, names[:8])
    doc["pre_windows"] = pre_windows
    return doc


def test_a_longer_pre_window_measures_the_rate_before_more_precisely() -> None:
    """The pre window's length enters each host's variance: v = (1 + 1/k) / (lam + 0.5) with
    lam its drops per post window. On the same kind of fleet without any change, a pre window
    3 windows long gives a narrower interval of the change than one window (about 0.79x: the
    pre side's noise shrinks by 3) and few false alarms."""
    lam, _, v = weighted.information(np.array([300.0]), np.array([100.0]), 3.0)
    assert lam[0] == pytest.approx(100.0) and v[0] == pytest.approx((4 / 3) / 100.5)
    lam, _, v = weighted.information(np.array([300.0]), np.array([100.0]))
    assert lam[0] == pytest.approx(200.0) and v[0] == pytest.approx(2 / 200.5)
    width = {}
    for k in (1, 3):
        verdicts = [judge(judge_input_from_dict(_history_fleet(100 + s, k, 1.0)))
                    for s in range(40)]
        assert sum(v.verdict == FAIL for v in verdicts) <= 3, k
        width[k] = float(np.median([v.test.ci_high - v.test.ci_low for v in verdicts]))
    assert width[3] <= 0.85 * width[1], width
