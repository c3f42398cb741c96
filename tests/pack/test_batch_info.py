"""batch_info, the batch's facts a rollout_batch workflow reads: the counter window and the soak
become orquesta task delays, which st2 (and the runtime) refuse unless they are integers, so a
profile's `window_seconds: 10.5` must arrive as whole seconds (rounded up), never as a float that
fails the batch at its first counter window."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

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


def test_collections_of_a_window_start_a_step_apart(tmp_path: Path, monkeypatch: Any):
    """A collection tells the workflow how long to wait before the window's next one: what is
    left of the step after its own time, in whole seconds (an orquesta delay), never less than
    the step from start to start. Before, the workflow waited a whole step after each
    collection, so a window lasted the profile's length plus every collection's time.
    The hosts' counters are a stand-in here (the collection's clock is what is measured)."""
    from fleet_rollout import gate
    from fleet_rollout.hostside.ansible_run import HostResult

    assert [gate.next_delay(5.0, e) for e in (0.0, 1.2, 4.9, 5.0, 9.0)] == [5, 4, 1, 0, 0]
    assert gate.next_delay(10 / 3, 1.2) == 3 and type(gate.next_delay(10 / 3, 1.2)) is int

    plan, store = stored_plan("pace-1", 20, window_seconds=10, window_steps=2)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    ctx = service.context(config, store, "pace-1")
    clock = [1000.0]
    monkeypatch.setattr(gate.time, "time", lambda: clock[0])

    def counters(hosts: Any, took: float) -> Dict[str, HostResult]:
        clock[0] += took
        return {h: HostResult(h, ok=True, result={"host": h}) for h in hosts}

    for took, wait in ((1.2, 4), (3.0, 2), (4.5, 1), (5.0, 0), (12.0, 0)):
        monkeypatch.setattr(ctx.hostside, "counters", lambda hosts, t=took: counters(hosts, t))
        out = gate.collect(ctx, 0, "pre_step_1")
        assert out["next_delay"] == wait and type(out["next_delay"]) is int, (took, out)
        assert out["seconds"] == took and out["collected"] == out["hosts"] > 0
