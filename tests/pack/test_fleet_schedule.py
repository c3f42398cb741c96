"""Fleet-scale planning: capacity limits as shares of each site's and rack's inventory hosts,
sites changing at once, promotion of batches by the judge, pause and resume between batches,
maintenance windows per site (time zones from the inventory), and the estimate against the
capacity bound, including the 20,000-host example (100 sites of 200 servers, 5% of a site at
once, the first 3 batches approved by a human: at most 24 hours, within 1.3 of the bound).

Plain Python over real plans (plan.build_plan on synthetic FleetHosts) and a MemoryStore;
nothing touches a BMC or StackStorm."""
from __future__ import annotations

import copy
import datetime
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from zoneinfo import ZoneInfo

from fleet_rollout import approvals, claims, gate, maintenance, service, windows
from fleet_rollout.errors import ConfigError
from fleet_rollout.estimate import Assumptions, approval_needed, estimate_plan, render_estimate
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import build_plan, make_batches
from fleet_rollout.profile import Profile, load_profile, validate_profile
from fleet_rollout.site_limits import caps, share
from fleet_rollout.states import FAILED, LEFT_DRAINED
from fleet_rollout.store import MemoryStore, RolloutState

# the example's assumptions, stated: the pack config's ansible_forks for waves of 1,000 hosts,
# and the default ones (approver 10 min, reboot 5 min, drain 1 min) on a 2-core controller
EXAMPLE_FORKS = 100
EXAMPLE_ASSUMPTIONS = Assumptions(controller_cores=2)


def site_fleet(sites: int, per_site: int, racks: int = 10, zones: Optional[List[str]] = None,
               prefix: str = "") -> List[FleetHost]:
    """`sites` sites of `per_site` servers in `racks` racks each; site k in zones[k % len]."""
    out = []
    for s in range(sites):
        for i in range(per_site):
            out.append(FleetHost(
                name=f"{prefix}s{s:03d}-{i:04d}", bmc_address="https://10.0.0.1",
                site=f"s{s:03d}", rack=f"r{i % racks:02d}", hardware_model="m1",
                timezone=zones[s % len(zones)] if zones else None))
    return out


def profile_with(name: str = "home-snoop-fleet", **sections: Dict[str, Any]) -> Profile:
    base = load_profile(name)
    data = {k: copy.deepcopy(v) for k, v in base.data.items() if k != "path"}
    for section, values in sections.items():
        data[section] = dict(data.get(section) or {}, **values)
    return Profile(base.name, base.path, validate_profile(data, f"{name} (test)"))


def planned(profile: Profile, targets: List[FleetHost], everyone: Optional[List[FleetHost]]
            = None, start: Optional[float] = None, forks: int = EXAMPLE_FORKS) -> Dict[str, Any]:
    return build_plan(profile, "inventories/x.yaml", "all", targets, everyone or targets,
                      {h.name: {"compliant": False} for h in targets}, rollout_id="fleet-1",
                      started_by="alice", forks=forks, start=start)


def at(text: str, zone: str = "UTC") -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


# ------------------------------------------------------------------ the 20,000-host example


@pytest.fixture(scope="module")
def example() -> Dict[str, Any]:
    return planned(profile_with(), site_fleet(100, 200), start=at("2026-12-07 08:00"))


def test_the_20000_host_example_takes_at_most_a_day_within_1_3_of_the_capacity_bound(
        example: Dict[str, Any]) -> None:
    est = estimate_plan(example, EXAMPLE_ASSUMPTIONS, forks=EXAMPLE_FORKS)
    totals = est["totals"]
    assert totals["hosts"] == 20000
    assert totals["expected_hours"] <= 24.0
    assert totals["bound"] > 0 and totals["bound_ratio"] <= 1.3
    assert totals["bound_ratio"] == pytest.approx(totals["expected"] / totals["bound"], abs=1e-3)
    # the bound: 5% of 200 = 10 servers per site at once, so 20 rounds of the fleet's 100 sites
    assert len(example["bound_batches"]) == 20
    assert all(b["hosts"] == 1000 for b in example["bound_batches"])
    # only the first 3 batches wait for a human
    waited = [r["index"] for r in est["batches"] if r["approval_wait"] > 0]
    assert waited == [0, 1, 2]
    text = render_estimate(est)
    assert "capacity bound" in text and "ratio" in text


