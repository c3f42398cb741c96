"""Host actions whose action runner died, found and moved on.

On StackStorm, an action runner killed while it runs an action (SIGKILL, the machine lost)
leaves the action's execution `running` for good: the LiveAction and the ActionExecution are
updated separately (st2common/services/executions.py update_execution), the runner that died was
the one enforcing the timeout, and nothing reconciles them after a restart. The host_change (or
rollback) workflow that ran it waits, with the host drained.

`fleet_rollout.watchdog` (an interval-timer rule runs it every minute) reads the running host
actions (host steps and wave steps) through the st2 API. One is stale when its work ended (the
step recorded its outcome, with its execution id, in the host's state) more than
`watchdog_grace` seconds ago (a wave step: its outcome recorded under its execution id), or
when it has run longer than its timeout plus that grace. For each, once (a record per execution
in the rollout's state, set under a lock):

- its own execution is completed through the API with the outcome the step recorded (or as
  timed out: the workflow's retry runs the step again, idempotently). st2 accepts that while its
  LiveAction is still active, and the workflow goes on from the step's own outcome;
- st2 refuses it (400) when the runner wrote the LiveAction before it died: then
  `fleet_rollout.recover_host` runs the host's part of the change (a wave step: its wave; or the
  rollback) again, every step idempotent (a finished step is skipped, a reset is never sent
  twice, a halted rollout's host is restored), and completes the waiting workflow with that outcome.

Each is written to the audit trail and reported in chat.
"""
from __future__ import annotations

import datetime
import time
from typing import Any, Callable, Dict, List, Optional

from fleet_rollout.audit import Audit
from fleet_rollout.errors import ConfigError
from fleet_rollout.st2api import ApiRefused
from fleet_rollout.store import RolloutState, Store

HOST_STEP = "fleet_rollout.host_step"  # every step and restore of a host
WAVE_STEP = "fleet_rollout.wave_step"  # the host-side steps of a wave's hosts
WATCHED = (HOST_STEP, WAVE_STEP)
RECOVER = "fleet_rollout.recover_host"
RERUN_OF = {"fleet_rollout.host_change": "host_change", "fleet_rollout.wave_change": "wave_change",
            "fleet_rollout.rollback": "rollback"}
ACTIVE = ("running", "pausing", "paused", "resuming", "canceling")
DEFAULT_TIMEOUT = 600.0  # st2's python runner, when an execution names none
LIMIT = 100  # executions per list request (st2api's maximum for a non-admin)


def timestamp(text: Any) -> Optional[float]:
    """Seconds since the epoch of an st2 timestamp ("2026-12-02T03:04:05.123456Z")."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def running_since(execution: Dict[str, Any]) -> Optional[float]:
    """When the execution began to run: its last `running` entry in st2's status log
    (services/executions.py pushes one per status change). Its start_timestamp is when it was
    requested: an execution a concurrency policy kept `delayed` for a long time has been running
    for far less."""
    for entry in reversed(execution.get("log") or []):
        if isinstance(entry, dict) and entry.get("status") == "running":
            moment = timestamp(entry.get("timestamp"))
            if moment is not None:
                return moment
    return timestamp(execution.get("start_timestamp"))


def target(params: Dict[str, Any]) -> str:
    """The host a host action names, or the hosts of a wave step ("" when neither)."""
    host = params.get("host")
    if isinstance(host, str):
        return host
    hosts = params.get("hosts")
    if isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts):
        return ", ".join(hosts)
    return ""


def timeout_of(execution: Dict[str, Any]) -> float:
    """The seconds st2's runner gives the execution (its `timeout` parameter, else st2's
    default)."""
    try:
        return float((execution.get("parameters") or {}).get("timeout") or DEFAULT_TIMEOUT)
    except (TypeError, ValueError):
        return DEFAULT_TIMEOUT


def step_name(execution: Dict[str, Any]) -> str:
    params = execution.get("parameters") or {}
    return str(params.get("step") or "")


def work_ended(state: Dict[str, Any], execution: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The outcome the execution's step recorded in the host's state, if its work ended:
    {ok, at, error, result} (result: what the host_step action returns for it)."""
    steps = state.get("steps") or {}
    ex_id = str(execution.get("id"))
    step = step_name(execution)
    mine = {name: rec for name, rec in steps.items()
            if isinstance(rec, dict) and str(rec.get("execution")) == ex_id}
    record = mine.get(step)
    if not record or not isinstance(record.get("at"), (int, float)):
        return None
    detail = record.get("detail")
    error = detail.get("error") if isinstance(detail, dict) else None
    return {"ok": bool(record.get("ok")), "at": float(record["at"]), "error": error,
            "result": {"host": state.get("host"), "step": step, "skipped": False,
                       "detail": detail}}


