"""The plan stored split (store.split_plan / RolloutState.plan_view): a small head, a key per
batch part, a bucket of host infos per ~PLAN_BUCKET hosts, no key growing with the fleet; a
host step reads the head and its host's bucket; the whole document still assembles (and a plan
stored before the split, as one document, still loads). Also: the plan's inventory read from
the host-variable cache equals Ansible's parse (limit patterns included), and the faster
make_batches equals the one it replaced."""
from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from typing import Any, Dict, List, Optional

import pytest
import yaml

from fleet_rollout import hostvars, inventory, store
from fleet_rollout.errors import ConfigError
from fleet_rollout.inventory import FleetHost, load_fleet
from fleet_rollout.plan import (
    batch_of,
    build_plan,
    choose_controls,
    controls_for_batch,
    make_batches,
)
from fleet_rollout.profile import load_profile
from fleet_rollout.store import MemoryStore, PlanView, RolloutState, key


class RecordingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: List[str] = []

    def get(self, name: str) -> Optional[str]:
        self.reads.append(name)
        return super().get(name)


def fleet(n: int, prefix: str = "h", sites: int = 4, racks: int = 30) -> List[FleetHost]:
    return [FleetHost(name=f"{prefix}{i:05d}", bmc_address=f"https://10.0.{i // 250}.{i % 250}",
                      site=f"s{i % sites}", rack=f"r{i // sites % racks}",
                      hardware_model="m1" if i % 3 else "m2", groups=[f"s{i % sites}"])
            for i in range(n)]


