"""questions.py over a stand-in of the st2 API (a dict of executions): a batch's question is
started as a root execution, its answer read by polling, who answered kept before anything
resumes the question's workflow, and a question nobody may answer any more is canceled.
The real API (the runtime's and st2's) is exercised by the e2e approval tests."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout import questions
from fleet_rollout.st2api import ApiRefused
from fleet_rollout.store import MemoryStore, RolloutState


class FakeApi:
    def __init__(self, clock: Any = None) -> None:
        self.clock = clock or (lambda: 0.0)
        self.executions: Dict[str, Dict[str, Any]] = {}
        self.children: Dict[str, List[Dict[str, Any]]] = {}
        self.posts: List[Dict[str, Any]] = []
        self.puts: List[Any] = []

    def post(self, path: str, body: Any) -> Any:
        assert path == "executions"
        self.posts.append(body)
        ex_id = f"w{len(self.posts)}"
        now = self.clock()
        self.executions[ex_id] = {"id": ex_id, "status": "paused", "context": {},
                                  "log": [{"status": "running", "timestamp": now},
                                          {"status": "paused", "timestamp": now}]}
        self.children[ex_id] = [{"id": f"i{len(self.posts)}", "action": {"ref": "core.ask"},
                                 "status": "pending", "start_timestamp": "1"}]
        return self.executions[ex_id]

    def get(self, path: str) -> Any:
        ex_id = path.split("/")[1]
        return self.children[ex_id]

    def execution(self, ex_id: str) -> Dict[str, Any]:
        return self.executions[ex_id]

    def put(self, path: str, body: Any) -> Any:
        self.puts.append((path, body))
        ex_id = path.split("/")[1]
        if self.executions[ex_id]["status"] in ("succeeded", "canceled"):
            raise ApiRefused("already in completed state", 400)
        if body["status"] == "canceling":
            self.executions[ex_id]["status"] = "canceled"
            self.executions[ex_id]["context"]["cancelled_by"] = "st2rulesengine"
        return {}

    def answer(self, ex_id: str, requester: str) -> None:
        """What st2's respond() writes: the requester on the paused workflow, then the
        inquiry's success (the workflow's own resume may never come: the race)."""
        self.resume(ex_id, requester)
        self.children[ex_id][0].update(status="succeeded", end_timestamp=self.clock())

    def resume(self, ex_id: str, requester: str) -> None:
        """st2's request_resume of a paused workflow: its requester and a log entry."""
        workflow = self.executions[ex_id]
        if workflow["status"] == "paused":
            workflow["context"]["resumed_by"] = requester
            workflow["log"].append({"status": "resuming", "timestamp": self.clock()})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture()
def asking():
    clock = Clock()
    api = FakeApi(clock)
    state = RolloutState(MemoryStore(), "r1")
    return questions.Questions(api, state, sleep=clock.sleep, clock=clock,
                               answer_gap=5), api, clock


def test_a_question_is_a_root_execution_recorded_for_its_batch(asking):
    q, api, clock = asking
    record = q.ask(2, "approval", "Approve batch 3?", ["alice"], [], 60)
    [body] = api.posts
    assert body["action"] == "fleet_rollout.question"
    params = body["parameters"]
    assert (params["rollout_id"], params["batch"], params["question"]) == ("r1", 2, "approval")
    assert params["schema"]["properties"]["approved"]["description"] == "Approve batch 3?"
    assert params["users"] == ["alice"] and params["ttl"] == 60
    assert q.asked(2, "approval") == record == {"workflow": "w1", "asked": 1000.0, "ttl": 60}


def test_pending_until_answered_then_the_requester_kept_and_a_stuck_workflow_canceled(asking):
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert out["status"] == "pending" and clock.now == 1005.0
    api.answer("w1", "alice")  # the workflow stays paused: st2 dropped its resume
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert (out["status"], out["inquiry"]) == ("answered", "i1")
    # the requester is kept; the workflow, given its few seconds, is canceled
    assert q.author(0, "i1") == "alice"
    assert out["workflow_status"] == "canceling" and clock.now >= 1010.0
    assert api.puts == [("executions/w1", {"status": "canceling"})]
    # read again (a retried task): the first requester kept still counts, nothing more sent
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert q.author(0, "i1") == "alice" and out["workflow_status"] == "canceled"
    assert len(api.puts) == 1


