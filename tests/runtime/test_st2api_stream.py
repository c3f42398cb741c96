"""The st2 API's event stream (what `st2 execution tail` and chat bots read) and the chatops
pack's post_result (how an alias execution's result reaches a chat bot): real processes."""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Dict, List

import pytest
import requests

from tests.st2api_support import St2Api

pytestmark = pytest.mark.timeout(300)



class Listener:
    """An SSE client in a thread, collecting (event, data) pairs."""

    def __init__(self, api: St2Api, query: str = "") -> None:
        self.events: List[Any] = []
        token = api.token("chatops_bot")
        self.resp = requests.get(f"{api.base}/stream/v1/stream{query}", stream=True,
                                 headers={"X-Auth-Token": token}, timeout=(5, 120))
        assert self.resp.status_code == 200
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        event = None
        try:
            for raw in self.resp.iter_lines(chunk_size=1, decode_unicode=True):
                if raw.startswith("event: "):
                    event = raw[7:]
                elif raw.startswith("data: ") and event:
                    self.events.append((event, json.loads(raw[6:])))
                    event = None
        except requests.RequestException:
            pass

    def wait(self, name: str, check: Any = lambda d: True, timeout: float = 60
             ) -> Dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for event, data in list(self.events):
                if event == name and check(data):
                    return dict(data)
            time.sleep(0.1)
        raise AssertionError(f"no {name} event; got {[e for e, _ in self.events]}")

    def close(self) -> None:
        self.resp.close()


def test_stream_carries_execution_events_with_secrets_masked(st2_api: St2Api) -> None:
    listener = Listener(st2_api)
    try:
        run = st2_api.st2_json(["run", "rt_test.secret_echo", "password=hunter2-secret"])
        created = listener.wait("st2.execution__create", lambda d: d["id"] == run["id"])
        assert created["parameters"]["password"] == "********"
        listener.wait("st2.execution__update",
                      lambda d: d["id"] == run["id"] and d["status"] == "succeeded")
        assert all("hunter2-secret" not in json.dumps(d) for _, d in listener.events)
    finally:
        listener.close()


def test_stream_filters_events_and_ends_with_the_execution(st2_api: St2Api) -> None:
    # steps of 5 s: the stream must be open before the execution ends (on a loaded machine
    # opening it can take seconds, and a stream opened after the end event waits for one that
    # never comes, as st2's does)
    wf_id = st2_api.run_async(["st2api_test.slow_steps", "seconds=5"])
    listener = Listener(st2_api, f"?events=st2.execution__update&end_event=st2.execution__update"
                             f"&end_execution_id={wf_id}")
    listener.thread.join(90)
    assert not listener.thread.is_alive(), "the stream did not end with the execution"
    names = {e for e, _ in listener.events}
    assert names == {"st2.execution__update"}
    last = listener.events[-1][1]
    assert last["id"] == wf_id and last["status"] == "succeeded"


def test_post_result_announces_the_alias_result_on_its_route(st2_api: St2Api) -> None:
    listener = Listener(st2_api, "?events=st2.announcement__*")
    try:
        out = st2_api.st2(["action-alias", "execute", "greet world"]).stdout
        ex_id = out.split("st2 execution get")[1].split()[0]
        st2_api.wait_status(ex_id, ("succeeded",))
        st2_api.st2(["run", "chatops.post_result", f"execution_id={ex_id}",
                 "channel=#fleet-rollout", "route=errbot", "user=sre-alice"])
        data = listener.wait("st2.announcement__errbot")
        assert data["trace_context"] is None
        payload = data["payload"]
        assert payload["message"] == "hello world"  # the alias's result format
        assert payload["channel"] == "#fleet-rollout" and payload["user"] == "sre-alice"
        assert not [e for e, _ in listener.events if e == "st2.announcement__chatops"]
    finally:
        listener.close()


def test_an_execution_committed_late_still_reaches_the_stream(tmp_path: Any) -> None:
    """An engine under load can commit an execution's end well after the time it records as
    its end: the hub must still emit the update (the hub is polled here by hand, on a real
    database, so the late commit is exact)."""
    from types import SimpleNamespace

    from fleet_runtime.database import Store
    from fleet_runtime.packs import Registry
    from fleet_runtime.st2api.stream import StreamHub

    store = Store(str(tmp_path / "runtime.db"))
    rt = SimpleNamespace(store=store, home=SimpleNamespace(path=str(tmp_path)),
                         registry=Registry([]), masker=None)
    now = time.time()
    with store.transaction():
        store.insert_execution({"id": "ex1", "action": "core.noop", "runner": "local-shell-cmd",
                                "status": "running", "root_id": "ex1", "parameters": {},
                                "context": {}, "created_ts": now - 60, "start_ts": now - 60,
                                "log": []})
    hub = StreamHub(SimpleNamespace(rt=rt))
    client = hub.subscribe()
    hub.poll()
    time.sleep(0.1)
    hub.poll()
    with store.transaction():  # ended 30 s before this commit
        store.update_execution("ex1", status="succeeded", end_ts=now - 30, result={})
    hub.poll()
    events = []
    while not client.empty():
        events.append(client.get_nowait())
    assert ("st2.execution__update", "succeeded") in [(n, b.get("status")) for n, b in events]
    store.insert_execution({"id": "ex2", "action": "core.noop", "runner": "local-shell-cmd",
                            "status": "succeeded", "root_id": "ex2", "parameters": {},
                            "context": {}, "created_ts": now - 60, "end_ts": now - 60,
                            "log": []})
    hub.poll()
    names = []
    while not client.empty():
        names.append(client.get_nowait())
    assert [(n, b["id"]) for n, b in names if n.startswith("st2.execution")] == [
        ("st2.execution__create", "ex2"), ("st2.execution__update", "ex2")]
