"""Action runners as processes of their own (`runners: 2`): like st2actionrunner on two
machines that share the database and the coordination backend but no file system
(docs/runtime.md, "Action runners").

Each test builds its own pack (`rn`) and runtime home under tmp_path and runs the engine in
this process; what the runners start is stopped by PID (the engine's close, a runner kill).
"""
from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import requests
from process_support import gone, wait_for
from runtime_support import api_call, cli, make_home

from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.statuses import COMPLETED, DELAYED, FAILED, RUNNING, SUCCEEDED

PACK_YAML = """\
---
ref: rn
name: rn
description: Action runner test pack.
version: 0.1.0
author: tests
email: tests@example.com
"""

# Records where it runs in its state_dir (<name>.json, before its work), then waits for its
# gate file (or `hold` seconds), optionally with a child process of its own.
WHERE = '''\
import json
import os
import subprocess
import time

from st2common.runners.base_action import Action


def ancestors():
    chain, pid = [], os.getppid()
    while pid > 1:
        chain.append(pid)
        with open(f"/proc/{pid}/stat") as handle:
            pid = int(handle.read().rsplit(")", 1)[1].split()[1])
    return chain


class Where(Action):
    def run(self, name, key, hold, gate, child):
        state_dir = self.config["state_dir"]
        seen = {"name": name, "pid": os.getpid(), "ancestors": ancestors(),
                "state_dir": state_dir, "start": time.time(), "child": None}
        if child:
            seen["child"] = subprocess.Popen(["sleep", "300"]).pid
        os.makedirs(state_dir, exist_ok=True)
        path = os.path.join(state_dir, name + ".json")
        with open(path + ".tmp", "w") as handle:
            json.dump(seen, handle)
        os.rename(path + ".tmp", path)
        deadline = time.time() + 120
        if gate:
            while not os.path.exists(gate) and time.time() < deadline:
                time.sleep(0.05)
        else:
            time.sleep(hold)
        seen["end"] = time.time()
        return seen
'''

WHERE_META = """\
---
name: where
runner_type: python-script
entry_point: where.py
parameters:
  name: {type: string, required: true}
  key: {type: string, default: "{{ name }}"}
  hold: {type: number, default: 0}
  gate: {type: string, default: ""}
  child: {type: boolean, default: false}
"""

POLICY = """\
---
name: one_per_key
pack: rn
resource_ref: rn.where
policy_type: action.concurrency.attr
parameters:
  threshold: 1
  action: delay
  attributes: [key]
"""


def make_pack(root: Path) -> Path:
    pack = root / "rn"
    (pack / "actions").mkdir(parents=True)
    (pack / "policies").mkdir()
    (pack / "pack.yaml").write_text(PACK_YAML)
    (pack / "config.schema.yaml").write_text(
        "state_dir: {type: string, default: /nonexistent/rn-state}\n")
    (pack / "actions" / "where.py").write_text(textwrap.dedent(WHERE))
    (pack / "actions" / "where.yaml").write_text(WHERE_META)
    (pack / "policies" / "one_per_key.yaml").write_text(POLICY)
    return pack


