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
