"""Approvals under StackStorm's inquiry-resume race (the runtime's st2_races setting), on a sim
lab: an answer's completion can reach the asking workflow before the answer's resume, and that
workflow then stays paused with its question answered (st2common services/inquiry.py respond;
tests/runtime/test_runtime_st2_races.py shows a batch-shaped workflow stranded so).

The pack asks each question in a workflow of its own and its batch reads the answer through
the API, so no batch pauses: on every answer path, with the completion always first, and over
fifty answers at random moments, no rollout is left paused or running, and who answered is
recorded. An inquiry is answerable a moment before its workflow pauses on it, and StackStorm
records nobody for an answer given then: the pack asks such a question again, and
fleet_rollout.respond answers only once the question has paused."""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest
from locations import ROOT
from rollout_support import SimLab, error_text, output

from fleet_runtime import home_client
from fleet_runtime.database import Store

ASK_EVERY_BATCH = {"required": True, "auto_approve_canary": False}
ONE_HOST_BATCHES = {"canary_size": 1, "max_unavailable_per_rack": 1,
                    "max_unavailable_per_site": 1}
SKIP = {".git", ".venv", ".venv-st2client", ".cache", ".lab", "tests", "bench", "docs",
        "fleet_runtime", "fleet_lab", "__pycache__"}


class RaceLab(SimLab):
    """A sim lab whose runtime runs the st2 races, with the pack from `pack` (None: the
    repository's)."""

    def __init__(self, tmp: str, hosts: int, races: str, pack: str = "") -> None:
        super().__init__(tmp, hosts, approvers=["alice", "bob"])
        self.env["FLEET_ROLLOUT_ST2_RACES"] = races
        self.pack = pack

    def cli(self, *args: str, timeout: float = 900, user: Any = None) -> Any:
        if self.pack and args and args[0] != "key":
            args = (*args, "--no-default-pack", "--pack", self.pack)
        return super().cli(*args, timeout=timeout, user=user)


def _executions(lab: RaceLab, action: str, status: str) -> List[Dict[str, Any]]:
    return json.loads(lab.cli("execution", "list", "--all", "-n", "1000", "--action", action,
                              "--status", status, "--json").stdout)


def _paused_batches(lab: RaceLab) -> List[Dict[str, Any]]:
    return _executions(lab, "fleet_rollout.rollout_batch", "paused")


def _questions_left(lab: RaceLab) -> List[str]:
    """Question workflows not ended once their rollouts ended (await_answer cancels those the
    race left paused)."""
    return [f"{q['id']} {status}" for status in ("paused", "resuming", "running")
            for q in _executions(lab, "fleet_rollout.question", status)]


@pytest.fixture()
def race_lab(tmp_path):
    lab = RaceLab(str(tmp_path), 4, "completion-first")
    yield lab
    lab.down()


def _question_paused(lab: RaceLab, inquiry_id: str, timeout: float = 60) -> None:
    """Wait until the inquiry's workflow has paused on it: StackStorm records who answers
    only from then on."""
    store = Store(os.path.join(lab.home, "runtime.db"))
    deadline = time.time() + timeout
    while time.time() < deadline:
        parent = store.get_execution(store.get_execution(inquiry_id)["parent_id"])
        if parent["status"] != "running":
            return
        time.sleep(0.1)
    raise AssertionError(f"the workflow of inquiry {inquiry_id} never paused")


def test_no_batch_pauses_on_any_answer_path_with_the_completion_first(race_lab):
    lab = race_lab
    profile = lab.profile("home-snoop", approval=ASK_EVERY_BATCH, batches=ONE_HOST_BATCHES)
    execution = lab.ask_run("fleet_rollout.rollout", profile=profile)
    assert lab.waiting(execution), error_text(execution)
    rollout_id = lab.kv_ids()[-1]
    paths = ["inquiry", "chat", "run"]
    asked = 0
    while lab.waiting(execution):
        assert _paused_batches(lab) == []
        [inquiry] = lab.pending()
        props = inquiry["schema"]["properties"]
        path = paths[asked % len(paths)]
        if "choice" in props:  # an INCONCLUSIVE verdict: go on
            out = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "proceed"}')
        else:
            asked += 1
            if path == "inquiry":
                _question_paused(lab, inquiry["id"])
                out = lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"approved": true}')
            elif path == "chat":
                out = lab.cli("chat", "--user", "bob", f"rollout approve {rollout_id}")
            else:
                out = lab.cli("run", "fleet_rollout.respond", f"rollout_id={rollout_id}",
                              "decision=approve")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        execution = lab.settle(execution["id"])
    final = execution
    assert final["status"] == "succeeded", error_text(final)
    assert output(final)["status"] == "completed", output(final)
    assert _paused_batches(lab) == []
    batches = lab.kv(rollout_id, "meta")["batches"]
    assert batches >= 3 and asked == batches
    approvals = [lab.kv(rollout_id, f"batch.{b}")["approval"] for b in range(batches)]
    expected = [("alice", "api"), ("bob", "chat"), ("alice", "api")]
    assert [(a["by"], a["via"], a["approved"]) for a in approvals] == [
        expected[b % 3] + (True,) for b in range(batches)]
    # completion-first: every question's workflow was left paused by its answer, then canceled
    time.sleep(2)
    assert _questions_left(lab) == []
    answers = [e for e in _audit(lab, rollout_id) if e["action"] == "answer"]
    assert len(answers) >= batches


