"""The plan's duration estimate (estimate.py): per-batch parts add up to the totals, each profile
knob moves the estimate the right way, and the batch table names every batch.

Built on real plans (plan.build_plan over the shipped home-snoop profile, synthetic FleetHosts);
nothing touches a BMC or StackStorm."""
from __future__ import annotations

import copy
from typing import Any, Dict, List

import pytest

from fleet_rollout import service
from fleet_rollout.estimate import (
    Assumptions,
    approval_needed,
    duration,
    estimate_plan,
    render_estimate,
    waves,
)
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.states import HOST_STEPS

PARTS = ("approval_wait", "overhead", "windows", "window_runs", "host_work", "soak")


def fleet(n: int, sites: int = 20, racks: int = 40) -> List[FleetHost]:
    return [FleetHost(name=f"h{i:05d}", bmc_address=f"10.{i // 62500}.{i // 250 % 250}."
                      f"{i % 250}", site=f"s{i % sites:02d}", rack=f"r{i // sites % racks:02d}",
                      hardware_model="m1") for i in range(n)]


def planned(n: int, sites: int = 20) -> Dict[str, Any]:
    hosts = fleet(n, sites)
    return build_plan(load_profile("home-snoop"), "inventories/x.yaml", "all", hosts, hosts,
                      {h.name: {"compliant": False} for h in hosts}, rollout_id="est-1")


@pytest.fixture(scope="module")
def big() -> Dict[str, Any]:
    return planned(20000)


@pytest.fixture(scope="module")
def small() -> Dict[str, Any]:
    return planned(300, sites=6)


def with_profile(plan: Dict[str, Any], section: str, **values: Any) -> Dict[str, Any]:
    changed = dict(plan, profile=copy.deepcopy(plan["profile"]))
    changed["profile"][section].update(values)
    return changed


def test_totals_are_the_sums_of_the_batches(big: Dict[str, Any]) -> None:
    est = estimate_plan(big)
    rows, totals = est["batches"], est["totals"]
    assert len(rows) == len(big["batches"]) > 400
    assert totals["hosts"] == sum(len(b["hosts"]) for b in big["batches"]) == big["targets"]
    for part in PARTS:
        assert totals[part] == pytest.approx(sum(r[part] for r in rows))
    for row in rows:
        assert row["seconds"] == pytest.approx(sum(row[p] for p in PARTS))
        assert row["best_case"] == pytest.approx(row["seconds"] - row["approval_wait"])
        assert row["waves"] == waves(row["hosts"], est["parallel"])
        assert row["host_work"] == pytest.approx(row["waves"] * est["per_host"])
    assert totals["expected"] == pytest.approx(sum(totals[p] for p in PARTS))
    assert totals["expected"] == pytest.approx(rows[-1]["cumulative"])
    assert totals["best_case"] == pytest.approx(totals["expected"] - totals["approval_wait"])
    assert est["per_host"] == pytest.approx(sum(est["host_steps"].values()))
    assert tuple(est["host_steps"]) == HOST_STEPS
    # 20,000 hosts at at most 2 per site and 1 per rack: weeks, not hours
    assert totals["expected_days"] > 7


def test_expected_parts_follow_the_profile(small: Dict[str, Any]) -> None:
    est = estimate_plan(small)
    profile = small["profile"]
    row = est["batches"][1]
    # the pre window lasts canary.pre_windows windows (default 3), the post window one
    assert profile["canary"]["pre_windows"] == 3
    assert row["windows"] == 4 * profile["canary"]["window_seconds"]
    one = estimate_plan(with_profile(small, "canary", pre_windows=1))["batches"][1]
    assert one["windows"] == 2 * profile["canary"]["window_seconds"]
    # 2 fewer pre windows of 4 steps: 8 fewer collections (each an action start)
    assert row["overhead"] - one["overhead"] == pytest.approx(8 * Assumptions().action_start)
    assert row["soak"] == profile["canary"]["soak_seconds"]
    assert row["approval_wait"] == Assumptions().approval_response
    assert est["assumptions"]["approval_response"] == 600.0