def test_an_answered_question_whose_workflow_ends_by_itself_is_left_alone(asking):
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    api.answer("w1", "alice")
    api.executions["w1"]["status"] = "succeeded"
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert (out["status"], out["workflow_status"]) == ("answered", "succeeded")
    assert api.puts == []


def test_a_timed_out_inquiry_and_a_passed_ttl_are_timed_out(asking):
    q, api, clock = asking
    q.ask(0, "approval", "?", [], ["approvers"], 1)
    api.children["w1"][0]["status"] = "timeout"
    assert q.await_answer(0, "approval", wait=5, poll=1)["status"] == "timed_out"
    q.ask(1, "approval", "?", [], ["approvers"], 1)  # st2 without an inquiry garbage collector
    out = q.await_answer(1, "approval", wait=600, poll=1)
    assert out["status"] == "timed_out" and out["why"] == "its ttl passed"
    assert clock.now >= 1060.0
    assert ("executions/w2", {"status": "canceling"}) in api.puts


def test_a_halted_rollout_cancels_its_question(asking):
    q, api, clock = asking
    q.ask(0, "inconclusive", "INCONCLUSIVE ...", ["alice"], [], 60)
    assert "choice" in api.posts[0]["parameters"]["schema"]["properties"]
    q.state.halt("halted by bob", "bob")
    out = q.await_answer(0, "inconclusive", wait=5, poll=1)
    assert (out["status"], out["why"]) == ("halted", "halted by bob")
    assert api.puts == [("executions/w1", {"status": "canceling"})]


def test_await_without_a_question_refuses(asking):
    q, _api, _clock = asking
    with pytest.raises(ApiRefused, match="asked no approval question"):
        q.await_answer(0, "approval")


def test_an_answer_nobody_is_recorded_for_is_asked_again_with_the_rest_of_its_ttl(asking):
    q, api, clock = asking
    q.ask(0, "approval", "Approve batch 1?", ["alice"], [], 60)
    calls = []

    def reask(kind, inquiry_id, ttl_left, why):
        calls.append((kind, inquiry_id, ttl_left))
        assert "before StackStorm had paused that question" in why
        return q.ask(0, kind, "Asked again: ...", ["alice"], [], ttl_left,
                     again=q.asked(0, kind))

    clock.now += 25 * 60  # 25 of its 60 minutes gone
    # answered before its workflow paused: st2 resumed nothing, recorded nobody
    api.children["w1"][0].update(status="succeeded", end_timestamp=clock.now)
    out = q.await_answer(0, "approval", wait=5, poll=1, reask=reask)
    assert out.pop("why").startswith("the answer came before StackStorm had paused")
    assert out == {"status": "pending", "workflow": "w2", "unattributed": "i1",
                   "workflow_status": "canceling"}
    assert calls == [("approval", "i1", 35)]
    assert q.author(0, "i1") == ""
    # the new question keeps the first one's ttl, and counts how often it was asked again
    assert q.asked(0, "approval") == {"workflow": "w2", "asked": 1000.0, "ttl": 60,
                                      "asked_again": 1}
    assert api.posts[1]["parameters"]["ttl"] == 35
    # the batch's next read waits for the new question; its answer, attributed, counts
    api.answer("w2", "alice")
    out = q.await_answer(0, "approval", wait=5, poll=1, reask=reask)
    assert (out["status"], out["inquiry"]) == ("answered", "i2")
    assert q.author(0, "i2") == "alice" and len(calls) == 1


def test_the_requester_written_between_two_reads_is_kept(asking):
    """respond() may come between await_answer's read of the workflow and of the inquiry:
    the workflow is read again once the answer is seen."""
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    first_read = api.execution

    def execution(ex_id):
        record = dict(first_read(ex_id), context=dict(first_read(ex_id)["context"]))
        if api.children["w1"][0]["status"] == "pending":
            api.answer("w1", "alice")  # the answer lands right after this read
        return record

    api.execution = execution
    out = q.await_answer(0, "approval", wait=5, poll=1,
                         reask=lambda *a: pytest.fail("asked again"))
    assert out["status"] == "answered" and q.author(0, "i1") == "alice"


