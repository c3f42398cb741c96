"""Operators only, end to end through the embedded runtime against a sim lab: a rollout that
has ended is rolled back only by an operator with force=true, and that rollback leaves a host a
later rollout changed as it is (and says so); a non-operator's abort and start are refused and
change nothing."""
from __future__ import annotations

import os

import pytest
from rollout_support import SimLab, error_text, output
from test_rollout_sim import EARLY, HOME


@pytest.fixture()
def lab(tmp_path):
    sim = SimLab(str(tmp_path), 4)
    yield sim
    sim.down()


def test_an_ended_rollout_is_rolled_back_only_with_force_and_keeps_later_changes(lab):
    sim = lab
    first, second = sim.host_names()[:2]
    quick = {"approval": {"required": False},
             "batches": {"canary_size": 2, "max_unavailable_per_rack": 2,
                         "max_unavailable_per_site": 4}}
    a = sim.run_proceeding("fleet_rollout.rollout", profile=sim.profile("home-snoop", **quick),
                           targets=f"{first}:{second}")
    assert a["status"] == "succeeded", error_text(a)
    rollout_a = output(a)["rollout_id"]
    assert sim.bmc(first)["logical"] == HOME and sim.bmc(second)["logical"] == HOME
    # a later rollout changes the first host again (interleaving on)
    b = sim.run_proceeding("fleet_rollout.rollout",
                           profile=sim.profile("interleave-on", **quick), targets=first)
    assert b["status"] == "succeeded", error_text(b)
    rollout_b = output(b)["rollout_id"]
    changed_by_b = sim.bmc(first)["logical"]
    assert changed_by_b["node_interleaving"] == "enabled"

    # not an operator: refused, nothing halted
    sim.set_config(operators=["alice"])
    refused = sim.cli("run", "fleet_rollout.abort", f"rollout_id={rollout_a}", "--json",
                      user="mallory")
    assert "Refused: mallory is not an operator (operators: alice)" in (
        refused.stdout + refused.stderr)
    started = sim.cli("run", "fleet_rollout.plan", "profile=home-snoop", "--json",
                      user="mallory")
    assert "Refused: mallory is not an operator" in started.stdout + started.stderr
    # an operator without force: refused, the rollout has ended
    unforced = sim.run("fleet_rollout.abort", rollout_id=rollout_a)
    assert unforced["status"] == "failed"
    assert "has ended (completed)" in error_text(unforced)
    assert "force=true" in error_text(unforced)
    assert sim.kv(rollout_a, "halt") is None

    rolled = sim.run("fleet_rollout.rollback", rollout_id=rollout_a, force="true")
    assert rolled["status"] == "succeeded", error_text(rolled)
    sim.wait_idle()
    assert sim.bmc(second)["logical"] == EARLY  # restored: only rollout A changed it
    assert sim.bmc(first)["logical"] == changed_by_b  # B's change stays
    assert not sim.drained(first) and not sim.drained(second)
    kept = sim.kv(rollout_a, f"host.{first}")["restore"]
    assert kept["changed_later_by"] == rollout_b
    chat = open(os.path.join(sim.home, "chat.jsonl")).read()
    assert f"Not restored, a later rollout changed them: {first} (by {rollout_b})" in chat
