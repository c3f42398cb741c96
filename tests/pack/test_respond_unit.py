"""fleet_rollout.respond (inquiries.respond) over a stand-in of the st2 API: it answers once the
question's workflow has paused on its inquiry (StackStorm records who answered only then), and
says when its answer still came first. The real APIs (the runtime's and st2's) are exercised by
the e2e approval tests."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout import inquiries
from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import ConfigError
from fleet_rollout.store import MemoryStore, RolloutState

CONFIG = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                           "approvers": ["alice"], "answer_gap": 5})
SCHEMA = {"properties": {"approved": {"type": "boolean"}, "rollout_id": {"default": "r1"}}}


class Api:
    """The question's workflow w1 pauses after `pause_after` reads of it; its log and the
    inquiry's end are stamped with `clock`."""

    def __init__(self, pause_after: int, forged_first: bool = False,
                 clock: Any = None) -> None:
        self.pause_after = pause_after
        self.reads = 0
        self.clock = clock or (lambda: 0.0)
        self.answered_at = None
        self.workflow: Dict[str, Any] = {
            "id": "w1", "status": "running", "context": {},
            "log": [{"status": "running", "timestamp": 0.0}],
            "action": {"ref": "fleet_rollout.question"},
            "parameters": {"rollout_id": "r1", "batch": 0, "question": "approval"}}
        self.puts: List[Any] = []
        self.forged_first = forged_first
        self.store = MemoryStore()  # the batch recorded w1 as its question (fleet_rollout.ask)
        RolloutState(self.store, "r1").update_batch(
            0, lambda b: b.update(questions={"approval": {"workflow": "w1"}}))

    def own_execution(self) -> Dict[str, Any]:
        return {"context": {"user": "alice"}}

    def get(self, path: str) -> Any:
        assert path == "inquiries"
        forged = [{"id": "i2", "schema": SCHEMA}] if self.forged_first else []
        return forged + [{"id": "i1", "schema": SCHEMA}]

    def execution(self, ex_id: str) -> Dict[str, Any]:
        if ex_id == "i1":
            if self.answered_at is not None:
                return {"id": "i1", "parent": "w1", "status": "succeeded",
                        "end_timestamp": self.answered_at}
            return {"id": "i1", "parent": "w1", "status": "pending"}
        if ex_id == "i2":  # a core.ask somebody started with the rollout's id in its schema
            return {"id": "i2", "parent": "w2", "status": "pending"}
        if ex_id == "w2":  # ... in a question workflow of their own, which no batch recorded
            return dict(self.workflow, id="w2")
        self.reads += 1
        if self.reads > self.pause_after and self.workflow["status"] == "running":
            self.workflow["status"] = "paused"
            self.workflow["log"].append({"status": "paused", "timestamp": self.clock()})
        return dict(self.workflow)

    def put(self, path: str, body: Any) -> Any:
        self.puts.append((path, body, self.workflow["status"]))
        if self.workflow["status"] == "paused":  # st2's respond: the requester recorded
            self.workflow["context"]["resumed_by"] = "alice"
            self.workflow["status"] = "resuming"
            self.workflow["log"].append({"status": "resuming", "timestamp": self.clock()})
        self.answered_at = self.clock()
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_respond_answers_once_the_question_has_paused():
    clock = Clock()
    api = Api(pause_after=4, clock=clock)  # the first read: which question it is
    out = inquiries.respond(CONFIG, "r1", "approve", api, api.store, sleep=clock.sleep,
                            clock=clock)
    [(path, body, status_then)] = api.puts
    assert path == "inquiries/i1" and body["response"] == {"approved": True, "rollout_id": "r1"}
    assert status_then == "paused" and clock.now == 3 * inquiries.POLL
    assert out["attributed"] is True and "answered approve" in out["message"]


def test_respond_says_so_when_its_answer_still_came_before_the_pause():
    clock = Clock()
    api = Api(pause_after=10**6, clock=clock)
    out = inquiries.respond(CONFIG, "r1", "approve", api, api.store, sleep=clock.sleep,
                            clock=clock)
    [(_path, _body, status_then)] = api.puts
    assert status_then == "running" and clock.now >= inquiries.PAUSE_WAIT
    assert out["attributed"] is False
    assert "not counted (the answer came before StackStorm had paused that question" \
        in out["message"] and "the question is asked again" in out["message"]


def test_respond_answers_only_the_question_the_rollout_asked():
    """A question somebody else started with the rollout's id (listed first) is passed over;
    with only that one pending, the rollout is not waiting for an answer."""
    api, clock = Api(pause_after=0, forged_first=True), Clock()
    out = inquiries.respond(CONFIG, "r1", "approve", api, api.store, sleep=clock.sleep,
                            clock=clock)
    assert [put[0] for put in api.puts] == ["inquiries/i1"] and out["inquiry"] == "i1"
    RolloutState(api.store, "r1").update_batch(
        0, lambda b: b.update(questions={"approval": {"workflow": "w9"}}))
    with pytest.raises(ConfigError, match="not waiting for an answer"):
        inquiries.respond(CONFIG, "r1", "approve", api, api.store, sleep=clock.sleep,
                          clock=clock)


def test_respond_says_so_when_somebody_resumed_the_question_before_the_answer():
    """`st2 execution resume` of the paused question by somebody else leaves their name as
    resumed_by and the workflow running; the answer after it resumes nothing: not counted."""
    clock = Clock()
    api = Api(pause_after=10**6, clock=clock)
    api.workflow["context"]["resumed_by"] = "mallory"
    api.workflow["log"] += [{"status": "paused", "timestamp": 0.0},
                            {"status": "resuming", "timestamp": 1.0},
                            {"status": "running", "timestamp": 1.0}]
    clock.now = 60.0
    out = inquiries.respond(CONFIG, "r1", "approve", api, api.store, sleep=clock.sleep,
                            clock=clock)
    assert api.workflow["context"]["resumed_by"] == "mallory"
    assert out["attributed"] is False
    assert "resumed 89 s before the answer (by mallory)" in out["message"], out["message"]


@pytest.mark.parametrize("value", [0, 3601, "soon", True])
def test_a_bad_answer_gap_is_named(value):
    with pytest.raises(ConfigError, match="answer_gap must be a number of seconds"):
        load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                          "answer_gap": value})


def test_the_answer_gap_defaults_to_five_minutes():
    config = load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}}})
    assert config.answer_gap == 300.0