def wave_ended(state: RolloutState, execution: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A wave step's end as it recorded it ({ok, at, error, result}: a wave step that ended
    succeeded, its hosts' outcomes in its result, as the wave's workflow reads them), or None
    while it has not ended."""
    end = state.wave_end(str(execution.get("id")))
    if not isinstance(end, dict) or not isinstance(end.get("at"), (int, float)):
        return None
    return {"ok": True, "at": float(end["at"]), "error": None,
            "result": dict(end.get("outcome") or {})}


class Watchdog:
    def __init__(self, api: Any, store: Store, grace: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.store = store
        self.grace = grace
        self.clock = clock

    def running(self) -> List[Dict[str, Any]]:
        found: List[Dict[str, Any]] = []
        for ref in WATCHED:
            found.extend(self.api.get(f"executions?action={ref}&status=running&limit={LIMIT}"))
        return found

    def judge(self, execution: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Why this running host action is stale (None: it is not, or not ours to judge)."""
        params = execution.get("parameters") or {}
        rollout_id = params.get("rollout_id")
        if not isinstance(rollout_id, str) or not target(params):
            return None
        now = self.clock()
        host = params.get("host")
        state = RolloutState(self.store, rollout_id)
        ended = work_ended(state.host(host), execution) if isinstance(host, str) else \
            wave_ended(state, execution)
        if ended is not None and now - ended["at"] > self.grace:
            return {"why": f"its work ended {int(now - ended['at'])} s ago and its execution "
                           "never did", "ended": ended}
        started = running_since(execution)
        timeout = timeout_of(execution)
        if ended is None and started is not None and now - started > timeout + self.grace:
            return {"why": f"it has run {int(now - started)} s, past its timeout of "
                           f"{int(timeout)} s", "ended": None, "timeout": timeout}
        return None

    def check(self, by: str = "", execution_id: str = "") -> List[Dict[str, Any]]:
        """Every stale host action found now, each handled once: what was done about it."""
        handled = []
        for execution in self.running():
            why = self.judge(execution)
            if why is None:
                continue
            done = self.handle(execution, why, by, execution_id)
            if done is not None:
                handled.append(done)
        return handled

    def handle(self, execution: Dict[str, Any], why: Dict[str, Any], by: str,
               own_id: str) -> Optional[Dict[str, Any]]:
        params = execution["parameters"]
        rollout_id, host, ex_id = params["rollout_id"], target(params), str(execution["id"])
        # the list read may be older than the execution's end (a loaded st2 records an end
        # seconds late): one that has ended since is left alone
        if str(self.api.execution(ex_id).get("status")) not in ACTIVE:
            return None
        state = RolloutState(self.store, rollout_id)
        record = {"execution": ex_id, "host": host, "step": step_name(execution),
                  "parent": str(execution.get("parent") or ""), "why": why["why"],
                  "found": self.clock(), "by": own_id}
        if not state.mark_stale(ex_id, record):
            return None
        record.update(self.move_on(execution, why))
        state.update_stale(ex_id, lambda kept: kept.update(record))
        Audit(self.store, rollout_id).record(
            host, "execution", ex_id, record["action"], execution=own_id, by=by,
            action="stale_execution")
        record["message"] = message(rollout_id, record)
        return record

    def move_on(self, execution: Dict[str, Any], why: Dict[str, Any]) -> Dict[str, Any]:
        """Complete the stale execution as its step ended (or as timed out); when st2 refuses
        (its LiveAction is completed), recover the host in a workflow of its own."""
        ex_id = str(execution["id"])
        ended = why.get("ended")
        if ended is not None:
            status = "succeeded" if ended["ok"] else "failed"
            # the python-script runner's output (st2 checks a succeeded one against the
            # runner's output schema when [system] validate_output_schema is on): the
            # action's own result under "result", nothing else beside stdout, stderr and
            # exit_code
            result = {"result": dict(ended.get("result") or {}, watchdog=why["why"]),
                      "stdout": "", "stderr": "", "exit_code": 0} if ended["ok"] else {
                "result": None, "stdout": "", "stderr": "", "exit_code": 1,
                "error": str(ended.get("error") or "the step failed"), "watchdog": why["why"]}
        else:
            status = "timeout"
            result = {"result": None, "stdout": "", "stderr": "", "exit_code": -9,
                      "error": f"Action failed to complete in {int(why['timeout'])} seconds: "
                               f"its action runner stopped ({why['why']})"}
        try:
            self.api.put(f"executions/{ex_id}", {"status": status, "result": result})
        except ApiRefused as err:
            if err.status != 400:
                raise
            now = str(self.api.execution(ex_id).get("status"))
            if now not in ACTIVE:  # it ended meanwhile: its workflow has its outcome
                return {"action": f"left: StackStorm recorded it {now} meanwhile",
                        "status": now}
        else:
            # what StackStorm recorded, which the workflow goes on with (it may differ: a
            # result its output checks refuse makes a succeeded one failed)
            recorded = str(self.api.execution(ex_id).get("status") or status)
            if recorded == status:
                return {"action": f"completed {status}", "status": status}
            return {"action": f"completed {status}; StackStorm recorded it {recorded}",
                    "status": recorded}
        parent_id = str(execution.get("parent") or "")
        parent = self.api.execution(parent_id) if parent_id else {}
        rerun = RERUN_OF.get(str((parent.get("action") or {}).get("ref")))
        if rerun is None or parent.get("status") not in ACTIVE:
            return {"action": "left", "status": "running",
                    "note": "its execution cannot be completed and no workflow waits for it"}
        given = parent.get("parameters") or {}
        params = execution["parameters"]
        host = params.get("host") if isinstance(params.get("host"), str) else params["hosts"][0]
        started = self.api.post("executions", {"action": RECOVER, "parameters": {
            "rollout_id": params["rollout_id"], "host": host, "stale": ex_id,
            "parent": parent_id, "rerun": rerun, "timeouts": given.get("timeouts") or {},
            "part": str(given.get("part") or "prepare"),
            "hosts": given.get("hosts"), "cause": str(given.get("cause") or "operator"),
            "batch": int(given.get("batch", -1) if given.get("batch") is not None else -1)}})
        return {"action": f"recovering in {started['id']}", "status": "running",
                "recovery": str(started["id"])}