def test_without_a_reask_an_unattributed_answer_is_answered_with_no_author(asking):
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    api.children["w1"][0].update(status="succeeded", end_timestamp=clock.now)
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert out["status"] == "answered" and q.author(0, "i1") == ""


def test_a_question_without_ttl_has_none_left(asking):
    q, _api, clock = asking
    assert q.ttl_left({"asked": 1000.0, "ttl": 0}) == 0
    clock.now += 59.5 * 60
    assert q.ttl_left({"asked": 1000.0, "ttl": 60}) == 1
    clock.now += 3600
    assert q.ttl_left({"asked": 1000.0, "ttl": 60}) == 1


def _asked_again(q, calls):
    def reask(kind, inquiry_id, ttl_left, why):
        calls.append((inquiry_id, why))
        return q.ask(0, kind, "Asked again: ...", ["alice"], [], ttl_left,
                     again=q.asked(0, kind))
    return reask


def test_a_resume_by_somebody_else_before_the_answer_names_nobody(asking):
    """mallory resumes the paused question (the workflow runs on with its inquiry pending);
    alice's answer later resumes nothing, so resumed_by still says mallory: not counted."""
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    clock.now += 30
    api.resume("w1", "mallory")
    api.executions["w1"]["status"] = "running"
    clock.now += 60
    api.children["w1"][0].update(status="succeeded", end_timestamp=clock.now)  # alice
    calls: List[Any] = []
    out = q.await_answer(0, "approval", wait=5, poll=1, reask=_asked_again(q, calls))
    assert out["status"] == "pending" and out["unattributed"] == "i1"
    [(inquiry_id, why)] = calls
    assert inquiry_id == "i1" and "resumed 60 s before the answer (by mallory)" in why
    assert q.author(0, "i1") == ""
    api.answer("w2", "alice")  # asked again and answered: alice counts
    out = q.await_answer(0, "approval", wait=5, poll=1, reask=_asked_again(q, calls))
    assert out["status"] == "answered" and q.author(0, "i2") == "alice"


def test_a_resume_by_somebody_else_after_the_answer_changes_nothing_kept(asking):
    """alice answers; mallory resumes the workflow the race left paused: alice, read first,
    is kept; read only after mallory's resume, nobody is named (two resumes)."""
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    clock.now += 10
    api.answer("w1", "alice")
    api.executions["w1"]["status"] = "paused"  # st2 dropped the answer's resume
    out = q.await_answer(0, "approval", wait=5, poll=1)
    assert out["status"] == "answered" and q.author(0, "i1") == "alice"
    clock.now += 1
    api.resume("w1", "mallory")
    assert q.keep_author(0, api.children["w1"][0], api.executions["w1"]) == ("alice", "")

    q.ask(1, "approval", "?", ["alice"], [], 60)
    clock.now += 10
    api.answer("w2", "alice")
    api.executions["w2"]["status"] = "paused"
    clock.now += 1
    api.resume("w2", "mallory")
    author, why = q.keep_author(1, api.children["w2"][0], api.executions["w2"])
    assert author == "" and "resumed 2 times" in why and q.author(1, "i2") == ""


def test_a_resume_by_somebody_else_before_an_answer_given_before_the_pause(asking):
    """The answer came before the pause (nobody recorded); mallory then resumes the paused
    workflow and is recorded as resumed_by: still nobody is named."""
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    api.executions["w1"]["log"] = [{"status": "running", "timestamp": clock.now}]
    api.children["w1"][0].update(status="succeeded", end_timestamp=clock.now)
    clock.now += 1
    api.executions["w1"]["log"].append({"status": "paused", "timestamp": clock.now})
    clock.now += 1
    api.resume("w1", "mallory")
    author, why = q.keep_author(0, api.children["w1"][0], api.executions["w1"])
    assert author == "" and "before StackStorm had paused" in why


@pytest.mark.parametrize("stamp, seconds", [
    ("2026-12-06T06:00:00.12Z", 1796536800.12),
    ("2026-12-06T06:00:00.123456Z", 1796536800.123456),
    ("2026-12-06T06:00:00Z", 1796536800.0),
    ("2026-12-06T06:00:00.123456+00:00", 1796536800.123456),
    (1796536800.5, 1796536800.5),
    ("", None), ("yesterday", None), (None, None)])