def planned(n: int, compliant_every: int = 5, rollout_id: str = "split-1",
            max_batch: int = 100) -> Dict[str, Any]:
    profile = load_profile("home-snoop")
    profile.data["batches"].update({"max_batch": max_batch, "max_unavailable_per_site": 50,
                                    "max_unavailable_per_rack": 4})
    hosts = fleet(n)
    everyone = hosts + fleet(max(4, n // 20), prefix="ctl")
    compliance = {h.name: {"compliant": i % compliant_every == 0} for i, h in enumerate(hosts)}
    plan = build_plan(profile, "inventories/x.yaml", "all", hosts, everyone, compliance,
                      rollout_id=rollout_id, started_by="alice")
    return json.loads(json.dumps(plan))  # as the old single document stored it


def stored(plan: Dict[str, Any]) -> RecordingStore:
    st = RecordingStore()
    RolloutState(st, plan["rollout_id"]).save_plan(plan)
    st.reads.clear()
    return st


def test_round_trip_equals_the_document():
    plan = planned(600)
    st = stored(plan)
    state = RolloutState(st, plan["rollout_id"])
    assert state.plan() == plan
    assert json.loads(json.dumps(state.plan(), sort_keys=True)) == plan
    assert key(plan["rollout_id"], "plan") not in st.data  # the one document is not written
    assert state.plan_exists()
    head = state.plan_head()
    assert "batches" not in head and "hosts" not in head and "skipped_compliant" not in head
    assert head["targets"] == plan["targets"] and head["control"] == plan["control"]
    for batch in plan["batches"]:
        assert state.plan_batch(batch["index"]) == batch["hosts"]
    name = plan["batches"][2]["hosts"][3]
    assert state.plan_host(name) == {"host": plan["hosts"][name], "batch": 2}
    assert state.plan_host("nope") is None
    view = state.plan_view()
    assert view.compliant_count() == len(plan["skipped_compliant"])
    assert view["skipped_compliant"] == plan["skipped_compliant"]
    assert dict(view) == plan and view.full() == plan


def test_partial_and_empty_plans_round_trip():
    for plan in ({"rollout_id": "r-min", "profile": {"name": "p"}, "batches": [], "control": [],
                  "hosts": {}, "targets": 0, "skipped_compliant": [], "inventory": "x",
                  "limit": "all", "created": 0, "started_by": "a"},
                 {"rollout_id": "r-min", "profile": {"name": "p"}},
                 {"rollout_id": "r-min", "profile": {"name": "p"}, "control": [],
                  "batches": [{"index": 0, "hosts": ["a", "b"], "canary": True}]}):
        state = RolloutState(MemoryStore(), "r-min")
        state.save_plan(plan)
        assert state.plan() == plan


def test_big_batches_and_compliant_lists_are_cut_in_parts(monkeypatch):
    monkeypatch.setattr(store, "PLAN_PART", 7)
    plan = planned(300, compliant_every=2, max_batch=40)
    st = stored(plan)
    state = RolloutState(st, plan["rollout_id"])
    assert state.plan() == plan
    rid = plan["rollout_id"]
    for position, batch in enumerate(plan["batches"]):
        parts = -(-len(batch["hosts"]) // 7)
        assert key(rid, "plan", "batch", str(position), str(parts - 1)) in st.data
        assert key(rid, "plan", "batch", str(position), str(parts)) not in st.data
    assert max(len(b["hosts"]) for b in plan["batches"]) > 14
    assert key(rid, "plan", "compliant", "9") in st.data
    assert max(len(json.loads(st.data[k])) for k in st.data if ".plan.compliant." in k) <= 7


def test_a_host_step_reads_the_head_and_its_own_bucket_only():
    plan = planned(2000)
    st = stored(plan)
    rid = plan["rollout_id"]
    name = plan["batches"][5]["hosts"][7]
    view = RolloutState(st, rid).plan_view()
    assert view["profile"] == plan["profile"] and len(view["batches"]) == len(plan["batches"])
    assert view["hosts"].get(name) == plan["hosts"][name]
    assert batch_of(view, name) == 5 == batch_of(plan, name)
    bucket = store.host_bucket(name, view.layout["host_buckets"])
    assert st.reads == [key(rid, "plan", "head"), key(rid, "plan", "hosts", str(bucket))]
    # a batch's hosts through the view: that batch's keys, nothing else
    assert len(view["batches"][5]["hosts"]) == len(plan["batches"][5]["hosts"])
    assert set(st.reads[2:]) == {key(rid, "plan", "batch", "5", "0")}
    assert view.layout["host_buckets"] > 4


def test_batch_of_and_controls_match_the_document():
    plan = planned(900)
    view = RolloutState(stored(plan), plan["rollout_id"]).plan_view()
    for name in list(plan["hosts"])[::37] + plan["control"] + ["nobody"]:
        assert batch_of(view, name) == batch_of(plan, name)
    for index in range(len(plan["batches"])):
        assert controls_for_batch(view, index) == controls_for_batch(plan, index)


def test_controls_reserved_for_the_last_batch():
    profile = load_profile("home-snoop")
    hosts = fleet(40)
    plan = json.loads(json.dumps(build_plan(profile, "x", "all", hosts, hosts,
                                            {h.name: {"compliant": False} for h in hosts},
                                            rollout_id="reserve-1")))
    assert plan["control_reserved_for_last_batch"]
    view = RolloutState(stored(plan), plan["rollout_id"]).plan_view()
    for index in range(len(plan["batches"])):
        assert controls_for_batch(view, index) == controls_for_batch(plan, index)
    for name in plan["control"]:
        assert batch_of(view, name) == batch_of(plan, name)


def _largest(plan: Dict[str, Any]) -> int:
    return max(len(v) for v in stored(plan).data.values())


def test_largest_key_does_not_grow_with_the_fleet():
    small, large = planned(200), planned(2000)
    small_total = sum(len(v) for v in stored(small).data.values())
    large_total = sum(len(v) for v in stored(large).data.values())
    assert large_total > 8 * small_total  # ten times the hosts, about ten times the bytes
    assert _largest(large) < 1.5 * _largest(small)
    assert _largest(large) < 96 * 1024
    head = stored(large).data[key(large["rollout_id"], "plan", "head")]
    assert len(head) < 1.5 * len(stored(small).data[key(small["rollout_id"], "plan", "head")]) \
        + 200 * (len(large["batches"]) - len(small["batches"]))


def test_a_plan_stored_before_the_split_still_loads():
    plan = planned(300)
    st = RecordingStore()
    st.set_json(key(plan["rollout_id"], "plan"), plan)  # the old layout: one document
    state = RolloutState(st, plan["rollout_id"])
    assert state.plan_exists()
    assert state.plan() == plan
    view = state.plan_view()
    name = plan["batches"][1]["hosts"][0]
    assert view["hosts"].get(name) == plan["hosts"][name]
    assert batch_of(view, name) == 1
    assert controls_for_batch(view, 1) == controls_for_batch(plan, 1)
    assert state.plan_batch(1) == plan["batches"][1]["hosts"]
    assert view.compliant_count() == len(plan["skipped_compliant"])


def test_unknown_rollout_has_no_plan():
    state = RolloutState(MemoryStore(), "nothing-here")
    assert not state.plan_exists()
    with pytest.raises(ConfigError, match="no plan"):
        state.plan_view()


def test_report_reads_no_host_infos_nor_compliant_names(tmp_path):
    from fleet_rollout.audit import Audit
    from fleet_rollout.report import render_report

    plan = planned(500)
    st = stored(plan)
    html = render_report(RolloutState(st, plan["rollout_id"]),
                         Audit(MemoryStore(), plan["rollout_id"]))
    assert plan["batches"][-1]["hosts"][-1] in html
    assert f"{len(plan['skipped_compliant'])} hosts skipped" in html
    assert not [k for k in st.reads if ".plan.hosts." in k or ".plan.compliant." in k]


# ------------------------------------------------------------------ make_batches

def _reference_make_batches(hosts, canary_size, growth, max_batch, max_per_site, max_per_rack):
    """make_batches as it was (a full scan of the remaining hosts per batch)."""
    from fleet_rollout.plan import next_batch_size

    by_site: Dict[str, List[FleetHost]] = defaultdict(list)
    for host in sorted(hosts, key=lambda h: (h.site, h.rack, h.name)):
        by_site[host.site].append(host)
    order: List[FleetHost] = []
    while any(by_site.values()):
        for site in sorted(by_site):
            if by_site[site]:
                order.append(by_site[site].pop(0))
    batches = []
    cap = max(1, int(max_batch))
    size = float(min(max(1, canary_size), cap))
    remaining = order
    while remaining:
        limit = max(1, min(cap, int(size)))
        batch: List[FleetHost] = []
        sites: Counter = Counter()
        racks: Counter = Counter()
        rest = []
        for host in remaining:
            rack = (host.site, host.rack)
            if (len(batch) < limit and sites[host.site] < max_per_site
                    and racks[rack] < max_per_rack):
                batch.append(host)
                sites[host.site] += 1
                racks[rack] += 1
            else:
                rest.append(host)
        batches.append(batch)
        remaining = rest
        size = next_batch_size(size, growth, cap)
    return batches


def test_make_batches_equals_the_full_scan():
    rnd = random.Random(7)
    for _ in range(300):
        hosts = [FleetHost(name=f"x{rnd.randint(0, 99999)}-{i}", bmc_address="https://a",
                           site=f"s{rnd.randint(0, rnd.randint(0, 5))}",
                           rack=f"r{rnd.randint(0, rnd.randint(0, 20))}")
                 for i in range(rnd.randint(0, 250))]
        args = (rnd.randint(1, 10), rnd.choice([1, 1.5, 2, 3]), rnd.randint(1, 80),
                rnd.randint(1, 30), rnd.randint(1, 6))
        assert [[h.name for h in b] for b in make_batches(hosts, *args)] == \
            [[h.name for h in b] for b in _reference_make_batches(hosts, *args)]


# ------------------------------------------------------------------ inventory from the cache

INVENTORY = {
    "all": {
        "hosts": {"lone-1": {"bmc_address": "https://10.9.0.1", "site": "s9"}},
        "vars": {"hardware_model": "generic"},
        "children": {
            "site_a": {
                "vars": {"site": "a"},
                "children": {
                    "rack_1": {"hosts": {"web-01": {"bmc_address": "https://10.0.0.1"},
                                         "web-02": {"bmc_address": "https://10.0.0.2",
                                                    "bmc_vendor": "dell"}},
                               "vars": {"rack": "1"}},
                    "rack_2": {"hosts": {"web-03": {"bmc_address": "https://10.0.0.3"}},
                               "vars": {"rack": 2}},
                }},
            "site_b": {
                "vars": {"site": "b", "bmc_credential": "b-cred"},
                "hosts": {"db.b-1": {"bmc_address": "https://10.1.0.1", "rack": "7",
                                     "hardware_model": "R740"},
                          "db.b-2": {"bmc_address": "https://10.1.0.2:8443"}}},
            "databases": {"hosts": {"db.b-1": None, "web-03": None}},
            "empty_group": {"hosts": {}},
        }}}

PLAIN = ["all", "", "site_a", "rack_1", "web-01", "db.b-1", "site_a,site_b", "site_a,!web-01",
         "site_a,&databases", "!site_a", "&databases", "ungrouped", " web-01 , web-02 ",
         "databases,!rack_2", "web-01,!web-01", "site_b,lone-1"]
OTHER = ["web-0*", "~web-0[12]", "site_a[0:1]", "site_a:site_b", "nomatch", "site_a,nomatch",
         "empty_group", "&empty_group", "localhost", "site_a:&databases", "*"]


@pytest.fixture()
def source(tmp_path):
    path = tmp_path / "inv" / "hosts.yml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(INVENTORY))
    return str(path)


def _outcome(fn):
    try:
        return fn()
    except ConfigError as err:
        return ("error", str(err))


@pytest.mark.parametrize("limit", PLAIN + OTHER)
def test_cached_fleet_equals_the_parse(source, tmp_path, limit, monkeypatch):
    cache = str(tmp_path / "cache")
    parsed = _outcome(lambda: load_fleet(source, limit))
    load_fleet(source, "all", cache_hostvars=True, cache_dir=cache)  # cold: parse, store
    assert hostvars.fleet_cache(source, cache) is not None
    parses = []
    real = inventory._load
    monkeypatch.setattr(inventory, "_load", lambda src: parses.append(src) or real(src))
    cached = _outcome(lambda: load_fleet(source, limit, cache_hostvars=True, cache_dir=cache))
    assert cached == parsed
    if limit in PLAIN:
        assert parses == []  # answered by the cache, no Ansible parse


def test_every_host_and_its_groups_come_from_the_cache(source, tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    everyone, chosen = load_fleet(source, "all", cache_hostvars=True, cache_dir=cache)
    monkeypatch.setattr(inventory, "_load", lambda src: pytest.fail("parsed again"))
    again = load_fleet(source, "site_b", cache_hostvars=True, cache_dir=cache)
    assert again[0] == everyone
    assert [h.name for h in again[1]] == ["db.b-1", "db.b-2"]
    db = {h.name: h for h in everyone}["db.b-1"]
    assert db.groups == ["databases", "site_b"] and db.bmc_credential == "b-cred"
    assert {h.name: h for h in everyone}["lone-1"].groups == ["ungrouped"]


def test_a_changed_inventory_is_parsed_again(source, tmp_path):
    cache = str(tmp_path / "cache")
    load_fleet(source, "all", cache_hostvars=True, cache_dir=cache)
    doc = json.loads(json.dumps(INVENTORY))
    doc["all"]["children"]["site_b"]["hosts"]["db.b-3"] = {"bmc_address": "https://10.1.0.3"}
    with open(source, "w") as handle:
        yaml.safe_dump(doc, handle)
    os.utime(source, ns=(1, 1))  # a different mtime whatever the clock's resolution
    everyone, chosen = load_fleet(source, "site_b", cache_hostvars=True, cache_dir=cache)
    assert [h.name for h in chosen] == ["db.b-1", "db.b-2", "db.b-3"]
    assert _outcome(lambda: load_fleet(source, "site_b")) == (everyone, chosen)


def test_an_inventory_load_fleet_refuses_is_never_answered_from_the_cache(tmp_path):
    doc = json.loads(json.dumps(INVENTORY))
    doc["all"]["children"]["site_b"]["hosts"]["db.b-2"]["bmc_address"] = "ftp://10.1.0.2"
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(doc))
    cache = str(tmp_path / "cache")
    hostvars.build(str(path), cache)  # as a host step would store it
    assert hostvars.fleet_cache(str(path), cache) is None
    parsed = _outcome(lambda: load_fleet(str(path)))
    assert parsed[0] == "error" and "db.b-2" in parsed[1]
    assert _outcome(lambda: load_fleet(str(path), cache_hostvars=True, cache_dir=cache)) == parsed


def test_plain_pattern():
    assert inventory.plain_pattern("a, !b,&c") == ["a", "!b", "&c"]
    assert inventory.plain_pattern("") == ["all"]
    for other in ("a*", "~a", "a[0]", "a:b", "@f", "a b", "!!a", ",", "a,,b*"):
        assert inventory.plain_pattern(other) is None, other


def test_plan_view_is_a_mapping():
    plan = planned(100)
    view = RolloutState(stored(plan), plan["rollout_id"]).plan_view()
    assert isinstance(view, PlanView) and bool(view)
    assert set(view) == set(plan) and "hosts" in view and "nothing" not in view
    assert view.get("nothing") is None and view.get("limit") == "all"
    assert len(view["hosts"]) == len(plan["hosts"])
    assert sorted(view["hosts"]) == sorted(plan["hosts"])


def _host(name: str, site: str, model: str) -> FleetHost:
    return FleetHost(name=name, bmc_address=f"https://{name}.bmc", site=site, rack=f"r-{name}",
                     hardware_model=model)


def test_controls_are_unchanged_hosts_of_the_canaries_site_and_model_first() -> None:
    """choose_controls on its own (no plan, no BMC): for each (model, site) of the canary,
    ratio x canaries controls, taken from hosts outside the rollout of the same model and site,
    then of the same model anywhere, then any; only when those run out are targets reserved
    (the last batch's, named last first), never a canary."""
    canary = [_host("t1", "fra", "r640"), _host("t2", "ams", "r640")]
    targets = canary + [_host(f"t{i}", "fra", "r640") for i in range(3, 7)]
    others = ([_host(f"o{i}", "fra", "r640") for i in range(3)]
              + [_host(f"p{i}", "ams", "r650") for i in range(4)]
              + [_host(f"q{i}", "ams", "r640") for i in range(1)])
    controls, reserved = choose_controls(targets, others, canary, ratio=2)
    names = [h.name for h in controls]
    # 4 wanted, 2 per group: (r640, ams) gets its one host of that site, then one more r640 (fra);
    # (r640, fra) gets two of fra
    assert sorted(names) == ["o0", "o1", "o2", "q0"] and reserved == []
    assert not {"t1", "t2"} & set(names)
    # one unchanged r640 host for 6 wanted: the rest come from the targets, the last ones
    # first, until none is left (5 in all: the canaries are never controls)
    controls, reserved = choose_controls(targets, others[:1], canary, ratio=3)
    names = [h.name for h in controls]
    assert [h.name for h in reserved] == ["t6", "t5", "t4", "t3"]
    assert sorted(names) == ["o0", "t3", "t4", "t5", "t6"]
