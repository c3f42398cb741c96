"""The Orquesta behaviours the pack relies on, on the embedded runtime (docs/runtime.md).

The engine runs in-process; python-script actions run as subprocesses like st2's python runner.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from runtime_support import children, engine, fixture_home, journal, run, wait

from fleet_runtime import render
from fleet_runtime.engine import Runtime
from fleet_runtime.runtime_errors import ExecutionStateError, InquiryError


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_home(tmp_path / "home", monkeypatch)


@pytest.fixture()
def rt(home: Path) -> Iterator[Runtime]:
    runtime = engine(home)
    yield runtime
    runtime.close()


def inquiry_of(rt: Runtime, wf_id: str) -> Dict[str, Any]:
    pending = [c for c in children(rt, wf_id) if c["runner"] == "inquirer"]
    assert pending, "no inquiry"
    return pending[-1]


def transcript(home: Path) -> List[Dict[str, Any]]:
    path = home / "chat.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# ------------------------------------------------------------------ core.ask
def test_ask_pauses_posts_and_respond_resumes(rt: Runtime, home: Path) -> None:
    ex = run(rt, "rt_test.ask_flow")
    assert ex["status"] == "paused"
    inquiry = inquiry_of(rt, ex["id"])
    assert inquiry["status"] == "pending"
    assert inquiry["result"]["route"] == "rt-approvals" and inquiry["result"]["ttl"] == 60
    # core.st2.generic.inquiry fired the pack's rule: the inquiry was posted to chat.
    posted = [m for m in transcript(home) if m["channel"] == "rt-approvals"]
    assert posted and inquiry["id"] in posted[-1]["message"]
    with pytest.raises(InquiryError, match="did not pass schema validation"):
        rt.respond(inquiry["id"], {"approved": "yes"})
    rt.respond(inquiry["id"], {"approved": True, "comment": "go"})
    final = wait(rt, ex["id"])
    assert final["status"] == "succeeded"
    assert final["result"]["output"] == {"decision": "approved"}
    answered = rt.store.get_execution(inquiry["id"])
    assert answered["status"] == "succeeded"
    assert answered["result"]["response"] == {"approved": True, "comment": "go"}
    with pytest.raises(InquiryError, match="already been responded"):
        rt.respond(inquiry["id"], {"approved": True})


def test_ask_rejection_takes_the_other_branch(rt: Runtime) -> None:
    ex = run(rt, "rt_test.ask_flow")
    rt.respond(inquiry_of(rt, ex["id"])["id"], {"approved": False})
    final = wait(rt, ex["id"])
    assert final["status"] == "failed" and final["result"]["output"] == {"decision": "rejected"}


def test_ask_users_and_roles_are_enforced(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = engine(home)
    try:
        ex = run(rt, "rt_test.ask_flow", {"users": ["alice"]})
        inquiry = inquiry_of(rt, ex["id"])
        with pytest.raises(InquiryError, match='User "operator" is not authorized'):
            rt.respond(inquiry["id"], {"approved": True})
        rt.respond(inquiry["id"], {"approved": True}, requester="alice")
        assert wait(rt, ex["id"])["status"] == "succeeded"
        ex = run(rt, "rt_test.ask_flow", {"roles": ["approvers"]})
        inquiry = inquiry_of(rt, ex["id"])
        with pytest.raises(InquiryError, match="roles allowed: approvers"):
            rt.respond(inquiry["id"], {"approved": True})
    finally:
        rt.close()
    monkeypatch.setenv("FLEET_ROLLOUT_ROLES", "viewers,approvers")
    rt = engine(home)
    try:
        rt.respond(inquiry["id"], {"approved": True})
        assert wait(rt, ex["id"])["status"] == "succeeded"
    finally:
        rt.close()


def test_ask_expiry_fails_the_task(rt: Runtime) -> None:
    ex = run(rt, "rt_test.ask_flow", {"ttl": 1})  # 1 minute x time factor 0.05 = 3 s
    inquiry = inquiry_of(rt, ex["id"])
    final = wait(rt, ex["id"], timeout=20, until_completed=True)
    assert rt.store.get_execution(inquiry["id"])["status"] == "timeout"
    # failed() saw the timed-out ask: the "expired" branch ran, then fail.
    assert final["result"]["output"] == {"decision": "expired"}
    assert final["status"] == "failed"
    with pytest.raises(InquiryError, match="timed out"):
        rt.respond(inquiry["id"], {"approved": True})


def test_ask_expiry_survives_an_engine_restart(home: Path) -> None:
    """The engine that asked stops while the question waits (a CLI run returns at the pause);
    the next engine re-arms the ttl from the stored question and times it out when due, with
    the question (schema, users, ttl) kept in its result. Before, a restarted engine had no
    ttl for it, and the workflow stayed paused for good."""
    first = engine(home)
    ex = run(first, "rt_test.ask_flow", {"ttl": 1})  # 1 minute x time factor 0.05 = 3 s
    assert ex["status"] == "paused"
    inquiry = inquiry_of(first, ex["id"])
    first.close()
    time.sleep(3.5)  # past due while no engine runs
    second = engine(home)
    try:
        final = wait(second, ex["id"], timeout=20, until_completed=True)
        assert final["result"]["output"] == {"decision": "expired"}
        record = second.store.get_execution(inquiry["id"])
        assert record["status"] == "timeout"
        assert record["result"]["ttl"] == 1 and record["result"]["schema"]["properties"]
    finally:
        second.close()


def test_ask_expiry_without_a_handler_fails_the_workflow(rt: Runtime) -> None:
    ex = run(rt, "rt_test.ask_bare", {"ttl": 1})
    assert ex["status"] == "paused"
    final = wait(rt, ex["id"], timeout=20, until_completed=True)
    assert final["status"] == "failed"


# ------------------------------------------------------------------ with-items
def _intervals(records: List[Dict[str, Any]]) -> List[tuple]:
    return sorted((r["start"], r["end"]) for r in records)


def _max_overlap(intervals: List[tuple]) -> int:
    points = [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals]
    best = cur = 0
    for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
        cur += delta
        best = max(best, cur)
    return best


def test_with_items_runs_items_in_parallel_up_to_concurrency(rt: Runtime, home: Path) -> None:
    values = [f"v{i}" for i in range(6)]
    t0 = time.time()
    ex = run(rt, "rt_test.items", {"values": values, "concurrency": 3, "sleep": 1.5,
                                   "tag": "par"})
    elapsed = time.time() - t0
    assert ex["status"] == "succeeded"
    assert ex["result"]["output"]["results"] == values
    runs = [r for r in journal(home, "items.jsonl") if r["tag"] == "par"]
    assert len(runs) == 6
    assert _max_overlap(_intervals(runs)) == 3
    assert elapsed < 6 * 1.5  # not sequential


def test_with_items_failure_keeps_starting_items_at_concurrency_2(rt: Runtime,
                                                                   home: Path) -> None:
    values = ["a", "b", "c", "d", "e", "f"]
    ex = run(rt, "rt_test.items", {"values": values, "fail_on": ["b"], "concurrency": 2,
                                   "sleep": 0.05, "tag": "c2"})
    assert ex["status"] == "failed"
    ran = sorted(r["value"] for r in journal(home, "items.jsonl") if r["tag"] == "c2")
    assert ran == values  # every item started although b failed early
    items = [c for c in children(rt, ex["id"])]
    assert sorted(c["status"] for c in items) == ["failed"] + ["succeeded"] * 5
    task = rt.store.task_executions("action_ex_id=?", (ex["id"],))[-1]
    assert task["status"] == "failed" and len(task["result"]["items"]) == 6


def test_with_items_failure_stops_at_concurrency_1(rt: Runtime, home: Path) -> None:
    ex = run(rt, "rt_test.items", {"values": ["a", "b", "c", "d"], "fail_on": ["b"],
                                   "concurrency": 1, "tag": "c1"})
    assert ex["status"] == "failed"
    ran = [r["value"] for r in journal(home, "items.jsonl") if r["tag"] == "c1"]
    assert ran == ["a", "b"]  # the task failed when b failed and nothing else was active


def test_retry_of_with_items_reruns_every_item(rt: Runtime, home: Path) -> None:
    ex = run(rt, "rt_test.items_retry", {"values": ["a", "b", "c"], "key": "once",
                                         "tag": "rr"})
    assert ex["status"] == "succeeded" and ex["result"]["output"] == {"count": 3}
    counts: Dict[str, int] = {}
    for r in journal(home, "items.jsonl"):
        if r["tag"] == "rr":
            counts[r["value"]] = counts.get(r["value"], 0) + 1
    assert counts == {"a": 2, "b": 2, "c": 2}
    attempts = rt.store.task_executions("action_ex_id=? AND task_id='each'", (ex["id"],))
    assert [t["status"] for t in attempts] == ["failed", "succeeded"]


def test_empty_with_items_succeeds(rt: Runtime) -> None:
    ex = run(rt, "rt_test.items", {"values": []})
    assert ex["status"] == "succeeded" and ex["result"]["output"]["results"] == []


# ------------------------------------------------------------------ nesting, data, st2kv
def test_nested_workflow_result_shape(rt: Runtime) -> None:
    ex = run(rt, "rt_test.parent")
    assert ex["status"] == "succeeded"
    assert ex["result"] == {"output": {"child_result": {"output": {"text": "hello nested"}},
                                       "child_text": "hello nested"}}
    child = children(rt, ex["id"])[0]
    assert child["action"] == "rt_test.hello" and child["runner"] == "orquesta"
    assert child["context"]["parent"]["execution_id"] == ex["id"]
    greet = children(rt, child["id"])[0]
    # python-script: result().result is what run() returned
    assert greet["result"]["result"] == {"text": "hello nested", "token_length": 12}


def test_st2kv_and_st2_context(rt: Runtime) -> None:
    rt.datastore.set("rt_sys", "system-value")
    rt.datastore.set("rt_user_key", "user-value", scope="user", user="operator")
    rt.datastore.set("rt_secret", "classified", secret=True)
    ex = run(rt, "rt_test.kv_flow", context={"api_user": "alice", "source_channel": "ops"})
    assert ex["status"] == "succeeded", ex["result"]
    out = ex["result"]["output"]
    assert out["sys_value"] == "system-value" and out["user_value"] == "user-value"
    assert out["missing"] == "fallback" and out["jinja_value"] == "system-value"
    assert out["secret_plain_length"] == len("classified") and out["secret_is_cipher"]
    st2 = out["st2"]
    assert st2["action_execution_id"] == ex["id"] and st2["user"] == "operator"
    assert st2["api_user"] == "alice" and st2["source_channel"] == "ops"
    assert st2["workflow_execution_id"] and st2["action"] == "rt_test.kv_flow"


def test_st2kv_missing_key_fails_with_clear_error(rt: Runtime) -> None:
    ex = run(rt, "rt_test.kv_missing")
    assert ex["status"] == "failed"
    assert 'The key "rt_does_not_exist" does not exist' in ex["result"]["errors"][0]["message"]


# ------------------------------------------------------------------ retry, delay, join, fail
def test_task_retry_with_delay(rt: Runtime) -> None:
    t0 = time.time()
    ex = run(rt, "rt_test.retry_flow", {"key": "flaky-1", "failures": 2})
    assert ex["status"] == "succeeded" and ex["result"]["output"] == {"attempts": 3}
    assert time.time() - t0 >= 2 * 1 * 0.05
    statuses = [c["status"] for c in children(rt, ex["id"])]
    assert statuses == ["failed", "failed", "succeeded"]
    delayed = children(rt, ex["id"])[1]
    assert any(e["status"] == "delayed" for e in delayed["log"])


def test_join_delay_and_fail(rt: Runtime) -> None:
    ok = run(rt, "rt_test.chain")
    assert ok["status"] == "succeeded" and ok["result"]["output"] == {"left_out": "left"}
    tasks = {c["task_id"]: c for c in children(rt, ok["id"])}
    assert set(tasks) == {"start", "left", "right", "joined", "last"}
    assert tasks["joined"]["start_ts"] >= tasks["right"]["end_ts"]
    assert any(e["status"] == "delayed" for e in tasks["right"]["log"])
    bad = run(rt, "rt_test.chain", {"fail": True})
    assert bad["status"] == "failed"
    assert "last" not in {c["task_id"] for c in children(rt, bad["id"])}


# ------------------------------------------------------------------ pause, resume, cancel
def test_pause_and_resume_a_running_workflow(rt: Runtime, home: Path) -> None:
    ex_id = rt.request("rt_test.items", {"values": ["p1", "p2", "p3", "p4"], "concurrency": 1,
                                         "sleep": 0.3, "tag": "pause"})
    rt.run(until=lambda: len(children(rt, ex_id)) >= 1, timeout=10, eager=True)
    rt.pause(ex_id)
    paused = wait(rt, ex_id)
    assert paused["status"] == "paused"
    assert [e["status"] for e in paused["log"]][-2:] == ["pausing", "paused"]
    ran_before = len([r for r in journal(home, "items.jsonl") if r["tag"] == "pause"])
    assert 1 <= ran_before < 4
    rt.resume(ex_id)
    final = wait(rt, ex_id)
    assert final["status"] == "succeeded"
    assert len([r for r in journal(home, "items.jsonl") if r["tag"] == "pause"]) == 4
    with pytest.raises(ExecutionStateError, match="already succeeded"):
        rt.pause(ex_id)


def test_cancel_a_running_workflow(rt: Runtime, home: Path) -> None:
    ex_id = rt.request("rt_test.items", {"values": ["c1", "c2", "c3", "c4"], "concurrency": 1,
                                         "sleep": 0.3, "tag": "cancel"})
    rt.run(until=lambda: len(children(rt, ex_id)) >= 1, timeout=10, eager=True)
    rt.cancel(ex_id)
    final = wait(rt, ex_id, until_completed=True)
    assert final["status"] == "canceled"
    assert len([r for r in journal(home, "items.jsonl") if r["tag"] == "cancel"]) < 4


def test_cancel_a_running_action_kills_it(rt: Runtime) -> None:
    ex_id = rt.request("core.local", {"cmd": "sleep 30", "timeout": 60})
    rt.run(until=lambda: rt.store.get_execution(ex_id)["status"] == "running", timeout=10,
           eager=True)
    t0 = time.time()
    rt.cancel(ex_id)
    final = wait(rt, ex_id, until_completed=True)
    assert final["status"] == "canceled" and time.time() - t0 < 10


# ------------------------------------------------------------------ runners
def test_python_action_config_logger_and_datastore(rt: Runtime) -> None:
    ex = run(rt, "rt_test.greet", {"name": "bob", "times": 2, "shout": True})
    assert ex["status"] == "succeeded"
    assert ex["result"]["result"] == {"text": "HELLO BOB HELLO BOB", "token_length": 12}
    assert "greeting bob" in ex["result"]["stderr"] and ex["result"]["exit_code"] == 0
    ex = run(rt, "rt_test.kv", {"key": "k", "value": "v1"})
    # like st2, list_values() returns the full key names (pack.Class:key for local keys)
    assert ex["result"]["result"] == {"before": None, "after": "v1",
                                      "listed": ["rt_test.KeyValue:k"]}
    assert rt.datastore.get("rt_test.KeyValue:k") == "v1"  # local = pack.Class:key
    ex = run(rt, "rt_test.kv", {"key": "g", "value": "s", "local": False, "encrypt": True})
    assert ex["result"]["result"]["after"] == "s"
    assert rt.datastore.get("g") != "s" and rt.datastore.get("g", decrypt=True) == "s"


def test_python_action_failures(rt: Runtime) -> None:
    raised = run(rt, "rt_test.fail", {"message": "kaput"})
    assert raised["status"] == "failed" and raised["result"]["exit_code"] == 1
    assert "RuntimeError: kaput" in raised["result"]["stderr"]
    status = run(rt, "rt_test.fail", {"mode": "status", "message": "nope"})
    assert status["status"] == "failed" and status["result"]["result"] == {"message": "nope"}


def test_local_runners_args_timeout_and_exit_codes(rt: Runtime) -> None:
    ex = run(rt, "rt_test.args", {"first": "one two", "second": 2, "flag": True,
                                  "label": "x y"})
    assert ex["status"] == "succeeded"
    assert ex["result"]["stdout"].splitlines() == [
        "arg:--flag", "arg:--label=x y", "arg:one two", "arg:2"]
    slow = run(rt, "core.local", {"cmd": "sleep 5", "timeout": 1})
    assert slow["status"] == "timeout"
    assert "failed to complete in 1 seconds" in slow["result"]["error"]
    bad = run(rt, "core.local", {"cmd": "echo oops >&2; exit 3"})
    assert bad["status"] == "failed" and bad["result"]["return_code"] == 3
    assert bad["result"]["stderr"] == "oops"


def test_secrets_masked_in_views_and_triggers(rt: Runtime) -> None:
    ex = run(rt, "rt_test.secret_echo", {"password": "hunter2"})
    assert ex["result"]["result"] == {"user": "admin", "length": 7}
    view = json.dumps(render.public(rt.registry, ex))
    text = render.execution_text(rt.registry, rt.store, ex)
    assert "hunter2" not in view and "hunter2" not in text and "********" in text


# ------------------------------------------------------------------ policies, notify
def test_concurrency_policy_delays_executions(rt: Runtime, home: Path) -> None:
    ids = [rt.request("rt_test.limited", {"value": f"l{i}", "tag": "lim"}) for i in range(3)]
    for ex_id in ids:
        wait(rt, ex_id, until_completed=True)
    runs = [r for r in journal(home, "items.jsonl") if r["tag"] == "lim"]
    assert len(runs) == 3 and _max_overlap(_intervals(runs)) == 1
    logs = [rt.store.get_execution(i)["log"] for i in ids]
    assert sum(1 for log in logs if any(e["status"] == "delayed" for e in log)) >= 1


def test_retry_policy_reruns_a_failed_root_execution(rt: Runtime) -> None:
    first = run(rt, "rt_test.flaky", {"key": "policy", "failures": 1})
    assert first["status"] == "failed"
    rt.run(until=lambda: len(rt.store.find_executions("action='rt_test.flaky'")) == 2 and all(
        r["status"] == "succeeded" for r in rt.store.find_executions(
            "action='rt_test.flaky' AND id<>?", (first["id"],))), timeout=20)
    retried = rt.store.find_executions("action='rt_test.flaky' AND id<>?", (first["id"],))[0]
    assert retried["status"] == "succeeded"
    assert retried["context"]["policies"]["retry"]["retried_liveaction_id"] == first["id"]


def test_notify_posts_through_the_rule(rt: Runtime, home: Path) -> None:
    ex = run(rt, "rt_test.notify_me", {"name": "carol"})
    assert ex["status"] == "succeeded"
    rt.run(until=lambda: any(m["channel"] == "notify" for m in transcript(home)), timeout=10)
    messages = [m["message"] for m in transcript(home) if m["channel"] == "notify"]
    assert messages == ["greet for carol finished (succeeded)"]


def test_st2common_shim_and_pack_lib_on_path(rt: Runtime) -> None:
    ex = run(rt, "rt_test.env_info")
    info = ex["result"]["result"]
    assert ex["status"] == "succeeded", ex["result"]
    try:
        import st2common  # noqa: F401  (the real package, when installed, wins)

        real = True
    except ImportError:
        real = False
    if not real:
        assert "fleet_runtime/st2shim/st2common" in info["st2common_file"]
        assert info["st2common_version"].endswith("fleet-runtime-shim")
    assert info["rt_lib"].endswith("runtime_pack/actions/lib/rt_lib")
    assert info["execution_id"] == ex["id"] and info["logger"] == "Logger"


def test_post_message_to_transcript_and_loopback_webhook(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import threading

    received: List[Dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("FLEET_ROLLOUT_CHAT_WEBHOOK",
                           f"http://127.0.0.1:{server.server_port}/hook")
        rt = engine(home)
        try:
            ex = run(rt, "chatops.post_message", {"channel": "ops", "message": "batch 1 done",
                                                  "whisper": True, "user": "alice"})
        finally:
            rt.close()
    finally:
        server.shutdown()
    assert ex["status"] == "succeeded" and ex["result"]["webhook_status"] == 204
    assert received and received[0]["message"] == "batch 1 done"
    assert received[0]["channel"] == "ops" and received[0]["whisper"] is True
    assert transcript(home)[-1]["message"] == "batch 1 done"
    monkeypatch.setenv("FLEET_ROLLOUT_CHAT_WEBHOOK", "http://10.1.2.3/hook")
    rt = engine(home)
    try:
        ex = run(rt, "chatops.post_message", {"channel": "ops", "message": "nope"})
    finally:
        rt.close()
    assert ex["status"] == "failed" and "only loopback addresses" in ex["result"]["error"]


def test_a_second_answer_before_the_first_is_written_is_refused(rt: Runtime) -> None:
    """Two answers close together: the engine writes an accepted answer with its next batch,
    and until then the inquiry still reads pending. The second answer must be refused, not
    told "accepted" and dropped (tests/runtime/test_runtime_approval_race.py races many)."""
    ex = run(rt, "rt_test.ask_flow")
    inquiry = inquiry_of(rt, ex["id"])
    rt.respond(inquiry["id"], {"approved": True, "comment": "first"})
    assert rt.store.get_execution(inquiry["id"])["status"] == "pending"  # not written yet
    with pytest.raises(InquiryError, match="already been responded to"):
        rt.respond(inquiry["id"], {"approved": False, "comment": "second"})
    final = wait(rt, ex["id"])
    assert final["status"] == "succeeded" and final["result"]["output"] == {
        "decision": "approved"}
    answered = rt.store.get_execution(inquiry["id"])
    assert answered["result"]["response"] == {"approved": True, "comment": "first"}
    with pytest.raises(InquiryError, match="already been responded to"):
        rt.respond(inquiry["id"], {"approved": True})


def test_inquiry_in_a_sub_workflow_pauses_and_resumes_the_parents(rt: Runtime) -> None:
    root = run(rt, "rt_test.ask_parent")
    assert root["status"] == "paused"
    child = next(c for c in children(rt, root["id"]) if c["task_id"] == "approval")
    assert child["status"] == "paused"
    side = next(c for c in children(rt, root["id"]) if c["task_id"] == "side")
    assert side["status"] == "succeeded"  # the other branch kept running
    inquiry = inquiry_of(rt, child["id"])
    rt.respond(inquiry["id"], {"approved": True})
    final = wait(rt, root["id"])
    assert final["status"] == "succeeded"
    assert final["result"]["output"] == {"decision": "approved"}
    assert rt.store.get_execution(child["id"])["status"] == "succeeded"


def test_cancel_cascades_into_sub_workflows_and_inquiries(rt: Runtime) -> None:
    root = run(rt, "rt_test.ask_parent")
    child = next(c for c in children(rt, root["id"]) if c["task_id"] == "approval")
    inquiry = inquiry_of(rt, child["id"])
    rt.cancel(root["id"])
    final = wait(rt, root["id"], until_completed=True)
    assert final["status"] == "canceled"
    assert rt.store.get_execution(child["id"])["status"] == "canceled"
    assert rt.store.get_execution(inquiry["id"])["status"] == "canceled"
    with pytest.raises(InquiryError, match="already been responded"):
        rt.respond(inquiry["id"], {"approved": True})


def test_actions_answer_inquiries_through_the_local_st2_api(rt: Runtime) -> None:
    ex = run(rt, "rt_test.ask_flow")
    inquiry = inquiry_of(rt, ex["id"])
    answer = run(rt, "rt_test.answer", {"route": "rt-approvals"})
    assert answer["status"] == "succeeded", answer["result"]
    result = answer["result"]["result"]
    assert result["status"] == 200 and result["unauthorized"] == 401
    assert result["body"] == {"id": inquiry["id"], "response": {"approved": True}}
    final = wait(rt, ex["id"])
    assert final["status"] == "succeeded" and final["result"]["output"]["decision"] == "approved"
    again = run(rt, "rt_test.answer", {"route": "rt-approvals"})
    assert again["status"] == "failed"  # nothing pending any more