def test_the_bound_never_exceeds_the_estimate_and_a_ramp_costs_time(
        example: Dict[str, Any]) -> None:
    est = estimate_plan(example, EXAMPLE_ASSUMPTIONS, forks=EXAMPLE_FORKS)
    slow = profile_with(batches={"growth": 2})
    ramp = estimate_plan(planned(slow, site_fleet(100, 200), start=at("2026-12-07 08:00")),
                         EXAMPLE_ASSUMPTIONS, forks=EXAMPLE_FORKS)
    assert est["totals"]["bound"] <= est["totals"]["expected"]
    assert ramp["totals"]["bound"] == pytest.approx(est["totals"]["bound"])
    assert ramp["totals"]["batches"] > est["totals"]["batches"]
    assert ramp["totals"]["expected"] > est["totals"]["expected"]


# ------------------------------------------------------------------ capacity limits


def test_a_share_is_rounded_down_and_never_nothing() -> None:
    assert share("5%", 200) == 10 and share("5%", 39) == 1 and share("5%", 10) == 1
    assert share("12.5%", 80) == 10 and share("100%", 7) == 7 and share(3, 200) == 3


@pytest.mark.parametrize("field", ["max_unavailable_per_site", "max_unavailable_per_rack"])
@pytest.mark.parametrize("value", ["0%", "5", "101%", "5 %", "-1%", 0])
def test_a_bad_limit_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"batches.{field}"):
        profile_with(batches={field: value})


def test_no_batch_exceeds_a_sites_or_racks_share_of_its_inventory_hosts() -> None:
    """Shares count every inventory host of the site (targets or not): a site of 400 servers
    of which 100 are targets may have 20 out at 5%."""
    everyone = site_fleet(6, 400, racks=8)
    targets = [h for h in everyone if int(h.name[-4:]) // 8 % 4 == 0]  # every rack
    plan = planned(profile_with(batches={"canary_size": 5, "max_unavailable_per_rack": "10%"}),
                   targets, everyone)
    limits = caps(plan["profile"]["batches"], everyone)
    assert limits.site_cap("s000") == 20 and limits.rack_cap("s000", "r00") == 5
    seen = set()
    largest = 0
    for batch in plan["batches"]:
        infos = [plan["hosts"][h] for h in batch["hosts"]]
        for site, count in Counter(i["site"] for i in infos).items():
            assert count <= limits.site_cap(site)
        for (site, rack), count in Counter((i["site"], i["rack"]) for i in infos).items():
            assert count <= limits.rack_cap(site, rack)
        largest = max(largest, len(batch["hosts"]))
        seen.update(batch["hosts"])
    assert seen == {h.name for h in targets} - set(plan["control"])
    assert largest == 6 * 20  # batches grow to what the limits allow
    assert all(plan["hosts"][h]["site_cap"] == 20 for h in plan["batches"][1]["hosts"])


def test_sites_changing_at_once_are_limited() -> None:
    hosts = site_fleet(7, 40, racks=4)
    batches = make_batches(hosts, 1, 10, 1000, caps({"max_unavailable_per_site": "25%",
                                                     "max_unavailable_per_rack": "100%",
                                                     "max_sites": 2, "parallel": 10}, hosts))
    assert max(len({h.site for h in b}) for b in batches) == 2
    assert max(len(b) for b in batches) == 20
    assert sorted(h.name for b in batches for h in b) == sorted(h.name for h in hosts)


def test_a_batch_that_would_exceed_a_share_with_hosts_still_out_asks_a_human(
        tmp_path: Path) -> None:
    """Across batches: hosts of the rollout still out (failed, left drained) count against
    their site's share, so the next batch waits for an approver who is told why."""
    profile = profile_with(batches={"canary_size": 10, "growth": 1,
                                    "max_unavailable_per_site": "5%"},
                           approval={"required": False})
    plan, store, config = stored(tmp_path, profile, site_fleet(2, 100, racks=2))
    state = RolloutState(store, "fleet-1")
    first = plan["batches"][0]["hosts"]
    assert service.batch_info(config, store, "fleet-1", 0)["approval_required"] is False
    state.update_batch(0, lambda b: b.update(verdict={"verdict": "PASS"}))
    assert service.batch_info(config, store, "fleet-1", 1)["approval_required"] is False
    for host, status in zip(first[:2], (FAILED, LEFT_DRAINED)):
        state.save_host(host, dict(state.host(host), status=status))
    info = service.batch_info(config, store, "fleet-1", 1)
    assert info["approval_required"] is True
    assert "with hosts still out: site s00" in info["message"]


# ------------------------------------------------------------------ promotion


def test_manual_batches_then_promotion_and_big_batches_ask() -> None:
    rule = profile_with(approval={"manual_batches": 2, "manual_above_hosts": 500}).data
    assert [approval_needed(rule, i, 10) for i in range(4)] == [True, True, False, False]
    assert approval_needed(rule, 5, 501) and not approval_needed(rule, 5, 500)
    every = profile_with(approval={"manual_batches": None}).data
    assert all(approval_needed(every, i, 1) for i in range(5))
    none = profile_with(approval={"required": False}).data
    assert not any(approval_needed(none, i, 10 ** 5) for i in range(5))
    canary = profile_with(approval={"manual_batches": 3, "auto_approve_canary": True}).data
    assert [approval_needed(canary, i, 1) for i in range(4)] == [False, True, True, False]


def stored(tmp_path: Path, profile: Profile, hosts: List[FleetHost],
           start: Optional[float] = None) -> Any:
    plan = planned(profile, hosts, start=start, forks=20)
    store = MemoryStore()
    RolloutState(store, "fleet-1").save_plan(plan)
    RolloutState(store, "fleet-1").update_meta(status="running", started_by="alice")
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state"), "operators": ["alice"],
              "approvers": ["bob"]}
    return plan, store, config