def new_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> Path:
    monkeypatch.setenv("FLEET_ROLLOUT_TIME_FACTOR", "0.05")
    for name in ("FLEET_ROLLOUT_USER", "FLEET_ROLLOUT_ROLES", "FLEET_ROLLOUT_PYTHON_WORKERS",
                 "FLEET_ROLLOUT_RUNNERS", "FLEET_ROLLOUT_DEAD_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    home = make_home(tmp_path / "home", settings=dict(settings, user="operator"))
    (home / "configs" / "rn.yaml").write_text(f"state_dir: {home / 'shared-state'}\n")
    return home


def start(home: Path, pack: Path) -> Runtime:
    rt = Runtime(RuntimeHome(str(home)), [str(pack)], workers=8)
    assert rt.try_become_engine()
    return rt


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    return make_pack(tmp_path / "packs")


@pytest.fixture(params=["warm", "cold"])
def two(request: pytest.FixtureRequest, tmp_path: Path, pack: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """An engine with two action runners, warm or cold python workers."""
    home = new_home(tmp_path, monkeypatch, runners=2, python_workers=request.param)
    rt = start(home, pack)
    runner_pids = [r["pid"] for r in rt.runner_list()]
    try:
        yield rt
    finally:
        rt.close()
        for pid in runner_pids:  # the engine stopped its runners, and with them their children
            assert wait_for(lambda pid=pid: gone(pid), 15), f"runner {pid} still runs"


# ------------------------------------------------------------------ helpers
def state_file(home: Path, runner: int, name: str) -> Path:
    return home / "runners" / str(runner) / "state_dir" / f"{name}.json"


def marker(home: Path, name: str) -> Dict[str, Any]:
    for runner in (1, 2):
        path = state_file(home, runner, name)
        if path.exists():
            return json.loads(path.read_text())
    raise AssertionError(f"{name} left no marker")


def run_until_started(rt: Runtime, *names: str) -> None:
    def started() -> bool:
        return all(any(state_file(rt.home.path, k, n).exists() for k in (1, 2)) for n in names)

    rt.run(until=started, eager=True, forever=True, timeout=90)
    assert started(), f"not started: {names}"


def record(rt: Runtime, ex_id: str) -> Dict[str, Any]:
    found = rt.store.get_execution(ex_id)
    assert found is not None
    return found


def runner_of(rt: Runtime, ex_id: str) -> str:
    return str((record(rt, ex_id)["runner_info"] or {}).get("hostname"))


def run_until_status(rt: Runtime, ex_id: str, *statuses: str, timeout: float = 90) -> None:
    rt.run(until=lambda: record(rt, ex_id)["status"] in statuses, eager=True, forever=True,
           timeout=timeout)
    assert record(rt, ex_id)["status"] in statuses, record(rt, ex_id)


def files_under(path: Path) -> List[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def runner_index(hostname: str) -> int:
    return int(hostname.rsplit("-", 1)[1])


# ------------------------------------------------------------------ the tests
def test_two_actions_started_together_run_on_two_runners_with_their_own_state(
        two: Runtime, tmp_path: Path) -> None:
    rt, home = two, two.home.path
    runners = {r["index"]: r for r in rt.runner_list()}
    assert sorted(runners) == [1, 2] and all(r["alive"] for r in runners.values())
    assert runners[1]["pid"] != runners[2]["pid"]
    gate = tmp_path / "gate"
    first = rt.request("rn.where", {"name": "a", "gate": str(gate)})
    second = rt.request("rn.where", {"name": "b", "gate": str(gate)})
    run_until_started(rt, "a", "b")
    info = {ex: record(rt, ex)["runner_info"] for ex in (first, second)}
    assert {i["hostname"] for i in info.values()} == {"runner-1", "runner-2"}
    for ex, name in ((first, "a"), (second, "b")):
        k = runner_index(info[ex]["hostname"])
        assert info[ex]["pid"] == runners[k]["pid"]
        seen = marker(home, name)
        # the action is the runner's child (cold) or its zygote's child (warm)
        assert seen["ancestors"].index(runners[k]["pid"]) == (
            0 if rt.home.python_workers == "cold" else 1)
        assert seen["state_dir"] == str(home / "runners" / str(k) / "state_dir")
    listed = {r["hostname"]: r for r in rt.runner_list()}
    assert listed["runner-1"]["running"] == listed["runner-2"]["running"] == 1
    gate.write_text("")
    for ex in (first, second):
        run_until_status(rt, ex, *COMPLETED)
        assert record(rt, ex)["status"] == SUCCEEDED
    # no file of one runner in the other's directory, none in the configured state_dir
    k_a = runner_index(info[first]["hostname"])
    k_b = 3 - k_a
    assert files_under(home / "runners" / str(k_a) / "state_dir") == ["a.json"]
    assert files_under(home / "runners" / str(k_b) / "state_dir") == ["b.json"]
    assert not (home / "shared-state").exists()
    # the views: CLI text and JSON, st2's liveaction.runner_info
    shown = cli(home, "execution", "get", first, "--json", packs=[str(rt.registry.packs[
        "rn"].path)], check=True)
    assert json.loads(shown.stdout)["liveaction"]["runner_info"] == info[first]
    text = cli(home, "execution", "get", first, packs=[str(rt.registry.packs["rn"].path)],
               check=True).stdout
    assert f"hostname: {info[first]['hostname']}" in text


def test_a_local_shell_command_runs_as_a_child_of_its_runner(two: Runtime) -> None:
    rt = two
    ex_id = rt.request("core.local", {"cmd": "echo $PPID; pwd"})
    run_until_status(rt, ex_id, *COMPLETED)
    done = record(rt, ex_id)
    assert done["status"] == SUCCEEDED, done["result"]
    ppid = int(done["result"]["stdout"].split()[0])
    assert ppid == done["runner_info"]["pid"]
    assert done["runner_info"]["hostname"] == "runner-1"  # both idle: the lowest index


def test_a_concurrency_attr_policy_serialises_executions_across_runners(
        two: Runtime, tmp_path: Path) -> None:
    rt, home = two, two.home.path
    gates = {name: tmp_path / f"gate-{name}" for name in ("a", "f", "e")}
    first = rt.request("rn.where", {"name": "a", "key": "x", "gate": str(gates["a"])})
    run_until_started(rt, "a")
    filler = rt.request("rn.where", {"name": "f", "key": "f", "gate": str(gates["f"])})
    run_until_started(rt, "f")
    other = rt.request("rn.where", {"name": "e", "key": "e", "gate": str(gates["e"])})
    run_until_started(rt, "e")
    assert [runner_of(rt, ex) for ex in (first, filler, other)] == [
        "runner-1", "runner-2", "runner-1"]
    gates["f"].write_text("")
    run_until_status(rt, filler, SUCCEEDED)
    # runner-2 is idle, but `x` is held by the execution on runner-1
    same_key = rt.request("rn.where", {"name": "c", "key": "x"})
    rt.run(forever=True, timeout=1.5)
    assert record(rt, same_key)["status"] == DELAYED
    assert not state_file(home, 2, "c").exists()
    gates["a"].write_text("")
    run_until_status(rt, same_key, *COMPLETED)
    assert record(rt, same_key)["status"] == SUCCEEDED
    assert runner_of(rt, same_key) == "runner-2"  # another runner than the first's
    assert record(rt, same_key)["result"]["result"]["start"] >= \
        record(rt, first)["result"]["result"]["end"]
    assert DELAYED in [e["status"] for e in record(rt, same_key)["log"]]
    gates["e"].write_text("")
    run_until_status(rt, other, SUCCEEDED)



def test_a_killed_runner_leaves_its_execution_running_and_the_other_runner_takes_the_next(
        two: Runtime, pack: Path, tmp_path: Path) -> None:
    rt, home = two, two.home.path
    gate = tmp_path / "never"
    ex_id = rt.request("rn.where", {"name": "victim", "gate": str(gate), "child": True})
    run_until_started(rt, "victim")
    victim = runner_index(runner_of(rt, ex_id))
    survivor = 3 - victim
    runner_pid = record(rt, ex_id)["runner_info"]["pid"]
    seen = marker(home, "victim")
    tree = [seen["pid"], seen["child"]] + seen["ancestors"][:seen["ancestors"].index(
        runner_pid) + 1]
    try:
        killed = cli(home, "runner", "kill", str(victim), "--json", packs=[str(pack)],
                     check=True)
        assert set(tree) <= set(json.loads(killed.stdout)["killed"])
        for pid in tree:  # the action, its child, its zygote (warm) and the runner
            assert wait_for(lambda pid=pid: gone(pid), 15), f"{pid} still runs"
        rt.run(forever=True, timeout=2)
        # nobody reports it: st2's execution of a dead action runner stays running
        lost = record(rt, ex_id)
        assert lost["status"] == RUNNING and lost["result"] is None
        assert ex_id in rt.lost
        listed = {r["index"]: r for r in rt.runner_list()}
        assert not listed[victim]["alive"] and listed[victim]["executions"] == [ex_id]
        assert listed[survivor]["alive"] and listed[survivor]["running"] == 0
        assert "no" in cli(home, "runner", "list", packs=[str(pack)], check=True).stdout
        # new executions go to the runner that is left, whatever the dispatch order
        after = [rt.request("rn.where", {"name": f"after{i}", "hold": 0.5}) for i in range(2)]
        for ex in after:
            run_until_status(rt, ex, *COMPLETED)
            assert record(rt, ex)["status"] == SUCCEEDED
            assert runner_of(rt, ex) == f"runner-{survivor}"
        # it holds its concurrency policy slot (key `victim`) until someone completes it
        same_key = rt.request("rn.where", {"name": "same", "key": "victim"})
        rt.run(forever=True, timeout=1.5)
        assert record(rt, same_key)["status"] == DELAYED
        # a cancel finds nobody to act on it
        rt.cancel(ex_id)
        rt.run(forever=True, timeout=1)
        assert record(rt, ex_id)["status"] == RUNNING
        again = cli(home, "runner", "kill", str(victim), packs=[str(pack)])
        assert again.returncode != 0 and "is not running" in again.stderr
    finally:
        for pid in tree:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_after_a_restart_the_lost_execution_stays_running_until_the_api_completes_it(
        tmp_path: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path, monkeypatch, runners=2, python_workers="cold")
    rt = start(home, pack)
    try:
        ex_id = rt.request("rn.where", {"name": "victim", "gate": str(tmp_path / "never")})
        run_until_started(rt, "victim")
        victim = runner_index(runner_of(rt, ex_id))
        old_pid = record(rt, ex_id)["runner_info"]["pid"]
        rt.kill_runner(victim)
        assert gone(old_pid)
        assert not rt.runner_list()[victim - 1]["alive"]
    finally:
        rt.close()
    rt = start(home, pack)  # every runner starts again; the lost execution is not abandoned
    try:
        rt.run(forever=True, timeout=1)
        assert record(rt, ex_id)["status"] == RUNNING
        listed = rt.runner_list()
        assert all(r["alive"] for r in listed) and listed[victim - 1]["pid"] != old_pid
        # its running LiveAction holds its concurrency policy slot (key `victim`)
        same_key = rt.request("rn.where", {"name": "same", "key": "victim"})
        rt.run(forever=True, timeout=1.5)
        assert record(rt, same_key)["status"] == DELAYED
        # the pack's watchdog settles it through the API (st2: its LiveAction is active)
        done = api_call(rt, "PUT", f"executions/{ex_id}",
                    {"status": "failed", "result": {"error": "its runner died"}})
        assert done.status_code == 200, done.text
        # st2's update_status records the end before it answers: a GET right after reads it
        assert done.json()["status"] == FAILED
        read = requests.get(f"{rt.api.url}/executions/{ex_id}", timeout=10, headers={
            "X-Auth-Token": rt.api.issue_token("operator")}).json()
        assert read["status"] == FAILED and read["result"] == {"error": "its runner died"}
        assert (record(rt, ex_id)["status"], record(rt, ex_id)["result"]) == (
            FAILED, {"error": "its runner died"})
        run_until_status(rt, same_key, *COMPLETED)
        assert record(rt, same_key)["status"] == SUCCEEDED
    finally:
        rt.close()


def test_one_runner_is_the_engine_process_itself(tmp_path: Path, pack: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path, monkeypatch)
    rt = start(home, pack)
    try:
        assert rt.home.runners == 1 and rt.action_runners is None
        ex_id = rt.request("rn.where", {"name": "one"})
        run_until_status(rt, ex_id, *COMPLETED)
        done = record(rt, ex_id)
        assert done["status"] == SUCCEEDED and done["runner_info"] is None
        assert done["result"]["result"]["state_dir"] == str(home / "shared-state")
        assert os.getpid() in done["result"]["result"]["ancestors"]
        assert not (home / "runners").exists()
        shown = cli(home, "runner", "list", packs=[str(pack)], check=True)
        assert "actions run as children of the engine process" in shown.stdout
        refused = cli(home, "runner", "kill", "1", packs=[str(pack)])
        assert refused.returncode != 0 and "runners: 1" in refused.stderr
    finally:
        rt.close()


def test_the_runners_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path, monkeypatch, runners=0)
    with pytest.raises(MetadataError, match="runners: 0: a number of action runners"):
        assert RuntimeHome(str(home)).runners
    monkeypatch.setenv("FLEET_ROLLOUT_RUNNERS", "3")
    assert RuntimeHome(str(home)).runners == 3
    monkeypatch.setenv("FLEET_ROLLOUT_RUNNERS", "two")
    with pytest.raises(MetadataError, match="runners: 'two'"):
        assert RuntimeHome(str(home)).runners


def test_every_runner_dead_leaves_new_executions_waiting(
        tmp_path: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path, monkeypatch, runners=2, python_workers="cold")
    rt = start(home, pack)
    try:
        for index in (1, 2):
            rt.kill_runner(index)
        ex_id = rt.request("rn.where", {"name": "waits"})
        rt.run(forever=True, timeout=1.5)
        assert record(rt, ex_id)["status"] not in COMPLETED + (RUNNING,)
    finally:
        rt.close()
    rt = start(home, pack)  # the next engine start runs it
    try:
        run_until_status(rt, ex_id, *COMPLETED)
        assert record(rt, ex_id)["status"] == SUCCEEDED
    finally:
        rt.close()