def test_timestamps_in_every_form_st2_writes(stamp, seconds):
    got = questions.seconds_of(stamp)
    assert got == seconds if seconds is None else abs(got - seconds) < 1e-6


class FailingBatchWrites(MemoryStore):
    """A datastore whose next `fail` writes of batch state fail (a busy st2api)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def set(self, key: str, value: str) -> None:
        if self.fail and ".batch." in key:
            self.fail -= 1
            raise ApiRefused("PUT keys: the StackStorm API answered 503", 503)
        super().set(key, value)


def _unattributed(api, clock, workflow="w1"):
    """Answered before its workflow paused: st2 recorded nobody."""
    api.children[workflow][0].update(status="succeeded", end_timestamp=clock.now)


def _live(api):
    return {ex_id for ex_id, ex in api.executions.items() if ex["status"] != "canceled"}


def test_a_retry_after_a_failed_record_leaves_one_live_question():
    """An attempt whose new question could not be recorded cancels it and gives up its
    claim; orquesta's retry asks again at once, and one question is left to answer."""
    clock, store = Clock(), FailingBatchWrites()
    api = FakeApi(clock)
    q = questions.Questions(api, RolloutState(store, "r1"), sleep=clock.sleep, clock=clock)
    q.ask(0, "approval", "?", ["alice"], [], 60)
    _unattributed(api, clock)
    calls = []

    def reask(kind, inquiry_id, ttl_left, why):
        calls.append(inquiry_id)
        store.fail = 1 if len(calls) == 1 else 0  # the first attempt's record fails
        return q.ask(0, kind, "Asked again", ["alice"], [], ttl_left,
                     again=q.asked(0, kind), reask_of=inquiry_id)

    with pytest.raises(ApiRefused, match="503"):
        q.await_answer(0, "approval", wait=5, poll=1, reask=reask)
    assert q.reasked(0, "i1")["given_up"] is True
    out = q.await_answer(0, "approval", wait=5, poll=1, reask=reask)  # the retry
    assert (out["status"], out["workflow"]) == ("pending", "w3")
    assert calls == ["i1", "i1"]
    assert _live(api) == {"w3"} and q.asked(0, "approval")["workflow"] == "w3"
    assert q.reasked(0, "i1")["workflow"] == "w3"
    # any later attempt finds it asked again and asks nothing
    assert q.ask_again(0, "approval", "i1", 30, "why", reask, clock.now, 1) == "w3"
    assert len(calls) == 2


def test_overlapping_attempts_ask_an_unattributed_answer_again_once(asking):
    """A second run of the await task while the first is asking: it waits for the first's
    question and asks nothing itself."""
    q, api, clock = asking
    q.ask(0, "approval", "?", ["alice"], [], 60)
    _unattributed(api, clock)
    calls, inner = [], []

    def reask(kind, inquiry_id, ttl_left, why):
        calls.append(inquiry_id)
        if len(calls) == 1:  # run B, whole, inside run A's asking (before A's record)
            inner.append(q.await_answer(0, "approval", wait=3, poll=1, reask=reask))
        return q.ask(0, kind, "Asked again", ["alice"], [], ttl_left,
                     again=q.asked(0, kind), reask_of=inquiry_id)

    out = q.await_answer(0, "approval", wait=5, poll=1, reask=reask)
    assert calls == ["i1"] and len(api.posts) == 2
    assert out["workflow"] == "w2"
    # B waited its 3 s for A's question, then handed the wait back to the workflow
    [b] = inner
    assert (b["status"], b["unattributed"]) == ("pending", "i1")
    assert b["workflow"] == "w1"
    # the next run waits on A's question
    nxt = q.await_answer(0, "approval", wait=2, poll=1, reask=reask)
    assert (nxt["status"], nxt["workflow"]) == ("pending", "w2") and calls == ["i1"]


def test_a_claim_past_its_lease_is_taken_over(asking):
    q, api, clock = asking
    verdict, first = q.claim_reask(0, "i9")
    assert verdict == "ask"
    assert q.claim_reask(0, "i9")[0] == "busy"
    clock.now += questions.REASK_LEASE + 1  # its attempt died without a word
    verdict, second = q.claim_reask(0, "i9")
    assert verdict == "ask" and second["claim"] != first["claim"]
