"""What PUT /api/v1/executions/<id> (pause, resume) and DELETE (cancel) answer while the engine
has taken the request but not applied it yet: st2 writes pausing (resuming, canceling) before
it answers, so the answer shows that status, not the one before. In-process, with stand-ins for
the runtime's store and the engine (no engine runs here: the race is made, not waited for)."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_runtime.st2api.executions import Executions
from fleet_runtime.st2api.http import Request

EX_ID = "6b0963af2e9e2a5e5728f2c9"


class Store:
    def __init__(self, status: str) -> None:
        self.record: Dict[str, Any] = {"id": EX_ID, "status": status, "runner": "orquesta",
                                       "action": "rt_test.flow"}

    def resolve_execution_id(self, ex_id: str) -> str:
        return EX_ID

    def get_execution(self, ex_id: str) -> Dict[str, Any]:
        return dict(self.record)


class Service:
    """The engine took the request and answered; its loop has not applied it yet, or has
    (`applies`: the status the record has when the API reads it again)."""

    def __init__(self, store: Store, applies: str = "") -> None:
        self.rt = type("Runtime", (), {"store": store})()
        self.store = store
        self.applies = applies
        self.calls: List[str] = []
        self.rbac = type("Rbac", (), {"may_execution": lambda *args: True})()

    def check(self, allowed: bool, *args: Any) -> None:
        assert allowed

    def call(self, op: str, payload: Dict[str, Any]) -> Dict[str, Any]:
        self.calls.append(op)
        if self.applies:
            self.store.record["status"] = self.applies
        return {"id": payload["id"], "status": {"pause": "pausing", "resume": "resuming",
                                                "cancel": "canceling"}[op]}


def _executions(service: Service) -> Executions:
    executions = Executions(service)  # type: ignore[arg-type]
    executions._view = lambda req, record, with_children=True: record  # type: ignore
    return executions


def _request(body: Any = None) -> Request:
    return Request(method="PUT", path=f"/api/v1/executions/{EX_ID}", query={}, headers={},
                   body=body, user="sre-bob")


@pytest.mark.parametrize("before,wanted,op", [
    ("running", "pausing", "pause"), ("paused", "resuming", "resume")])
def test_a_pause_or_resume_not_applied_yet_answers_the_requested_status(
        before: str, wanted: str, op: str) -> None:
    service = Service(Store(before))
    view = _executions(service).update(_request({"status": wanted}), EX_ID)
    assert view["status"] == wanted and service.calls == [op]


def test_a_cancel_not_applied_yet_answers_canceling() -> None:
    service = Service(Store("running"))
    assert _executions(service).cancel(_request(), EX_ID)["status"] == "canceling"


def test_a_request_the_engine_applied_already_answers_what_the_record_says() -> None:
    service = Service(Store("running"), applies="paused")
    assert _executions(service).update(_request({"status": "pausing"}), EX_ID)["status"] == \
        "paused"
