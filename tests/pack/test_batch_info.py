"""batch_info, the batch's facts a rollout_batch workflow reads: the counter window and the soak
become orquesta task delays, which st2 (and the runtime) refuse unless they are integers, so a
profile's `window_seconds: 10.5` must arrive as whole seconds (rounded up), never as a float that
fails the batch at its first counter window."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from test_plan_storage import fleet

from fleet_rollout import service
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.store import MemoryStore, RolloutState


def stored_plan(rollout_id: str, hosts: int, **canary: float) -> Tuple[Dict[str, Any],
                                                                      MemoryStore]:
    """A home-snoop plan of `hosts` hosts (none compliant) saved in a fresh store."""
    profile = load_profile("home-snoop")
    profile.data["canary"].update(canary)
    fleet_hosts = fleet(hosts)
    plan = build_plan(profile, "inventories/x.yaml", "all", fleet_hosts, fleet_hosts,
                      {h.name: {"compliant": False} for h in fleet_hosts},
                      rollout_id=rollout_id, started_by="alice")
    store = MemoryStore()
    RolloutState(store, rollout_id).save_plan(plan)
    return plan, store


def test_window_and_soak_are_whole_seconds_for_the_workflow_delay(tmp_path: Path):
    plan, store = stored_plan("delay-1", 20, window_seconds=10.5, soak_seconds=4.0)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    info = service.batch_info(config, store, "delay-1", 0)
    assert info["window"] == 11 and type(info["window"]) is int
    assert info["soak"] == 4 and type(info["soak"]) is int
    # the window in the profile's steps (home-snoop: the default 4): each step's delay too
    assert info["steps"] == 4 and info["step"] == 3 and type(info["step"]) is int
    # the pre window: canary.pre_windows (default 3) windows, in steps of the same length
    assert info["pre_steps"] == 12 and type(info["pre_steps"]) is int
    plan, store = stored_plan("delay-2", 20, window_seconds=60, window_steps=1)
    info = service.batch_info(config, store, "delay-2", 0)
    assert (info["window"], info["steps"], info["step"], info["pre_steps"]) == (60, 1, 60, 3)
    # a plan stored before canary.pre_windows existed keeps a pre window of one window
    plan, store = stored_plan("delay-3", 20, window_seconds=60, window_steps=2)
    meta = RolloutState(store, "delay-3")
    stored = meta.plan()
    del stored["profile"]["canary"]["pre_windows"]
    meta.save_plan(stored)
    info = service.batch_info(config, store, "delay-3", 0)
    assert (info["steps"], info["pre_steps"]) == (2, 2)
    assert info["hosts"] == [plan["batches"][0]["hosts"][0]] and info["count"] == 1


def test_ansible_forks_come_from_the_pack_config(tmp_path: Path):
    """`ansible_forks` (1-500, default 20) is what every host step's HostSide runs with;
    anything else is refused naming the key."""
    import pytest

    from fleet_rollout.config import load_pack_config
    from fleet_rollout.errors import ConfigError

    base = {"credentials": {"lab": {"username": "u", "password": "p"}},
            "state_dir": str(tmp_path / "state")}
    assert load_pack_config(base).ansible_forks == 20
    assert load_pack_config(dict(base, ansible_forks=200)).ansible_forks == 200
    for bad in (0, 501, 2.5, "50", True):
        with pytest.raises(ConfigError, match="ansible_forks"):
            load_pack_config(dict(base, ansible_forks=bad))
    _plan, store = stored_plan("forks-1", 4)
    assert service.context(dict(base, ansible_forks=64), store, "forks-1").hostside.forks == 64


def test_collections_of_a_window_sample_a_step_apart(tmp_path: Path, monkeypatch: Any):
    """Each collection of a window samples one step after the one before it, whatever that one
    took and however early or late the workflow's delay brought it: the workflow waits the
    whole seconds until its run is to start (an orquesta delay, rounded down), the collection
    the fraction left; the run starts the lead (2 s) before the sample time and passes it to
    the hosts (`at`), so the hosts' reading is not after the due moment. Before, the window
    lasted until its last collection had read every host. A collection longer than a step
    delays the next (never two closer than a step); one that starts late samples at once. The
    hosts' counters are a stand-in (the clock is what is measured): time.time and time.sleep
    are the test's clock."""
    from fleet_rollout import gate
    from fleet_rollout.hostside.ansible_run import HostResult

    assert [gate.next_delay(1005.0, t) for t in (1000.0, 1001.2, 1004.1, 1005.0, 1009.0)] == \
        [5, 3, 0, 0, 0]
    assert type(gate.next_delay(1010 / 3, 1.2)) is int
    assert gate.sample_lead(5.0) == 2.0 and gate.sample_lead(3.0) == 1.5

    plan, store = stored_plan("pace-1", 20, window_seconds=10, window_steps=2)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    ctx = service.context(config, store, "pace-1")
    clock = [1000.0]
    slept: List[float] = []
    asked: List[Any] = []
    monkeypatch.setattr(gate.time, "time", lambda: clock[0])

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds
    monkeypatch.setattr(gate.time, "sleep", sleep)

    def counters(hosts: Any, took: float, at: Any = None, wait: float = 0.0
                 ) -> Dict[str, HostResult]:
        asked.append((at, wait))
        clock[0] += took
        return {h: HostResult(h, ok=True, result={"host": h}) for h in hosts}

    def started(label: str) -> float:
        return store.get_json(f"fleet_rollout.pace-1.batch.0.counters.{label}")["started"]

    # (label, the engine's latency after the delay, the run's own time): expected (its sample
    # time, the sample time passed to the hosts, the delay it asks for, what it slept)
    pre_steps = service.batch_info(config, store, "pace-1", 0)["pre_steps"]
    rows = [("pre_start", 0.0, 1.2, 1000.0, None, 1, 0.0),  # the first: at once; next run
            #                                                 at 1003 (1005 - 2): 1 + 0.8
            ("pre_step_1", 0.3, 3.0, 1005.0, 1005.0, 2, 0.5),  # arrives 1002.5: sleeps 0.5
            ("pre_step_2", 0.2, 4.5, 1010.0, 1010.0, 0, 0.0),  # arrives 1008.2: starts at once
            ("pre_step_3", 0.0, 12.0, 1015.0, 1015.0, 0, 0.3),  # arrives 1012.7: sleeps 0.3
            ("pre_step_4", 0.0, 1.0, 1025.0, None, 2, 0.0)]  # late (due 1020): samples at once
    delay_before = 0
    for label, latency, took, start, at, delay, nap in rows:
        clock[0] += delay_before + latency  # the workflow's delay, then the engine's latency
        slept.clear()
        asked.clear()
        monkeypatch.setattr(ctx.hostside, "counters",
                            lambda hosts, t=took, **kw: counters(hosts, t, **kw))
        out = gate.collect(ctx, 0, label)
        assert started(label) == pytest.approx(start), label
        assert asked[0][0] == (None if at is None else pytest.approx(at)), label
        if at is not None:
            assert asked[0][1] == pytest.approx(3.0)  # the lead and the slack
        assert out["next_delay"] == delay and type(out["next_delay"]) is int, (label, out)
        assert sum(slept) == pytest.approx(nap), label
        assert out["seconds"] == pytest.approx(round(clock[0] - start, 1))
        assert out["collected"] == out["hosts"] > 0
        delay_before = out["next_delay"]
    # the end collection samples a step after the last step (pre_step_<pre_steps - 1>); its
    # run starts on arrival, the hosts wait for the moment; a long wait is cut at a step (a
    # clock jump never stalls a window) and a sample time too far ahead is not given
    monkeypatch.setattr(ctx.hostside, "counters",
                        lambda hosts, **kw: counters(hosts, 0.5, **kw))
    gate.collect(ctx, 0, f"pre_step_{pre_steps - 1}")
    last = started(f"pre_step_{pre_steps - 1}")
    clock[0] = last + 4.6
    slept.clear()
    asked.clear()
    gate.collect(ctx, 0, "pre_end")
    assert started("pre_end") == pytest.approx(last + 5.0) and slept == []
    assert asked == [(pytest.approx(last + 5.0), pytest.approx(3.0))]
    clock[0] = 2000.0
    gate.collect(ctx, 0, "post_start")
    clock[0] = 1990.0  # the clock went back 10 s
    slept.clear()
    asked.clear()
    gate.collect(ctx, 0, "post_step_1")
    assert slept == [5.0] and asked == [(None, 0.0)]


def test_a_gatherer_waits_for_the_hosts_changed_at_a_time(tmp_path: Path):
    """A host step's Ansible run waits (the gather window) for the identical runs of its
    batch's other hosts, but only for as many as the profile changes at a time
    (batches.parallel): a batch bigger than that never has all its hosts pending at once, and
    every run of it waited the whole window."""
    from fleet_rollout.hoststeps import gather_peers

    plan, store = stored_plan("peers-1", 60)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    ctx = service.context(config, store, "peers-1")
    parallel = ctx.profile["batches"]["parallel"] = 3  # the plan's batches: 1, 2, 4, 8, ...
    sizes = [len(b["hosts"]) for b in plan["batches"]]
    assert min(sizes) < parallel < max(sizes), sizes  # both kinds of batch
    for batch in plan["batches"]:
        for host in batch["hosts"][:2]:
            assert gather_peers(ctx, host) == min(len(batch["hosts"]), parallel)
    ctx.profile["batches"]["parallel"] = 1000
    big = max(plan["batches"], key=lambda b: len(b["hosts"]))
    assert gather_peers(ctx, big["hosts"][0]) == len(big["hosts"])