def test_a_batch_after_a_pass_is_promoted_by_the_judge_and_after_inconclusive_by_a_human(
        tmp_path: Path) -> None:
    profile = profile_with(batches={"canary_size": 2, "growth": 1},
                           approval={"manual_batches": 1})
    _plan, store, config = stored(tmp_path, profile, site_fleet(2, 20, racks=2))
    state = RolloutState(store, "fleet-1")
    ctx = service.context(config, store, "fleet-1")
    assert service.approval_reasons(ctx, 0, 2) == ["the first 1 batch(es) are approved by a "
                                                   "human"]
    assert service.promotion(ctx, 0)["by"] == "profile"
    state.update_batch(0, lambda b: b.update(verdict={"verdict": "PASS"}))
    assert service.approval_reasons(ctx, 1, 2) == []
    assert service.promotion(ctx, 1)["by"] == "judge"
    info = service.batch_info(config, store, "fleet-1", 1)
    assert info["approval_required"] is False
    assert "Promoted by the judge (batch 1: PASS)" in info["message"]
    # an INCONCLUSIVE verdict: the batch after goes on only on a human's `proceed`
    state.update_batch(1, lambda b: b.update(verdict={"verdict": "INCONCLUSIVE"}))
    assert "batch 2 has no PASS verdict" in service.approval_reasons(ctx, 2, 2)
    state.update_batch(1, lambda b: b.update(verdict={"verdict": "FAIL"}))
    assert "batch 2 has no PASS verdict" in service.approval_reasons(ctx, 2, 2)
    state.update_batch(1, lambda b: b.update(verdict={"verdict": "INCONCLUSIVE"}))
    state.update_batch(1, lambda b: b.update(answers=[{"approved": True, "choice": "proceed",
                                                       "by": "bob"}]))
    assert service.approval_reasons(ctx, 2, 2) == []
    assert service.promotion(ctx, 2)["by"] == "bob"


def test_a_batch_with_hosts_another_rollout_holds_asks_a_human_naming_them(
        tmp_path: Path) -> None:
    profile = profile_with(batches={"canary_size": 2, "growth": 1},
                           approval={"required": False})
    _plan, store, config = stored(tmp_path, profile, site_fleet(2, 20, racks=2))
    ctx = service.context(config, store, "fleet-1")
    hosts = gate.batch_hosts(ctx, 0)
    assert service.approval_reasons(ctx, 0, len(hosts)) == []
    claims.claim(store, hosts[0], "other-7")
    reasons = service.approval_reasons(ctx, 0, len(hosts))
    assert reasons == [f"1 host(s) held by another rollout, whose steps here are refused: "
                       f"{hosts[0]} (rollout other-7)"]
    info = service.batch_info(config, store, "fleet-1", 0)
    assert info["approval_required"] is True and "other-7" in info["message"]
    # a claim of this rollout's own is no reason; a released claim neither
    claims.release(store, hosts[0], "other-7")
    claims.claim(store, hosts[0], "fleet-1")
    assert service.approval_reasons(ctx, 0, len(hosts)) == []


