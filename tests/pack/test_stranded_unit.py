"""stranded.Stranded: which paused batch workflows the pack resumes after an answer, and that it
keeps who answered before it resumes. A stand-in for the st2 API (executions and children as
StackStorm shows them); the real API paths are in tests/e2e/test_pack_approval_races.py."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout.st2api import ApiRefused
from fleet_rollout.stranded import Stranded, answered_question

WF = "a" * 24
ASK = "b" * 24


def _ex(ex_id: str, ref: str, status: str, started: str, **extra: Any) -> Dict[str, Any]:
    return dict({"id": ex_id, "action": {"ref": ref}, "status": status,
                 "start_timestamp": started}, **extra)


class FakeApi:
    def __init__(self, children: List[Dict[str, Any]], status: str = "paused",
                 resumes_to: str = "running", refuse: int = 0) -> None:
        self.children = children
        self.status = status
        self.resumes_to = resumes_to
        self.refuse = refuse
        self.puts: List[Any] = []
        self.execution_id = "c" * 24

    def execution(self, ex_id: str) -> Dict[str, Any]:
        if ex_id == ASK:
            return _ex(ASK, "core.ask", "succeeded", "2",
                       context={"parent": {"execution_id": WF}})
        return _ex(WF, "fleet_rollout.rollout_batch", self.status, "0",
                   parameters={"rollout_id": "r1", "batch": 2},
                   context={"resumed_by": "alice"})

    def get(self, path: str) -> List[Dict[str, Any]]:
        assert path == f"executions/{WF}/children?depth=1"
        return self.children

    def put(self, path: str, body: Any) -> Any:
        self.puts.append((path, body))
        if self.refuse:
            raise ApiRefused("no longer paused", self.refuse)
        self.status = self.resumes_to
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _watch(api: FakeApi):
    kept: List[Any] = []
    recorded: List[Any] = []
    clock = Clock()
    out = Stranded(api, lambda *a: kept.append(a), lambda *a: recorded.append(a),
                   sleep=clock.sleep, clock=clock).settle(ASK, wait=10, settle=2)
    return out, kept, recorded


ANSWERED = [_ex("d" * 24, "fleet_rollout.batch_info", "succeeded", "1"),
            _ex(ASK, "core.ask", "succeeded", "2")]


def test_a_batch_left_paused_after_its_answer_is_resumed_once_its_author_kept_first():
    api = FakeApi(list(ANSWERED))
    out, kept, recorded = _watch(api)
    assert out == {"inquiry": ASK, "workflow": WF, "rollout_id": "r1", "batch": 2,
                   "resumed": True, "stuck": False, "status": "running"}
    assert kept == [("r1", 2, ASK, "alice")]
    assert api.puts == [(f"executions/{WF}", {"status": "resuming"})]
    assert recorded == [("r1", 2, WF, ASK)]


@pytest.mark.parametrize("children", [
    ANSWERED + [_ex("e" * 24, "core.ask", "pending", "3")],          # asks again
    ANSWERED + [_ex("e" * 24, "fleet_rollout.record_answer", "running", "3")],  # goes on
    [_ex("e" * 24, "core.ask", "pending", "2")],                       # waits for a person
], ids=["next question", "task running", "question pending"])
def test_a_batch_paused_for_a_reason_is_left_alone(children):
    api = FakeApi(children)
    out, kept, _ = _watch(api)
    assert out["resumed"] is False and api.puts == [] and kept == []


def test_a_running_batch_needs_nothing():
    api = FakeApi(list(ANSWERED), status="running")
    out, kept, _ = _watch(api)
    assert (out["resumed"], out["status"], api.puts, kept) == (False, "running", [], [])


def test_a_resume_refused_because_it_is_no_longer_paused_is_fine_other_refusals_are_not():
    api = FakeApi(list(ANSWERED), refuse=400)
    out, _, _ = _watch(api)
    assert out["resumed"] is True and len(api.puts) >= 1
    with pytest.raises(ApiRefused):
        _watch(FakeApi(list(ANSWERED), refuse=403))


def test_answered_question_is_the_latest_completed_ask_with_nothing_active():
    assert answered_question(ANSWERED)["id"] == ASK
    assert answered_question([]) is None
    assert answered_question(list(reversed(ANSWERED)))["id"] == ASK  # by start time


def test_a_batch_left_resuming_after_its_answer_is_reported_stuck_not_resumed():
    api = FakeApi(list(ANSWERED), status="resuming")
    kept: List[Any] = []
    clock = Clock()
    out = Stranded(api, lambda *a: kept.append(a), lambda *a: None, sleep=clock.sleep,
                   clock=clock).settle(ASK, wait=60, settle=2, stuck=30)
    assert (out["stuck"], out["resumed"], out["status"]) == (True, False, "resuming")
    assert api.puts == [] and kept == []
    assert 30 <= clock.now < 31


def test_a_batch_resuming_for_a_moment_is_not_reported():
    api = FakeApi(list(ANSWERED), status="resuming")
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 3:
            api.status = "running"

    out = Stranded(api, lambda *a: None, lambda *a: None, sleep=sleep,
                   clock=clock).settle(ASK, wait=60, settle=2, stuck=30)
    assert (out["stuck"], out["status"]) == (False, "running")