def settle(api: Any, state: RolloutState, stale_id: str, parent_id: str,
           recovery_id: str, succeeded: bool, by: str = "") -> Dict[str, Any]:
    """The end of a recovery (fleet_rollout.recover_host): the workflow that waited for the
    stale execution is completed with the outcome of the host's change run again. Only the
    recovery the watchdog recorded for that execution may do it."""
    record = state.stale(stale_id) or {}
    if not record or record.get("recovery") != recovery_id or record.get("parent") != parent_id:
        raise ConfigError(f"execution {stale_id} of rollout {state.id} has no recovery "
                          f"{recovery_id} for workflow {parent_id} recorded by the watchdog; "
                          "nothing completed")
    status = "succeeded" if succeeded else "failed"
    host = str(record.get("host"))
    result: Dict[str, Any] = {"output": {"host": host, "recovered_by": recovery_id}}
    if not succeeded:
        result["errors"] = [{"message": f"host {host} failed after its {record.get('step')} "
                                        f"execution {stale_id} outlived its action runner; "
                                        f"see {recovery_id}"}]
    try:
        api.put(f"executions/{parent_id}", {"status": status, "result": result})
        settled = status
    except ApiRefused as err:
        if err.status != 400:
            raise
        settled = "already completed"
    state.update_stale(stale_id, lambda kept: kept.update({"settled": settled,
                                                           "settled_at": time.time()}))
    Audit(state.store, state.id).record(host, "execution", parent_id, settled,
                                        execution=recovery_id, by=by, action="stale_settled")
    ended = "had already ended" if settled == "already completed" else f"completed {settled}"
    text = (f"Rollout {state.id}: host {host} recovered after its {record.get('step')} "
            f"execution {stale_id} outlived its action runner: "
            f"{'done' if succeeded else 'failed (restored or marked)'}; workflow "
            f"{parent_id} {ended}.")
    return {"settled": settled, "message": text}


def message(rollout_id: str, record: Dict[str, Any]) -> str:
    text = (f"Rollout {rollout_id}: host {record['host']}'s {record['step']} execution "
            f"{record['execution']} outlived its action runner ({record['why']}). ")
    if record.get("recovery"):
        return text + (f"Its workflow {record['parent']} cannot go on by itself: recovering "
                       f"the host in {record['recovery']} (every step idempotent, no second "
                       "reset).")
    if record["action"] == "left":
        return text + "No workflow waits for it; nothing to do."
    return text + f"Completed it as {record['status']}, so its workflow goes on."
