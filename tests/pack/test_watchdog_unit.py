"""watchdog.py over a stand-in of the st2 API (a dict of executions): which running host
actions are stale, what is done about each (its execution completed as its step ended, or its
host recovered when StackStorm refuses that), once, and who may settle a recovery. The real
API (the runtime's, modelling st2's answers) is exercised by tests/e2e/test_watchdog_rollout.py
and tests/runtime/test_runtime_dead_runner.py."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from fleet_rollout import watchdog
from fleet_rollout.audit import Audit
from fleet_rollout.errors import ConfigError
from fleet_rollout.st2api import ApiRefused
from fleet_rollout.store import MemoryStore, RolloutState

NOW = 1_800_000_000.0


def _ts(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


PYTHON_OUTPUT = {"result", "stdout", "stderr", "exit_code"}


class FakeApi:
    def __init__(self) -> None:
        self.executions: Dict[str, Dict[str, Any]] = {}
        self.completed_liveactions: set = set()
        self.puts: List[Any] = []
        self.results: Dict[str, Any] = {}
        self.posts: List[Any] = []

    def add(self, ex_id: str, ref: str, status: str = "running", parent: str = "",
            started: float = NOW - 60, **params: Any) -> Dict[str, Any]:
        self.executions[ex_id] = {"id": ex_id, "action": {"ref": ref}, "status": status,
                                  "parent": parent or None, "parameters": params,
                                  "start_timestamp": _ts(started)}
        return self.executions[ex_id]

    def get(self, path: str) -> Any:
        query = dict(p.split("=") for p in path.split("?", 1)[1].split("&"))
        return [e for e in self.executions.values()
                if e["action"]["ref"] == query["action"] and e["status"] == query["status"]]

    def execution(self, ex_id: str) -> Dict[str, Any]:
        return self.executions[ex_id]

    def put(self, path: str, body: Any) -> Any:
        """As st2api's PUT with [system] validate_output_schema on: a succeeded result that
        is not its runner's output (python-script: result, stdout, stderr, exit_code and
        nothing else; orquesta: output, errors) is recorded failed."""
        ex_id = path.split("/")[1]
        self.puts.append((ex_id, body["status"]))
        self.results[ex_id] = body.get("result")
        if ex_id in self.completed_liveactions or self.executions[ex_id]["status"] not in (
                "running", "paused", "canceling"):
            raise ApiRefused("Execution is already in completed state.", 400)
        status = body["status"]
        result = body.get("result")
        python = self.executions[ex_id]["action"]["ref"] in (watchdog.HOST_STEP,
                                                              watchdog.WAVE_STEP)
        if status == "succeeded" and python and not (
                isinstance(result, dict) and set(result) <= PYTHON_OUTPUT
                and isinstance(result.get("stdout"), str)
                and isinstance(result.get("stderr"), str)
                and isinstance(result.get("exit_code"), int)):
            status = "failed"
        if status == "succeeded" and not python and not (  # an orquesta workflow's output
                isinstance(result, dict) and set(result) <= {"output", "errors"}):
            status = "failed"
        self.executions[ex_id]["status"] = status
        return self.executions[ex_id]

    def post(self, path: str, body: Any) -> Any:
        self.posts.append(body)
        return {"id": f"rec{len(self.posts)}"}


@pytest.fixture()
def dog(tmp_path):
    api, store = FakeApi(), MemoryStore()
    return watchdog.Watchdog(api, store, grace=60, clock=lambda: NOW), api


def _step_done(dog_: watchdog.Watchdog, host: str, step: str, ex_id: str, ok: bool,
               at: float) -> None:
    state = RolloutState(dog_.store, "r1")
    record = state.host(host) or {"steps": {}}
    record["steps"][step] = {"ok": ok, "at": at, "execution": ex_id,
                             "detail": {} if ok else {"error": "BMC said no"}}
    state.save_host(host, record)


def test_a_running_step_is_stale_only_past_the_grace_after_its_work_or_its_timeout(dog):
    dog_, api = dog
    ex = api.add("s1", watchdog.HOST_STEP, rollout_id="r1", host="h1", step="reboot",
                 timeout=900)
    assert dog_.judge(ex) is None  # still working, within its timeout
    _step_done(dog_, "h1", "reboot", "s1", True, NOW - 30)
    assert dog_.judge(ex) is None  # its work ended 30 s ago: st2 may still be reporting it
    _step_done(dog_, "h1", "reboot", "s1", True, NOW - 61)
    assert "work ended 61 s ago" in dog_.judge(ex)["why"]
    # a record of another execution (an earlier attempt) says nothing about this one
    _step_done(dog_, "h1", "reboot", "old", True, NOW - 500)
    assert dog_.judge(ex) is None
    late = api.add("s2", watchdog.HOST_STEP, rollout_id="r1", host="h2", step="wait",
                   timeout=900, started=NOW - 961)
    assert "past its timeout of 900 s" in dog_.judge(late)["why"]


def test_a_stale_step_st2_can_complete_is_completed_with_its_outcome_once(dog, tmp_path):
    dog_, api = dog
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1",
            step="verify")
    _step_done(dog_, "h1", "verify", "s1", False, NOW - 120)
    [done] = dog_.check(by="stanley", execution_id="wd1")
    assert api.puts == [("s1", "failed")] and done["action"] == "completed failed"
    assert "Completed it as failed" in done["message"]
    assert RolloutState(dog_.store, "r1").stale("s1")["status"] == "failed"
    api.executions["s1"]["status"] = "running"  # were it listed again: handled once
    assert dog_.check(execution_id="wd2") == [] and len(api.puts) == 1
    [entry] = Audit(dog_.store, "r1").entries()
    assert entry["action"] == "stale_execution" and entry["old"] == "s1"


def test_a_stale_step_whose_work_succeeded_is_completed_as_the_python_runners_output(dog):
    """st2 checks a succeeded result against the runner's output schema: the watchdog's is
    the python-script runner's, the step's own result (as host_step returns it) under
    `result`; what st2 then recorded is what the watchdog reports."""
    dog_, api = dog
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1",
            step="reboot")
    _step_done(dog_, "h1", "reboot", "s1", True, NOW - 120)
    [done] = dog_.check(by="stanley", execution_id="wd1")
    assert api.executions["s1"]["status"] == "succeeded" and done["status"] == "succeeded"
    assert done["action"] == "completed succeeded"
    output = api.results["s1"]
    assert set(output) == PYTHON_OUTPUT and output["exit_code"] == 0
    assert output["result"]["step"] == "reboot" and output["result"]["detail"] == {}
    assert "work ended 120 s ago" in output["result"]["watchdog"]


def test_the_watchdog_reports_what_st2_recorded_when_it_differs(dog, monkeypatch):
    dog_, api = dog
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1",
            step="verify")
    _step_done(dog_, "h1", "verify", "s1", True, NOW - 120)
    real_put = api.put

    def refusing_output(path: str, body: Any) -> Any:
        return real_put(path, dict(body, result={"result": {}, "extra": 1}))

    monkeypatch.setattr(api, "put", refusing_output)
    [done] = dog_.check(by="stanley", execution_id="wd1")
    assert api.executions["s1"]["status"] == "failed"
    assert done["status"] == "failed"
    assert done["action"] == "completed succeeded; StackStorm recorded it failed"
    stale = RolloutState(dog_.store, "r1").stale("s1")
    assert stale["status"] == "failed", stale


def test_a_step_that_ended_after_the_list_was_read_is_left_alone(dog, monkeypatch):
    """A loaded st2 records a step's end late: the watchdog's list shows it running, its
    execution has ended by the time it is handled. Nothing is completed, recovered or
    recorded; a 400 for one that ends between the read and the PUT recovers nothing."""
    dog_, api = dog
    api.add("hc1", "fleet_rollout.host_change", rollout_id="r1", host="h1", part="change")
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1", step="wait")
    _step_done(dog_, "h1", "wait", "s1", True, NOW - 120)
    listed = dict(api.executions["s1"])
    api.executions["s1"]["status"] = "succeeded"
    monkeypatch.setattr(api, "get", lambda path: [listed])
    assert dog_.check(by="stanley", execution_id="wd1") == []
    assert api.puts == [] and api.posts == []
    assert RolloutState(dog_.store, "r1").stale("s1") is None
    # ended between the read and the PUT: st2 refuses, and the host is not recovered
    api.executions["s1"]["status"] = "running"
    real_put = api.put

    def ended_first(path: str, body: Any) -> Any:
        api.executions["s1"]["status"] = "succeeded"
        return real_put(path, body)

    monkeypatch.setattr(api, "put", ended_first)
    [done] = dog_.check(by="stanley", execution_id="wd1")
    assert done["action"] == "left: StackStorm recorded it succeeded meanwhile"
    assert api.posts == []


def test_a_step_kept_delayed_long_is_timed_from_when_it_began_to_run(dog):
    """st2's start_timestamp is when the execution was requested: one that its host's policy
    kept delayed for longer than its timeout has run for far less, and is not stale."""
    dog_, api = dog
    ex = api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1",
                 step="wait", timeout=100, started=NOW - 900)
    ex["log"] = [{"status": "requested", "timestamp": _ts(NOW - 900)},
                 {"status": "delayed", "timestamp": _ts(NOW - 899)},
                 {"status": "scheduled", "timestamp": _ts(NOW - 30)},
                 {"status": "running", "timestamp": _ts(NOW - 29)}]
    assert watchdog.running_since(ex) == pytest.approx(NOW - 29, abs=0.01)
    assert dog_.check() == [] and api.puts == []
    ex["log"][-1]["timestamp"] = _ts(NOW - 200)  # running past its timeout and the grace
    [done] = dog_.check()
    assert api.puts == [("s1", "timeout")] and done["status"] == "timeout"


def test_a_step_past_its_timeout_is_timed_out_for_the_workflows_retry(dog):
    dog_, api = dog
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1", step="wait",
            timeout=100, started=NOW - 200)
    [done] = dog_.check()
    assert api.puts == [("s1", "timeout")] and done["status"] == "timeout"


def test_when_st2_refuses_the_host_is_recovered_and_only_that_recovery_settles(dog, tmp_path):
    dog_, api = dog
    api.add("hc1", "fleet_rollout.host_change", timeouts={"reboot": 900}, rollout_id="r1",
            host="h1", part="change")
    api.add("s1", watchdog.HOST_STEP, parent="hc1", rollout_id="r1", host="h1", step="reboot")
    api.completed_liveactions.add("s1")  # the runner wrote its LiveAction, then died
    _step_done(dog_, "h1", "reboot", "s1", True, NOW - 120)
    [done] = dog_.check(execution_id="wd1")
    assert done["recovery"] == "rec1" and "recovering the host in rec1" in done["message"]
    [body] = api.posts
    assert body["action"] == watchdog.RECOVER
    assert body["parameters"] == {"rollout_id": "r1", "host": "h1", "stale": "s1",
                                  "parent": "hc1", "rerun": "host_change",
                                  "timeouts": {"reboot": 900}, "part": "change",
                                  "hosts": None, "cause": "operator", "batch": -1}
    state = RolloutState(dog_.store, "r1")
    with pytest.raises(ConfigError, match="no recovery other"):
        watchdog.settle(api, state, "s1", "hc1", "other", True)
    assert api.executions["hc1"]["status"] == "running"
    out = watchdog.settle(api, state, "s1", "hc1", "rec1", True)
    assert out["settled"] == "succeeded" and api.executions["hc1"]["status"] == "succeeded"
    assert state.stale("s1")["settled"] == "succeeded"
    again = watchdog.settle(api, state, "s1", "hc1", "rec1", True)
    assert again["settled"] == "already completed"


def test_a_stale_execution_nothing_waits_for_is_left(dog):
    dog_, api = dog
    api.add("s1", watchdog.HOST_STEP, rollout_id="r1", host="h1", step="restore")  # run by hand
    api.completed_liveactions.add("s1")
    _step_done(dog_, "h1", "restore", "s1", True, NOW - 120)
    [done] = dog_.check()
    assert done["action"] == "left" and api.posts == []


def test_a_wave_step_is_stale_past_the_grace_after_its_recorded_end_or_its_timeout(dog):
    """A wave step names its hosts, not a host: its work has ended when its outcome is
    recorded under its execution id (one host's step outcome is not the end); then it is
    completed with that outcome (what the wave's workflow reads); without one, past its
    timeout and the grace, as timed out (the wave's retry runs it again)."""
    dog_, api = dog
    api.add("w1", watchdog.WAVE_STEP, parent="wc1", rollout_id="r1", hosts=["h1", "h2"],
            step="drain", timeout=1000, started=NOW - 900)
    _step_done(dog_, "h1", "drain", "w1", True, NOW - 800)
    assert dog_.check() == []
    outcome = {"step": "drain", "done": ["h1"], "failed": ["h2"], "skipped": [],
               "not_ready": [], "hosts": {}}
    RolloutState(dog_.store, "r1").end_wave("w1", outcome)  # now: before the dog's NOW
    [done] = dog_.check(execution_id="wd1")
    assert api.puts == [("w1", "succeeded")] and done["host"] == "h1, h2"
    assert api.results["w1"]["result"]["failed"] == ["h2"]
    api.add("w2", watchdog.WAVE_STEP, parent="wc1", rollout_id="r1", hosts=["h3"],
            step="undrain", timeout=100, started=NOW - 300)
    [timed] = dog_.check()
    assert api.puts[-1] == ("w2", "timeout") and timed["status"] == "timeout"


def test_a_stale_wave_step_st2_refuses_to_complete_reruns_its_wave(dog):
    dog_, api = dog
    api.add("wc1", "fleet_rollout.wave_change", rollout_id="r1", hosts=["h1", "h2"],
            timeouts={"drain": 700})
    api.add("w1", watchdog.WAVE_STEP, parent="wc1", rollout_id="r1", hosts=["h1", "h2"],
            step="undrain", timeout=100, started=NOW - 300)
    api.completed_liveactions.add("w1")
    [done] = dog_.check()
    assert done["recovery"] == "rec1" and "h1, h2" in done["message"]
    [body] = api.posts
    assert body["parameters"]["rerun"] == "wave_change"
    assert body["parameters"]["hosts"] == ["h1", "h2"] and body["parameters"]["host"] == "h1"
    assert body["parameters"]["timeouts"] == {"drain": 700}
