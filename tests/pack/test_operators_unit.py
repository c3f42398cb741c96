"""Who may plan, start, abort, roll back and restore: the pack config's operators, checked
against the identity StackStorm recorded for the action's execution (approvals.caller), on
StackStorm with or without RBAC. In this process, with a memory datastore; the same refusals
through the runtime's st2 API are in tests/runtime/test_rbac.py and tests/e2e."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest
from test_batch_info import stored_plan

from fleet_rollout import approvals, service
from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import ConfigError
from fleet_rollout.store import RolloutState

CONFIG: Dict[str, Any] = {"credentials": {"lab": {"username": "u", "password": "p"}},
                          "operators": ["alice"], "approvers": ["alice", "bob"],
                          "chatops_users": ["chatops_bot"]}


def _config(tmp_path: Path, **extra: Any) -> Dict[str, Any]:
    return dict(CONFIG, state_dir=str(tmp_path / "state"), **extra)


def ident(user: str, api_user: str = "") -> approvals.Identity:
    ctx: Dict[str, Any] = {"user": user}
    if api_user:
        ctx["api_user"] = api_user
    return approvals.caller({"context": ctx})


def test_the_caller_is_the_chat_user_only_through_a_chat_bot_account() -> None:
    config = load_pack_config(CONFIG)
    assert approvals.trusted(ident("chatops_bot", "alice"), config).name == "alice"
    assert approvals.trusted(ident("mallory", "alice"), config).name == "mallory"
    # a task of a workflow an alias started: the root's api_user, from the parent chain
    nested = {"context": {"user": "chatops_bot", "parent": {
        "user": "chatops_bot", "parent": {"user": "chatops_bot", "api_user": "alice"}}}}
    assert approvals.caller(nested).name == "alice"
    # a context a caller passed to POST /executions: another account below is not st2's
    forged = {"context": {"user": "mallory", "parent": {"user": "chatops_bot",
                                                         "api_user": "alice"}}}
    assert approvals.caller(forged) == approvals.Identity("mallory", "mallory", "api")


def test_only_operators_plan_and_the_refusal_names_them(tmp_path: Path) -> None:
    config = load_pack_config(CONFIG)
    approvals.require_operator(ident("alice"), config, "x")
    approvals.require_operator(ident("chatops_bot", "alice"), config, "x")
    with pytest.raises(approvals.NotAnOperator, match="Refused: bob is not an operator "
                                                      r"\(operators: alice\)"):
        approvals.require_operator(ident("bob"), config, "x")
    with pytest.raises(approvals.NotAnOperator, match="mallory is not an operator"):
        approvals.require_operator(ident("mallory", "alice"), config, "x")
    with pytest.raises(approvals.NotAnOperator, match="names no operators"):
        approvals.require_operator(ident("alice"), load_pack_config(
            dict(CONFIG, operators=[])), "x")
    with pytest.raises(approvals.NotAnOperator, match="bob is not an operator"):
        service.plan_rollout(_config(tmp_path), None, "home-snoop", caller=ident("bob"))


def _rollout(tmp_path: Path, rollout_id: str, status: str) -> Any:
    _plan, store = stored_plan(rollout_id, 4)
    state = RolloutState(store, rollout_id)
    state.update_meta(status=status, started_by="carol")
    return store, state


def test_abort_by_a_non_operator_is_refused_and_halts_nothing(tmp_path: Path) -> None:
    store, state = _rollout(tmp_path, "ab-1", "running")
    with pytest.raises(approvals.NotAnOperator, match="bob is not an operator"):
        service.abort(_config(tmp_path), store, "ab-1", caller=ident("bob"))
    assert state.halted() is None
    out = service.abort(_config(tmp_path), store, "ab-1", caller=ident("alice"))
    assert out["halted"] and state.halted()["by"] == "alice"


def test_the_automatic_rollback_runs_as_whoever_started_the_rollout(tmp_path: Path) -> None:
    store, state = _rollout(tmp_path, "ab-2", "running")
    with pytest.raises(approvals.NotAnOperator):
        service.abort(_config(tmp_path), store, "ab-2", "automatic", 0, caller=ident("bob"))
    assert state.halted() is None
    service.abort(_config(tmp_path), store, "ab-2", "automatic", 0, caller=ident("carol"))
    assert state.halted() is not None


@pytest.mark.parametrize("status", ["completed", "rolled_back", "rejected"])
def test_an_ended_rollout_is_rolled_back_only_by_an_operator_with_force(
        tmp_path: Path, status: str) -> None:
    store, state = _rollout(tmp_path, "ab-3", status)
    with pytest.raises(ConfigError, match=f"has ended \\({status}\\).*force=true"):
        service.abort(_config(tmp_path), store, "ab-3", caller=ident("alice"))
    with pytest.raises(approvals.NotAnOperator):
        service.abort(_config(tmp_path), store, "ab-3", "automatic", caller=ident("carol"),
                      force=True)
    assert state.halted() is None
    service.abort(_config(tmp_path), store, "ab-3", caller=ident("alice"), force=True)
    assert state.halted()["by"] == "alice"
    # halted, on its way back: a halt again (a rollback's retry, the watchdog's re-run)
    # changes nothing
    again = service.abort(_config(tmp_path), store, "ab-3", caller=ident("bob"))
    assert again["already"] is True and state.halted()["by"] == "alice"
    # ended halted (rolled back): its rollback run again is an operator's choice, with force
    state.update_meta(status="rolled_back")
    with pytest.raises(approvals.NotAnOperator, match="bob is not an operator"):
        service.abort(_config(tmp_path), store, "ab-3", caller=ident("bob"), force=True)
    with pytest.raises(ConfigError, match="force=true"):
        service.abort(_config(tmp_path), store, "ab-3", caller=ident("alice"))
    assert service.abort(_config(tmp_path), store, "ab-3", caller=ident("alice"),
                         force=True)["already"] is True


def test_a_restore_outside_a_halt_or_a_failure_needs_an_operator(tmp_path: Path) -> None:
    store, state = _rollout(tmp_path, "ab-4", "running")
    host = state.plan()["batches"][0]["hosts"][0]
    with pytest.raises(approvals.NotAnOperator, match=f"restoring {host}"):
        service.host_restore(_config(tmp_path), store, "ab-4", host, caller=ident("bob"))


def test_changed_hosts_needs_a_halted_rollout(tmp_path: Path) -> None:
    store, _state = _rollout(tmp_path, "ab-5", "running")
    with pytest.raises(ConfigError, match="is not halted"):
        service.changed_hosts(_config(tmp_path), store, "ab-5")


class _Api:
    """The executions a batch_info action sees: its own (in batch workflow b1), b1 (started
    by rollout workflow r1 as `batch_user`), r1 (as alice)."""

    def __init__(self, batch_user: str = "alice", batch: int = 0) -> None:
        self.records = {
            "own": {"context": {"user": batch_user, "parent": {"execution_id": "b1"}}},
            "b1": {"action": {"ref": "fleet_rollout.rollout_batch"},
                   "parameters": {"rollout_id": "bw-1", "batch": batch},
                   "context": {"user": batch_user, "parent": {"execution_id": "r1"}}},
            "r1": {"action": {"ref": "fleet_rollout.rollout"}, "context": {"user": "alice"}}}

    def own_execution(self) -> Dict[str, Any]:
        return self.records["own"]

    def execution(self, ex_id: str) -> Dict[str, Any]:
        return self.records[ex_id]


def test_a_batch_workflow_runs_only_as_its_rollouts_own(tmp_path: Path) -> None:
    """batch_info, the first task of rollout_batch, refuses a batch workflow the rollout did
    not start: another account's (its context may name the real rollout as its parent: st2
    keeps a context the caller passes), another batch's, or one of a rollout planned outside a
    rollout workflow."""
    store, state = _rollout(tmp_path, "bw-1", "running")
    state.update_meta(workflow="r1")
    service.check_batch_workflow(_Api(), state, "bw-1", 0)
    for api in (_Api(batch_user="mallory"), _Api(batch=1)):
        with pytest.raises(ConfigError, match="Refused: rollout bw-1 batch 1 runs only"):
            service.check_batch_workflow(api, state, "bw-1", 0)
    with pytest.raises(ConfigError, match="Refused"):
        service.batch_info(_config(tmp_path), store, "bw-1", 0, _Api(batch_user="mallory"))
    state.update_meta(workflow="")
    with pytest.raises(ConfigError, match="none recorded"):
        service.check_batch_workflow(_Api(), state, "bw-1", 0)