def test_pause_holds_the_next_batch_for_a_human_and_resume_releases_it(tmp_path: Path) -> None:
    profile = profile_with(batches={"canary_size": 2, "growth": 1},
                           approval={"required": False})
    _plan, store, config = stored(tmp_path, profile, site_fleet(2, 20, racks=2))
    state = RolloutState(store, "fleet-1")
    ctx = service.context(config, store, "fleet-1")
    state.update_batch(0, lambda b: b.update(verdict={"verdict": "PASS"}))
    stranger = approvals.Identity("mallory", "mallory", "api")
    with pytest.raises(approvals.NotAnOperator, match="neither an operator nor an approver"):
        service.pause(config, store, "fleet-1", stranger)
    paused = service.pause(config, store, "fleet-1", approvals.Identity("bob", "bob", "api"))
    assert paused["paused"] and paused["by"] == "bob"
    assert service.pause(config, store, "fleet-1",
                         approvals.Identity("alice", "alice", "api"))["already"]
    info = service.batch_info(config, store, "fleet-1", 1)
    assert info["approval_required"] is True and "paused by bob" in info["message"]
    # resumed before the batch asked: nothing to answer, the batch goes on by itself
    state.update_batch(1, lambda b: b.update(approval_reasons=[]))
    resumed = service.resume(config, store, "fleet-1", approvals.Identity("alice", "alice",
                                                                          "api"))
    assert resumed["paused"] is False and "answered" not in resumed
    assert service.approval_reasons(ctx, 1, 2) == []
    entries = [e for e in ctx.audit.read()[0] if e["action"] in ("pause", "resume")]
    assert [(e["action"], e["by"]) for e in entries] == [("pause", "bob"), ("resume", "alice")]
    state.end("completed")
    with pytest.raises(ConfigError, match="has ended"):
        service.pause(config, store, "fleet-1", approvals.Identity("bob", "bob", "api"))


# ------------------------------------------------------------------ maintenance windows


def night_profile(**maintenance_section: Any) -> Profile:
    return profile_with(batches={"canary_size": 20, "growth": 1,
                                 "max_unavailable_per_site": "50%"},
                        approval={"required": False},
                        maintenance=dict({"hours": ["01:00-06:00"]}, **maintenance_section))


def test_every_batch_starts_inside_all_of_its_sites_windows_in_their_time_zones() -> None:
    zones = ["Europe/Berlin", "America/New_York", "Asia/Tokyo"]
    hosts = site_fleet(6, 40, racks=4, zones=zones)
    start = at("2026-12-07 12:00")
    plan = planned(night_profile(), hosts, start=start)
    est = estimate_plan(plan, EXAMPLE_ASSUMPTIONS, forks=20)
    zone_of = {h.site: h.timezone for h in hosts}
    schedule = {site: maintenance.Schedule(timezone=zone, hours=((60, 360),))
                for site, zone in zone_of.items()}
    for row, batch in zip(est["batches"], plan["batches"]):
        # one batch: sites of one time zone (their windows open together)
        assert len({zone_of[s] for s in batch["sites"]}) == 1
        for site in batch["sites"]:
            assert maintenance.is_open(schedule[site], row["start"])
            local = datetime.datetime.fromtimestamp(row["start"], ZoneInfo(zone_of[site]))
            assert 1 <= local.hour < 6
    assert est["totals"]["window_wait"] > 0  # planned at noon UTC: the first batch waits
    assert est["totals"]["bound"] <= est["totals"]["expected"]
    assert "01:00-06:00" in render_estimate(est)


def test_avoided_dates_are_skipped(tmp_path: Path) -> None:
    hosts = site_fleet(1, 20, racks=2, zones=["Europe/Berlin"])
    start = at("2026-12-23 12:00", "Europe/Berlin")
    plan = planned(night_profile(avoid_dates=["2026-12-24", "2026-12-25"]), hosts, start=start)
    est = estimate_plan(plan, EXAMPLE_ASSUMPTIONS, forks=20)
    first = datetime.datetime.fromtimestamp(est["batches"][0]["start"], ZoneInfo("Europe/Berlin"))
    assert first.date() == datetime.date(2026, 12, 26) and first.hour == 1


