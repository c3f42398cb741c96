"""Plan batching and control selection, fast: the rules an SRE relies on, checked over many
seeded random fleets (pure functions, no I/O).

- every target is in exactly one batch; no control host is ever in a batch;
- no batch takes more hosts of one site or one rack than the profile allows;
- the first batch (the canaries) is at most canary_size, later ones grow by `growth` up to
  max_batch (a batch is smaller only when the caps or the fleet leave no more);
- controls are unchanged hosts of the canaries' site and model first; targets serve as
  controls only when there are too few others, and then they are changed after all others.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import List, Tuple

import pytest

from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import build_plan, choose_controls, controls_for_batch, make_batches
from fleet_rollout.profile import load_profile


def fleet(rnd: random.Random, n: int, prefix: str = "h") -> List[FleetHost]:
    sites, racks, models = rnd.randint(1, 5), rnd.randint(1, 8), rnd.randint(1, 3)
    return [FleetHost(name=f"{prefix}{i:04d}", bmc_address="https://bmc.example",
                      site=f"s{rnd.randrange(sites)}", rack=f"r{rnd.randrange(racks)}",
                      hardware_model=f"m{rnd.randrange(models)}") for i in range(n)]


def batching_args(rnd: random.Random) -> Tuple[int, float, int, int, int]:
    return (rnd.randint(1, 8), rnd.choice([1.0, 1.5, 2.0, 3.0]), rnd.randint(1, 40),
            rnd.randint(1, 12), rnd.randint(1, 4))


CASES = [random.Random(seed) for seed in range(200)]


@pytest.mark.parametrize("rnd", CASES[:100], ids=lambda r: "")
def test_every_host_once_and_no_batch_over_its_site_or_rack_cap(rnd: random.Random) -> None:
    hosts = fleet(rnd, rnd.randint(0, 300))
    canary, growth, max_batch, per_site, per_rack = batching_args(rnd)
    batches = make_batches(hosts, canary, growth, max_batch, per_site, per_rack)
    names = [h.name for b in batches for h in b]
    assert sorted(names) == sorted(h.name for h in hosts)
    assert all(batches), "an empty batch"
    for batch in batches:
        assert len(batch) <= max_batch
        assert max(Counter(h.site for h in batch).values()) <= per_site
        assert max(Counter((h.site, h.rack) for h in batch).values()) <= per_rack


@pytest.mark.parametrize("rnd", CASES[100:], ids=lambda r: "")
def test_batches_grow_from_the_canary_size_unless_the_caps_leave_fewer(
        rnd: random.Random) -> None:
    hosts = fleet(rnd, rnd.randint(1, 300))
    canary, growth, max_batch, per_site, per_rack = batching_args(rnd)
    batches = make_batches(hosts, canary, growth, max_batch, per_site, per_rack)
    assert len(batches[0]) <= min(canary, max_batch)
    size = float(min(canary, max_batch))
    left = list(hosts)
    for batch in batches:
        limit = max(1, min(max_batch, int(size)))
        assert len(batch) <= limit
        if len(batch) < limit:  # smaller only when no remaining host would fit its caps
            sites = Counter(h.site for h in batch)
            racks = Counter((h.site, h.rack) for h in batch)
            taken = {h.name for h in batch}
            fits = [h for h in left if h.name not in taken and sites[h.site] < per_site
                    and racks[(h.site, h.rack)] < per_rack]
            assert not fits, f"batch of {len(batch)} < {limit} while {fits[0].name} fits"
        left = [h for h in left if h not in batch]
        size = min(float(max_batch), size * growth)


def test_batching_is_deterministic_whatever_the_inventory_order() -> None:
    rnd = random.Random(3)
    hosts = fleet(rnd, 200)
    shuffled = list(hosts)
    rnd.shuffle(shuffled)
    first = make_batches(hosts, 2, 2.0, 30, 4, 2)
    again = make_batches(shuffled, 2, 2.0, 30, 4, 2)
    assert [[h.name for h in b] for b in first] == [[h.name for h in b] for b in again]


@pytest.mark.parametrize("seed", range(60))
def test_controls_are_unchanged_hosts_of_the_canaries_kind_first(seed: int) -> None:
    rnd = random.Random(seed)
    targets = fleet(rnd, rnd.randint(2, 60))
    others = fleet(rnd, rnd.randint(0, 60), prefix="o")
    canary = targets[:rnd.randint(1, 4)]
    ratio = rnd.choice([2, 3, 5])
    controls, reserved = choose_controls(targets, others, canary, ratio)
    names = [h.name for h in controls]
    assert len(names) == len(set(names))
    assert not {h.name for h in canary} & set(names), "a canary is its own control"
    assert {h.name for h in reserved} <= {h.name for h in targets}
    assert {h.name for h in reserved} <= set(names)
    # a target is a control only when the unchanged hosts of its kind ran out
    # (each kind of canary, model and site, gets its share of ratio x canaries)
    kinds = {(h.hardware_model, h.site) for h in canary}
    share = -(-max(2, round(ratio * len(canary))) // len(kinds))
    available = Counter((h.hardware_model, h.site) for h in others)
    if all(available[kind] >= share for kind in kinds):
        assert not reserved
        picked = {(h.hardware_model, h.site) for h in controls}
        assert picked <= kinds, "other kinds picked while enough of the canaries' kind"


@pytest.mark.parametrize("seed", range(30))
def test_the_plan_changes_no_control_before_the_batches_it_serves(seed: int) -> None:
    rnd = random.Random(seed)
    hosts = fleet(rnd, rnd.randint(3, 80))
    targets = hosts[:rnd.randint(3, len(hosts))]
    plan = build_plan(load_profile("home-snoop"), "inventory.yml", "all", targets, hosts,
                      {h.name: {"compliant": False} for h in targets}, rollout_id="batch-1")
    batches = plan["batches"]
    assert sorted(n for b in batches for n in b["hosts"]) == sorted(h.name for h in targets)
    # targets serving as controls are changed last: in the final batches (more than one when
    # the site and rack caps split them), after every other target
    reserved = set(plan["control_reserved_for_last_batch"])
    if reserved:
        first = min(b["index"] for b in batches if reserved & set(b["hosts"]))
        assert all(set(b["hosts"]) <= reserved for b in batches[first:])
    for batch in batches:
        controls = set(controls_for_batch(plan, batch["index"]))
        assert not controls & set(batch["hosts"])
        changed_before = {n for b in batches[:batch["index"]] for n in b["hosts"]}
        assert not controls & changed_before, "a host changed earlier serves as a control"