def test_an_answer_given_the_moment_a_question_appears_is_asked_again(race_lab, request):
    """Each question answered the moment it is listed, before its workflow has paused: by `st2
    inquiry respond` (StackStorm records nobody: the pack asks again, and the answer to that,
    given once it has paused, counts), by `st2 run fleet_rollout.respond` and by the chat alias
    (respond waits for the pause: counted at once)."""
    lab = race_lab
    lab.env["FLEET_ROLLOUT_ST2_PAUSE_WINDOW"] = "10"
    profile = lab.profile("home-snoop", approval=ASK_EVERY_BATCH, batches=ONE_HOST_BATCHES)
    lab.start_engine()
    # the early answers go to the engine as `inquiry respond` hands them over, from a runtime
    # opened once here: a CLI process started on a loaded machine can take longer than the
    # pause window to get there, and its answer would no longer come first
    early = home_client.Session(argparse.Namespace(home=lab.home, packs=[],
                                                   no_default_pack=False), engine=False)
    request.addfinalizer(early.close)
    out = lab.cli("run", "fleet_rollout.rollout", f"profile={profile}", "-a", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    root = json.loads(out.stdout)["id"]
    store = Store(os.path.join(lab.home, "runtime.db"))
    paths = ["inquiry", "run", "chat"]
    answered: Dict[str, str] = {}   # inquiry id -> path
    first_asks = 0
    deadline = time.time() + 900
    while _status(lab, root) not in ("succeeded", "failed", "canceled") and \
            time.time() < deadline:
        pending = [r for r in store.find_executions("runner='inquirer' AND status='pending'")
                   if r["id"] not in answered]
        if not pending:
            time.sleep(0.1)
            continue
        inquiry = pending[0]
        schema_props = inquiry["result"]["schema"]["properties"]
        rollout_id = schema_props["rollout_id"]["default"]
        message = schema_props.get("approved", {}).get("description", "")
        if "choice" in schema_props:
            path, args = "verdict", ["inquiry", "respond", inquiry["id"], "-r",
                                     '{"choice": "proceed"}']
            _question_paused(lab, inquiry["id"])
        elif message.startswith("Asked again:"):
            path, args = "inquiry", ["inquiry", "respond", inquiry["id"], "-r",
                                     '{"approved": true}']
            _question_paused(lab, inquiry["id"])  # read, then answered: counted
        else:
            path = paths[first_asks % len(paths)]
            first_asks += 1
            # the question's workflow has not paused yet: the answer comes first
            assert store.get_execution(inquiry["parent_id"])["status"] == "running"
            if path == "inquiry":
                answered[inquiry["id"]] = path
                early.submit("respond", {"id": inquiry["id"], "response": {"approved": True},
                                         "requester": "alice"})
                continue
            args = {"run": ["run", "fleet_rollout.respond", f"rollout_id={rollout_id}",
                            "decision=approve"],
                    "chat": ["chat", "--user", "bob", f"rollout approve {rollout_id}"]}[path]
        answered[inquiry["id"]] = path
        out = lab.cli(*args)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert _status(lab, root) == "succeeded", _status(lab, root)
    [rollout_id] = lab.kv_ids()
    assert lab.kv(rollout_id, "meta")["status"] == "completed"
    batches = lab.kv(rollout_id, "meta")["batches"]
    assert batches >= 3 and first_asks == batches
    approvals = [lab.kv(rollout_id, f"batch.{b}")["approval"] for b in range(batches)]
    expected = [("alice", "api"), ("alice", "api"), ("bob", "chat")]
    assert [(a["by"], a["via"], a["approved"]) for a in approvals] == [
        expected[b % 3] + (True,) for b in range(batches)]
    # asked again exactly for the answers `inquiry respond` gave before the pause
    reasked = [b for b in range(batches)
               if lab.kv(rollout_id, f"batch.{b}")["questions"]["approval"].get("asked_again")]
    assert reasked == [b for b in range(batches) if b % 3 == 0]
    entries = _audit(lab, rollout_id)
    unattributed = [e for e in entries if e["action"] == "answer_unattributed"]
    assert len(unattributed) == len(reasked)
    assert {e["old"] for e in unattributed} <= set(answered)
    time.sleep(2)
    assert _questions_left(lab) == [] and _paused_batches(lab) == []


def _audit(lab: RaceLab, rollout_id: str) -> List[Dict[str, Any]]:
    return lab.audit(rollout_id)


ANSWERS = 50


def test_fifty_answers_at_random_moments_leave_no_rollout_paused_or_running(tmp_path):
    """Rollouts started one after another on the same two hosts while an engine runs in the
    background (as st2's services do); every question answered through a path drawn at random
    (st2 inquiry respond, the chat alias, st2 run respond), after a random pause, some twice;
    the race drawn at random for each answer. At most one rollout at a time is approved (the
    others are rejected, their hosts untouched): it changes both hosts, the next approved one
    reverts them."""
    lab = RaceLab(str(tmp_path), 2, "random")
    rng = random.Random(4049)
    engine = subprocess.Popen([sys.executable, "-m", "fleet_runtime.cli", "engine", "--forever"],
                              env=lab.env, cwd=str(ROOT), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        profiles = {"early": lab.profile("home-snoop", approval=ASK_EVERY_BATCH),
                    "home": lab.profile("home-snoop-revert", approval=ASK_EVERY_BATCH)}
        approved = None   # the rollout id let through, until it ends
        started: List[str] = []
        answers = 0
        deadline = time.time() + 1800  # a bound against a hang; a loaded machine answers slower
        while answers < ANSWERS and time.time() < deadline:
            if approved is not None and _ended(lab, approved):
                approved = None
            pending = lab.pending()
            if not pending:
                if approved is None and len(started) < ANSWERS * 2:
                    # the profile that changes the hosts as they are now
                    snoop = lab.bmc(lab.host_names()[0])["logical"]["snoop_mode"]
                    out = lab.cli("run", "fleet_rollout.rollout",
                                  f"profile={profiles[snoop]}", "-a", "--json")
                    assert out.returncode == 0, out.stderr[-2000:]
                    started.append(json.loads(out.stdout)["id"])
                time.sleep(0.5)
                continue
            inquiry = rng.choice(pending)
            props = inquiry["schema"]["properties"]
            rollout_id = props["rollout_id"]["default"]
            if "choice" in props:
                decision = "proceed"
            elif approved is None and rng.random() < 0.3:
                decision, approved = "approve", rollout_id
            else:
                decision = "approve" if rollout_id == approved else "reject"
            time.sleep(rng.choice((0.0, 0.0, 0.2, 0.7)))
            for _ in range(2 if rng.random() < 0.2 else 1):
                _answer(lab, rng.choice(("inquiry", "chat", "run")), inquiry, rollout_id,
                        decision)
            answers += 1
        assert answers >= ANSWERS, answers
        end = time.time() + 600
        while time.time() < end and not all(_root_ended(lab, ex) for ex in started):
            for inquiry in lab.pending():  # the last ones: reject, or go on after a verdict
                props = inquiry["schema"]["properties"]
                _answer(lab, "inquiry", inquiry, props["rollout_id"]["default"],
                        "proceed" if "choice" in props else "reject")
            time.sleep(1)
        left = [(ex, _status(lab, ex)) for ex in started if not _root_ended(lab, ex)]
        assert left == [], left
        assert _paused_batches(lab) == []
        time.sleep(2)
        assert _questions_left(lab) == []
    finally:
        os.killpg(engine.pid, signal.SIGTERM)
        engine.wait(timeout=60)
        lab.down()


def _answer(lab: RaceLab, path: str, inquiry: Dict[str, Any], rollout_id: str,
            decision: str) -> None:
    if decision == "proceed":
        lab.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "proceed"}', "--no-wait")
    elif path == "inquiry":
        lab.cli("inquiry", "respond", inquiry["id"], "-r",
                json.dumps({"approved": decision == "approve"}), "--no-wait")
    elif path == "chat":
        lab.cli("chat", "--user", "bob", f"rollout {decision} {rollout_id}")
    else:
        lab.cli("run", "fleet_rollout.respond", f"rollout_id={rollout_id}",
                f"decision={decision}", "-a")


def _status(lab: RaceLab, execution_id: str) -> str:
    return json.loads(lab.cli("execution", "get", execution_id, "--json").stdout)["status"]


def _root_ended(lab: RaceLab, execution_id: str) -> bool:
    return _status(lab, execution_id) in ("succeeded", "failed", "canceled")


def _ended(lab: RaceLab, rollout_id: str) -> bool:
    meta = lab.kv(rollout_id, "meta") or {}
    return meta.get("status") in ("completed", "rejected", "rolled_back", "failed", "aborted")