def test_a_batch_outside_its_window_waits_and_a_wave_under_way_goes_on(tmp_path: Path) -> None:
    hosts = site_fleet(1, 20, racks=2, zones=["Europe/Berlin"])
    _plan, store, config = stored(tmp_path, night_profile(), hosts,
                                  start=at("2026-12-07 02:00", "Europe/Berlin"))
    ctx = service.context(config, store, "fleet-1")
    noon = at("2026-12-07 12:00", "Europe/Berlin")
    waiting = windows.batch_window(ctx, 0, now=noon)
    assert waiting["open"] is False and waiting["message"]
    assert waiting["delay"] == windows.MAX_DELAY  # 13 hours away: it looks again in an hour
    assert waiting["until"] == at("2026-12-08 01:00", "Europe/Berlin")
    again = windows.batch_window(ctx, 0, now=noon + 3600)
    assert again["open"] is False and again["message"] == ""  # told once
    # 05:50: open, but too little of the window is left for the batch's work
    late = windows.batch_window(ctx, 0, now=at("2026-12-08 05:50", "Europe/Berlin"))
    assert late["open"] is False
    opened = windows.batch_window(ctx, 0, now=at("2026-12-08 01:00", "Europe/Berlin"))
    assert opened["open"] is True
    record = RolloutState(store, "fleet-1").batch(0)["window"]
    assert record["since"] == noon and record["opened"] == at("2026-12-08 01:00",
                                                               "Europe/Berlin")
    wave = [h.name for h in hosts[:3]]
    assert windows.wave_window(ctx, wave, now=noon)["open"] is False
    assert windows.wave_window(ctx, wave, now=at("2026-12-08 03:00", "Europe/Berlin"))["open"]
    state = RolloutState(store, "fleet-1")
    state.save_host(wave[0], dict(state.host(wave[0]), status="running"))
    assert windows.wave_window(ctx, wave, now=noon)["open"] is True


def test_the_inventory_gives_each_site_its_time_zone_and_hours() -> None:
    from fleet_rollout.site_limits import schedules

    hosts = site_fleet(2, 3, racks=1, zones=["Asia/Tokyo"])
    hosts[0].maintenance_hours = "22:00-02:00"
    with pytest.raises(ConfigError, match="share one maintenance window"):
        schedules(night_profile().data, hosts)
    for host in hosts[:3]:
        host.maintenance_hours = "22:00-02:00"
    found = schedules(night_profile().data, hosts)
    assert found["s000"].hours == ((1320, 120),) and found["s001"].hours == ((60, 360),)
    assert found["s000"].timezone == "Asia/Tokyo"
    with pytest.raises(ConfigError, match="maintenance.timezone"):
        profile_with(maintenance={"timezone": "Mars/Olympus"})
    with pytest.raises(ConfigError, match="maintenance.hours"):
        profile_with(maintenance={"hours": ["25:00-03:00"]})


# ------------------------------------------------------------------ the report


def test_the_report_shows_approval_and_window_waits_apart_from_work(tmp_path: Path) -> None:
    from fleet_rollout.audit import Audit
    from fleet_rollout.report import render_report
    from fleet_rollout.report.schedule import batch_spans

    profile = profile_with(batches={"canary_size": 2, "growth": 1},
                           approval={"manual_batches": 1})
    plan, store, _config = stored(tmp_path, profile, site_fleet(2, 10, racks=2))
    state = RolloutState(store, "fleet-1")
    state.update_meta(estimate_table="BATCH HOSTS ... estimate table")
    state.update_batch(0, lambda b: b.update(
        started_at=1000.0, approval={"at": 1600.0, "by": "bob", "via": "chat",
                                     "approved": True, "response": True},
        window={"since": 1600.0, "opened": 4000.0}, judged_at=5000.0))
    state.update_batch(1, lambda b: b.update(
        started_at=5001.0, approval={"at": 5001.0, "by": "judge", "via": "promotion",
                                     "approved": True, "response": True}, judged_at=6000.0))
    spans = batch_spans(state.batch(0), plan["batches"][0]["hosts"], {})
    assert spans == [("approval", 1000.0, 1600.0), ("window", 1600.0, 4000.0),
                     ("work", 4000.0, 5000.0)]
    assert batch_spans(state.batch(1), plan["batches"][1]["hosts"], {}) == [
        ("work", 5001.0, 6000.0)]
    html = render_report(state, Audit(store, "fleet-1"), now=7000.0)
    assert "<h2>Schedule</h2>" in html and "estimate table" in html
    assert "batch 1: window 40m00s" in html and "batch 1: approval 10m00s" in html
    assert "batch 2: work 16m39s" in html