def test_window_runs_follow_the_collected_hosts_and_the_forks() -> None:
    """Each window's start and read are Ansible runs over the batch's hosts and its controls,
    up to 100 at a time (ansible_forks if more, as the host side runs them): the pre window's
    start run and the post window's read beyond its lead add to the batch (the pre window's
    read is in the soak); with no approval between two batches, the later one's pre window
    starts in the post window before it: neither of those two adds anything."""
    from fleet_rollout.hostside.playbook_steps import HostSide
    from fleet_rollout.plan import controls_for_batch
    from fleet_rollout.profile import SAMPLE_FORKS, read_lead, step_seconds, window_forks

    profile = load_profile("home-snoop")
    profile.data["batches"].update({"canary_size": 20, "max_batch": 120, "parallel": 40,
                                    "max_unavailable_per_site": 120,
                                    "max_unavailable_per_rack": 30})
    hosts = fleet(600, sites=2, racks=12)
    # 300 targets, the other 300 unchanged: controls for every batch
    small = build_plan(profile, "inventories/x.yaml", "all", hosts[:300], hosts,
                       {h.name: {"compliant": False} for h in hosts[:300]}, rollout_id="est-w")
    assume = Assumptions(ansible_run=4.0)
    lead = read_lead(step_seconds(small["profile"]["canary"]))
    for forks in (1, 5, 20, 500):
        est = estimate_plan(small, assume, forks=forks)
        assert est["forks"] == forks
        for row in est["batches"]:
            collected = row["hosts"] + len(controls_for_batch(small, row["index"]))
            assert row["collected"] == collected
            at_once = max(forks, min(collected, SAMPLE_FORKS))
            assert window_forks(forks, collected) == at_once
            run = -(-collected // at_once) * assume.ansible_run
            assert row["window_runs"] == pytest.approx(round(run + max(0.0, run - lead), 1))
    assert max(r["collected"] for r in est["batches"]) > SAMPLE_FORKS
    few, many = (estimate_plan(small, assume, forks=f)["totals"] for f in (5, 500))
    assert few["window_runs"] > many["window_runs"] > 0
    # fewer forks: longer counter runs, and each wave's Ansible runs in more rounds
    assert few["host_work"] > many["host_work"]
    assert few["expected"] - many["expected"] == pytest.approx(
        few["window_runs"] - many["window_runs"] + few["host_work"] - many["host_work"])
    # a run that ends within the lead adds nothing but the pre window's start
    quick = estimate_plan(small, Assumptions(ansible_run=lead / 2), forks=500)
    assert max(r["collected"] for r in quick["batches"]) <= 500  # one run's forks
    assert quick["totals"]["window_runs"] == pytest.approx(len(quick["batches"]) * lead / 2)
    # no approvals: each batch's pre window starts in the batch before's post window (its
    # start and that window's read add nothing), the first's start and the last's read do
    auto = dict(small, profile=dict(small["profile"], approval=dict(
        small["profile"]["approval"], required=False)))
    rows = estimate_plan(auto, assume, forks=500)["batches"]
    runs = [-(-r["collected"] // 500) * assume.ansible_run for r in rows]
    assert [r["window_runs"] for r in rows] == pytest.approx(
        [runs[0]] + [0.0] * (len(rows) - 2) + [max(0.0, runs[-1] - lead)], abs=0.05)
    assert "for their Ansible runs, up to 100 host(s) at once" in render_estimate(
        estimate_plan(small, assume, forks=5))
    assert "up to 500 host(s) at once" in render_estimate(estimate_plan(small, forks=500))
    # the rule the host side runs windows by
    side = HostSide("inventories/x.yaml", forks=20)
    assert side._sample_forks([f"h{i}" for i in range(250)]) == window_forks(20, 250) == 100
    assert side._sample_forks(["a", "b"]) == window_forks(20, 2) == 20


def test_more_soak_takes_longer(small: Dict[str, Any]) -> None:
    base = estimate_plan(small)["totals"]
    longer = estimate_plan(with_profile(small, "canary", soak_seconds=3600))["totals"]
    assert longer["soak"] > base["soak"]
    assert longer["expected"] - base["expected"] == pytest.approx(
        (3600 - small["profile"]["canary"]["soak_seconds"]) * base["batches"])
    wider = estimate_plan(with_profile(small, "canary", window_seconds=600))["totals"]
    assert wider["windows"] > base["windows"] and wider["expected"] > base["expected"]


def test_approvals_cost_time_only_when_required(small: Dict[str, Any]) -> None:
    base = estimate_plan(small)
    assert base["batches"][0]["approval_wait"] > 0
    auto = estimate_plan(with_profile(small, "approval", auto_approve_canary=True))
    assert auto["batches"][0]["approval_wait"] == 0
    assert auto["totals"]["expected"] < base["totals"]["expected"]
    none = estimate_plan(with_profile(small, "approval", required=False))
    assert none["totals"]["approval_wait"] == 0
    # and the batches' pre windows start in the post windows before them (their start runs
    # and those windows' reads are hidden): less than every approval answered at once
    saved = base["totals"]["window_runs"] - none["totals"]["window_runs"]
    assert saved > 0 and none["totals"]["expected"] == pytest.approx(
        base["totals"]["best_case"] - saved)
    slow = estimate_plan(small, Assumptions(approval_response=3600))
    assert slow["totals"]["expected"] > base["totals"]["expected"]
    assert slow["totals"]["best_case"] == pytest.approx(base["totals"]["best_case"])
    # an approver slower than the question's ttl: the wait ends at the ttl, and a note says so
    short = estimate_plan(with_profile(small, "approval", ttl_minutes=5))
    assert short["batches"][1]["approval_wait"] == 300
    assert any("ttl" in note for note in short["notes"])


def test_approval_rule_is_the_services(small: Dict[str, Any]) -> None:
    for required in (True, False):
        for auto in (True, False):
            profile = with_profile(small, "approval", required=required,
                                   auto_approve_canary=auto)["profile"]
            for index in (0, 1, 5):
                assert approval_needed(profile, index) == service.needs_approval(profile, index)


def test_more_hosts_at_once_take_less_time(small: Dict[str, Any]) -> None:
    base = estimate_plan(small)
    wide = estimate_plan(with_profile(small, "batches", parallel=100))
    narrow = estimate_plan(with_profile(small, "batches", parallel=1))
    assert wide["totals"]["waves"] == len(small["batches"])
    assert narrow["totals"]["waves"] == small["targets"]
    assert wide["totals"]["expected"] < base["totals"]["expected"] < \
        narrow["totals"]["expected"]
    assert all(r["in_flight"] <= 1 for r in narrow["batches"])


def test_fewer_unavailable_per_site_means_more_batches_and_longer() -> None:
    hosts = fleet(400, sites=4)
    compliance = {h.name: {"compliant": False} for h in hosts}
    tight, loose = load_profile("home-snoop"), load_profile("home-snoop")
    tight.data["batches"].update(max_unavailable_per_site=2)
    loose.data["batches"].update(max_unavailable_per_site=10, max_unavailable_per_rack=10)
    one = estimate_plan(build_plan(tight, "x", "all", hosts, hosts, compliance, "t-1"))
    two = estimate_plan(build_plan(loose, "x", "all", hosts, hosts, compliance, "t-2"))
    assert one["totals"]["batches"] > two["totals"]["batches"]
    assert one["totals"]["expected"] > two["totals"]["expected"]


def test_reboot_time_is_capped_by_the_boot_timeout(small: Dict[str, Any]) -> None:
    slow = estimate_plan(small, Assumptions(reboot=5000))
    assert slow["host_steps"]["wait"] < 5000  # home-snoop: boot_timeout 900
    base = estimate_plan(small)
    assert base["host_steps"]["wait"] < slow["host_steps"]["wait"]


def test_the_table_names_every_batch(small: Dict[str, Any]) -> None:
    est = estimate_plan(small)
    table = render_estimate(est)
    lines = table.splitlines()
    for row in est["batches"]:
        label = f"{row['index'] + 1}{'*' if row['canary'] else ''}"
        assert any(line.split()[0] == label and int(line.split()[1]) == row["hosts"]
                   for line in lines[1:]), label
    assert sum(1 for line in lines[1:] if line.split()[0].rstrip("*").isdigit()) == \
        len(est["batches"])
    assert f"expected {duration(est['totals']['expected'])}" in table
    assert "best case" in table and "assumed: an approver answers in 10m00s" in table


def test_duration_text() -> None:
    assert [duration(s) for s in (0, 45, 450, 7500, 3 * 86400 + 4 * 3600 + 59)] == \
        ["0s", "45s", "7m30s", "2h05m", "3d04h"]


def test_empty_plan(small: Dict[str, Any]) -> None:
    est = estimate_plan(dict(small, batches=[]))
    assert est["totals"]["expected"] == 0 and est["batches"] == []
    assert "0 batch(es)" in render_estimate(est)


def planning(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Dict[str, Any]:
    """A pack config whose 30 hosts plan without an inventory file or a BMC."""
    hosts = fleet(30, sites=3, racks=7)
    monkeypatch.setattr(service, "load_fleet", lambda source, *args, **kwargs: (hosts, hosts))
    # no inventory file is read here (load_fleet is replaced): no host variables to check
    monkeypatch.setattr(service, "check_connections", lambda *args: None)
    monkeypatch.setattr(service, "check_desired",
                        lambda endpoint, bios: {"compliant": False, "vendor": "generic"})
    return {"credentials": {"default": {"username": "u", "password": "p"}},
            "bmc_networks": ["10.0.0.0/8"],
            "state_dir": str(tmp_path), "inventory": str(tmp_path / "inv.yml"),
            "approvers": ["alice"]}


def test_the_plan_action_result_carries_the_estimate(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet_rollout.store import MemoryStore, RolloutState

    config = planning(tmp_path, monkeypatch)
    store = MemoryStore()
    result = service.plan_rollout(config, store, "home-snoop", "all", "est-2", "alice")
    assert result["estimate"]["totals"]["batches"] == result["batches"]
    assert result["estimate"]["totals"]["hosts"] == result["targets"] == 30
    assert result["batch_table"] == render_estimate(result["estimate"])
    stored = RolloutState(store, "est-2").plan()
    assert "estimate" not in stored and "batch_table" not in stored
    assert estimate_plan(stored) == result["estimate"]


def test_a_plan_task_run_twice_plans_one_rollout(tmp_path: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """StackStorm's scheduler can dispatch one task twice: the rollout workflow's plan task
    run again finds its own plan (same id, same result, nothing rewritten); another workflow or
    a plan on its own is refused that id."""
    from fleet_rollout.errors import ConfigError
    from fleet_rollout.store import MemoryStore, RolloutState

    config = planning(tmp_path, monkeypatch)
    store = MemoryStore()
    workflow = "6b15d302282e2840fb0622e2"
    first = service.plan_rollout(config, store, "home-snoop", "all", None, "alice",
                                 workflow=workflow)
    assert first["rollout_id"] == f"home-snoop-{workflow}"
    state = RolloutState(store, first["rollout_id"])
    state.update_meta(status="running")  # the workflow went on before the second run
    again = service.plan_rollout(config, store, "home-snoop", "all", None, "alice",
                                 workflow=workflow)
    assert again == first
    assert state.meta()["status"] == "running"
    with pytest.raises(ConfigError, match="exists already"):
        service.plan_rollout(config, store, "home-snoop", "all", first["rollout_id"],
                             "alice", workflow="6b15d321282e2840fb0622e5")
    with pytest.raises(ConfigError, match="exists already"):
        service.plan_rollout(config, store, "home-snoop", "all", first["rollout_id"], "alice")
    alone = service.plan_rollout(config, store, "home-snoop", "all", None, "alice")
    assert alone["rollout_id"] != first["rollout_id"]


def test_host_work_is_never_faster_than_the_controller() -> None:
    """Many hosts in flight: the action runners' CPU, not the reboots, sets the pace. A batch's
    host work is at least hosts x controller CPU per host / controller cores."""
    from dataclasses import replace

    from fleet_rollout.estimate import controller_bound

    profile = load_profile("home-snoop")
    profile.data["batches"].update({"canary_size": 100, "max_batch": 200, "parallel": 1000,
                                    "max_unavailable_per_site": 200,
                                    "max_unavailable_per_rack": 50})
    hosts = fleet(300, sites=2, racks=6)
    plan = build_plan(profile, "inventories/x.yaml", "all", hosts, hosts,
                      {h.name: {"compliant": False} for h in hosts}, rollout_id="est-cpu")
    busy = Assumptions(reboot=30, controller_cpu_per_host=10.0, controller_cores=2)
    est = estimate_plan(plan, busy)
    largest = max(est["batches"], key=lambda r: r["hosts"])
    assert largest["waves"] == 1 and largest["hosts"] >= 40
    assert largest["host_work"] == round(controller_bound(largest["hosts"], busy), 1)
    assert largest["host_work"] > largest["waves"] * est["per_host"]
    roomy = estimate_plan(plan, replace(busy, controller_cores=100000))
    wide = max(roomy["batches"], key=lambda r: r["hosts"])
    # the wave of 200 runs its Ansible steps in ceil(200 / forks) rounds
    assert wide["host_work"] == round(wide["waves"] * roomy["wave_seconds"], 1)
    assert roomy["wave_seconds"] > roomy["per_host"]
    assert "10 CPU-s per host on 2 core(s)" in render_estimate(est)
    assert estimate_plan(plan)["assumptions"]["controller_cores"] >= 1  # this machine's
