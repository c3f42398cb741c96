"""batch_info, the batch's facts a rollout_batch workflow reads: the counter window and the soak
become orquesta task delays, which st2 (and the runtime) refuse unless they are integers, so a
profile's `window_seconds: 10.5` must arrive as whole seconds (rounded up), never as a float that
fails the batch at its first counter window."""
from __future__ import annotations

from pathlib import Path

from test_plan_storage import fleet

from fleet_rollout import service
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.store import MemoryStore, RolloutState


def test_window_and_soak_are_whole_seconds_for_the_workflow_delay(tmp_path: Path):
    profile = load_profile("home-snoop")
    profile.data["canary"].update({"window_seconds": 10.5, "soak_seconds": 4.0})
    hosts = fleet(20)
    plan = build_plan(profile, "inventories/x.yaml", "all", hosts, hosts,
                      {h.name: {"compliant": False} for h in hosts}, rollout_id="delay-1",
                      started_by="alice")
    store = MemoryStore()
    RolloutState(store, "delay-1").save_plan(plan)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    info = service.batch_info(config, store, "delay-1", 0)
    assert info["window"] == 11 and type(info["window"]) is int
    assert info["soak"] == 4 and type(info["soak"]) is int
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
    profile = load_profile("home-snoop")
    hosts = fleet(4)
    plan = build_plan(profile, "inventories/x.yaml", "all", hosts, hosts,
                      {h.name: {"compliant": False} for h in hosts}, rollout_id="forks-1",
                      started_by="alice")
    store = MemoryStore()
    RolloutState(store, "forks-1").save_plan(plan)
    assert service.context(dict(base, ansible_forks=64), store, "forks-1").hostside.forks == 64