def test_the_chat_plan_is_short_and_carries_the_estimate(example: Dict[str, Any]) -> None:
    from fleet_rollout.plan import CHAT_ROWS, render_plan

    est = estimate_plan(example, EXAMPLE_ASSUMPTIONS, forks=EXAMPLE_FORKS)
    text = render_plan(example, est)
    rows = [line for line in text.splitlines() if line[:1].isdigit()]
    assert len(rows) == CHAT_ROWS < len(example["batches"])
    assert f"{len(example['batches']) - CHAT_ROWS} more batch(es)" in text
    assert f"estimate: {est['totals']['expected_hours']:.1f} h" in text
    assert f"ratio {est['totals']['bound_ratio']:.2f}" in text
    assert len(text) < 2500  # a chat message, not the whole table
    # the whole table (the plan's batch_table, the report) has every batch
    whole = render_estimate(est)
    assert sum(1 for line in whole.splitlines() if line[:1].isdigit()) == len(example["batches"])


class BatchApi:
    """The st2 API as record_answer sees it from a task of the batch's workflow."""

    def __init__(self, rollout_id: str, batch: int) -> None:
        self.execution_id = "task-1"
        self.workflow = {"id": "wf-1", "action": {"ref": service.BATCH_WORKFLOW},
                         "parameters": {"rollout_id": rollout_id, "batch": batch}}

    def own_execution(self) -> Dict[str, Any]:
        return {"id": self.execution_id, "context": {"parent": {"execution_id": "wf-1"}}}

    def execution(self, execution_id: str) -> Dict[str, Any]:
        assert execution_id == "wf-1"
        return self.workflow


def test_a_pause_after_the_batch_started_holds_it_with_the_reason_resume_reads(
        tmp_path: Path) -> None:
    """batch_info saw no reason to wait; the pause comes before the automatic approval is
    recorded: it is refused (the workflow then asks a human) and the batch keeps the reason,
    so that resume knows the pause is what holds it."""
    profile = profile_with(batches={"canary_size": 2, "growth": 1},
                           approval={"required": False})
    _plan, store, config = stored(tmp_path, profile, site_fleet(2, 20, racks=2))
    state = RolloutState(store, "fleet-1")
    state.update_batch(0, lambda b: b.update(verdict={"verdict": "PASS"}))
    assert service.batch_info(config, store, "fleet-1", 1)["approval_required"] is False
    assert state.batch(1)["approval_reasons"] == []
    service.pause(config, store, "fleet-1", approvals.Identity("bob", "bob", "api"))
    with pytest.raises(ConfigError, match="paused by bob"):
        service.record_answer(config, store, "fleet-1", 1, "approval", "auto",
                              api=BatchApi("fleet-1", 1))
    assert state.batch(1)["approval_reasons"] == ["paused by bob"]
    assert state.batch(1).get("approval") is None
    # without the pause the same record is the judge's promotion
    state.update_meta(paused=None)
    record = service.record_answer(config, store, "fleet-1", 1, "approval", "auto",
                                   api=BatchApi("fleet-1", 1))
    assert (record["by"], record["via"], record["verdict"]) == ("judge", "promotion", "PASS")


def test_a_rollout_rejected_before_any_host_says_so_once(tmp_path: Path) -> None:
    profile = profile_with(batches={"canary_size": 2, "growth": 1})
    _plan, store, config = stored(tmp_path, profile, site_fleet(2, 20, racks=2))
    first = service.finish(config, store, "fleet-1", "rejected")
    assert "fleet-1 (home-snoop-fleet) rejected: no host touched; " in first["message"]
    assert first["announce"] is True
    assert service.finish(config, store, "fleet-1", "rejected")["announce"] is False
