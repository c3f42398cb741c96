"""Chat messages composed from API records for what rules see (fleet_rollout.chat): records
that lack fields (a cancelled workflow has no output, a failed plan has no rollout id)."""
from __future__ import annotations

from fleet_rollout import chat


def test_approval_question_names_the_rollout_and_the_answers():
    text = chat.inquiry_message({"id": "i1", "schema": {"properties": {
        "approved": {"type": "boolean"}, "rollout_id": {"default": "r-20261123-ab"}}}},
        "r-20261123-ab")
    assert "rollout r-20261123-ab (inquiry i1)" in text
    assert "`rollout approve r-20261123-ab`" in text and "`rollout reject r-20261123-ab`" in text


def test_inconclusive_question_offers_extend_proceed_and_rollback():
    text = chat.inquiry_message({"id": "i2", "schema": {"properties": {
        "choice": {"enum": ["extend", "proceed", "rollback"]}, "rollout_id": {"default": "r1"}}}},
        "r1")
    assert "INCONCLUSIVE" in text and "`rollout extend r1`" in text


def test_ended_rollout_without_output_is_still_named():
    cancelled = {"id": "e1", "status": "canceled", "parameters": {"profile": "home-snoop",
                                                                  "rollout_id": "r1"},
                 "result": {}}
    text = chat.ended_message(cancelled, "canceled")
    assert text.startswith("Rollout r1 ended: workflow canceled") and "None" not in text


def test_a_rollout_that_never_planned_says_so_instead_of_none_running():
    failed = {"id": "e2", "status": "failed", "parameters": {"profile": "home-snoop"},
              "result": {"output": {"rollout_id": None, "status": "running"},
                         "errors": [{"message": "inventory /x: no such file"}]}}
    text = chat.ended_message(failed, "failed")
    assert "did not start" in text and "inventory /x" in text
    assert "None" not in text and "running" not in text


def test_completed_rollout_reports_its_status():
    done = {"id": "e3", "status": "succeeded", "parameters": {"profile": "p"},
            "result": {"output": {"rollout_id": "r9", "status": "completed"}}}
    assert chat.ended_message(done, "succeeded") == (
        "Rollout r9 ended: workflow succeeded, rollout completed (execution e3).")


class _Api:
    """A stand-in of the st2 API's reads: inquiry i1 asked by the question workflow w1 (which
    the rollout's batch recorded), i2 by w2 (started by somebody else, with the same
    parameters and the rollout's id in its schema)."""

    def execution(self, ex_id: str) -> dict:
        question = {"action": {"ref": "fleet_rollout.question"},
                    "parameters": {"rollout_id": "r1", "batch": 0, "question": "approval"}}
        return {"i1": {"parent": "w1"}, "i2": {"parent": "w2"},
                "w1": question, "w2": question}[ex_id]

    def get(self, path: str) -> dict:
        return {"id": path.rsplit("/", 1)[-1], "schema": {"properties": {
            "approved": {"type": "boolean"}, "rollout_id": {"default": "r1"}}}}


def test_only_a_question_the_rollout_asked_is_announced():
    import pytest

    from fleet_rollout.config import load_pack_config
    from fleet_rollout.questions import NotOurQuestion
    from fleet_rollout.store import MemoryStore, RolloutState

    config = load_pack_config({"credentials": {"d": {"username": "u", "password": "p"}}})
    store = MemoryStore()
    RolloutState(store, "r1").update_batch(
        0, lambda b: b.update(questions={"approval": {"workflow": "w1"}}))
    told = chat.compose(config, "inquiry", "i1", "", _Api(), store)  # type: ignore[arg-type]
    assert "Approval needed for rollout r1 (inquiry i1)" in told["message"]
    with pytest.raises(NotOurQuestion, match="not the question rollout r1 asked"):
        chat.compose(config, "inquiry", "i2", "", _Api(), store, 0)  # type: ignore[arg-type]


def test_a_question_seen_before_ask_recorded_it_is_announced_once_recorded():
    """The chat rule can see an inquiry a moment before `ask` records its workflow: the
    question is read again until it is (questions.question_of)."""
    from fleet_rollout import questions
    from fleet_rollout.store import MemoryStore, RolloutState

    store = MemoryStore()
    state = RolloutState(store, "r1")
    naps = []

    def sleep(seconds: float) -> None:  # `ask` records the question during the second nap
        naps.append(seconds)
        if len(naps) == 2:
            state.update_batch(0, lambda b: b.update(questions={"approval": {"workflow": "w1"}}))

    found = questions.question_of(_Api(), store, "i1", 30, sleep, lambda: 0.0)
    assert found == ("r1", 0, "approval") and len(naps) == 2
