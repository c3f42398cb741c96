"""Promotion, pause and resume, and maintenance windows in whole rollouts on the embedded runtime
(a sim lab, the real conductor, the st2-compatible CLI and chat aliases): the first batch waits
for a human, later ones are promoted by the judge's PASS (announced, audited as the judge's);
`rollout pause` holds the next batch for an approver and `rollout resume` lets it go, both
recorded with who did it; a batch outside its sites' maintenance window waits for it and no
host starts its change before it opens."""
from __future__ import annotations

import datetime
import json
import time

import pytest
from rollout_support import SimLab, error_text, output

pytestmark = pytest.mark.e2e

BATCHES = {"canary_size": 3, "growth": 2, "max_batch": 8, "max_unavailable_per_site": "50%",
           "max_unavailable_per_rack": "100%", "parallel": 8}
WINDOWS = {"window_seconds": 10, "window_steps": 2, "pre_windows": 2}


def _chat(sim: SimLab, user: str, text: str) -> str:
    out = sim.cli("chat", "--user", user, text)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def _finish(sim: SimLab, execution_id: str, rollout_id: str) -> dict:
    final = sim.settle(execution_id)
    while sim.waiting(final):  # an INCONCLUSIVE verdict: go on
        _chat(sim, "bob", f"rollout approve {rollout_id}")
        final = sim.settle(execution_id)
    return final


def test_manual_first_batch_then_promotion_with_a_pause_and_a_resume(tmp_path):
    sim = SimLab(str(tmp_path), 20, approvers=["alice", "bob"])
    try:
        profile = sim.profile("home-snoop", batches=BATCHES, canary=WINDOWS,
                              approval={"required": True, "manual_batches": 1})
        execution = sim.ask_run("fleet_rollout.rollout", profile=profile)
        assert sim.waiting(execution), error_text(execution)
        rollout_id = sim.kv_ids()[-1]
        # mallory may not pause; bob (an approver) may, while batch 1 waits for its approval
        refused = sim.cli("run", "fleet_rollout.pause", f"rollout_id={rollout_id}", "--json",
                          user="mallory")
        assert json.loads(refused.stdout)["status"] == "failed"
        assert "paused by bob" in _chat(sim, "bob", f"rollout pause {rollout_id}")
        assert f"bob answered approve for rollout {rollout_id}" in _chat(
            sim, "bob", f"rollout approve {rollout_id}")
        # batch 1 runs; batch 2 would be promoted by the judge but the pause holds it
        held = sim.settle(execution["id"])
        while sim.waiting(held) and sim.kv(rollout_id, "batch.0").get("verdict", {}).get(
                "verdict") == "INCONCLUSIVE" and not sim.kv(rollout_id, "batch.1"):
            _chat(sim, "bob", f"rollout approve {rollout_id}")
            held = sim.settle(execution["id"])
        assert sim.waiting(held), error_text(held)
        batch = sim.kv(rollout_id, "batch.1")
        assert any(r.startswith("paused by bob") for r in batch["approval_reasons"]), batch
        said = _chat(sim, "bob", f"rollout resume {rollout_id}")
        assert "resumed by bob" in said and "approved" in said, said
        final = _finish(sim, execution["id"], rollout_id)
        assert final["status"] == "succeeded", error_text(final)
        assert output(final)["status"] == "completed"
        keys = sim.keys(rollout_id)
        assert keys["batch.0"]["approval"]["by"] == "bob"
        assert (keys["batch.1"]["approval"]["by"], keys["batch.1"]["approval"]["via"]) == (
            "bob", "chat")
        promoted = [i for i in (2, 3) if keys[f"batch.{i}"]["approval"]["via"] == "promotion"]
        assert promoted, [keys[f"batch.{i}"]["approval"] for i in (2, 3)]
        for i in promoted:
            approval = keys[f"batch.{i}"]["approval"]
            assert (approval["by"], approval["verdict"], approval["approved"]) == (
                "judge", "PASS", True)
            assert keys[f"batch.{i - 1}"]["verdict"]["verdict"] == "PASS"
        audit = sim.audit(rollout_id)
        assert [(e["action"], e["by"]) for e in audit if e["action"] in ("pause", "resume")] \
            == [("pause", "bob"), ("resume", "bob")]
        judged = [e for e in audit if e["action"] == "answer" and e["approved_by"] == "judge"]
        assert len(judged) == len(promoted)
        assert all(e["new"].startswith("promotion: Promoted by the judge") for e in judged)
        chat = open(f"{sim.home}/chat.jsonl").read()
        assert "Promoted by the judge" in chat
    finally:
        sim.down()


def test_a_batch_waits_for_its_sites_maintenance_window(tmp_path):
    sim = SimLab(str(tmp_path), 8)
    try:
        now = datetime.datetime.now(datetime.timezone.utc)
        opens = (now + datetime.timedelta(minutes=2)).replace(second=0, microsecond=0)
        closes = opens + datetime.timedelta(hours=3)
        hours = f"{opens:%H:%M}-{closes:%H:%M}"
        profile = sim.profile("home-snoop", approval={"required": False},
                              batches={"canary_size": 4, "growth": 1, "max_batch": 4,
                                       "max_unavailable_per_site": "100%",
                                       "max_unavailable_per_rack": "100%", "parallel": 4},
                              maintenance={"hours": [hours], "timezone": "UTC"})
        started = time.time()
        execution = sim.run_proceeding("fleet_rollout.rollout", profile=profile)
        assert execution["status"] == "succeeded", error_text(execution)
        rollout_id = output(execution)["rollout_id"]
        keys = sim.keys(rollout_id)
        window = keys["batch.0"]["window"]
        assert started - 5 <= window["since"] < opens.timestamp()
        assert window["opened"] >= opens.timestamp()
        first = min(step["started"] for name, st in keys.items() if name.startswith("host.")
                    for step in (st.get("steps") or {}).values() if "started" in step)
        assert first >= opens.timestamp(), (first, opens.timestamp())
        chat = open(f"{sim.home}/chat.jsonl").read()
        assert "waits for its sites' maintenance window" in chat
    finally:
        sim.down()
