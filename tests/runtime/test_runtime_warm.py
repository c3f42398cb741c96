"""Warm python workers (fleet_runtime.zygote / fleet_runtime.warm): a child forked from the
pack's zygote per execution keeps st2's python runner contract (docs/runtime.md, "Warm python
workers"): one process per execution, isolation, stdin spec, output capture, exit codes, kill of the
process group on timeout and cancel, death with the runtime, code changes picked up, and the
fallbacks (zygote crash, repeated failures, a preload that starts threads).

Every test builds its own pack and runtime home under tmp_path.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from locations import ROOT as REPO_ROOT
from process_support import gone, wait_for
from runtime_support import make_home, run, wait

from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome
from fleet_runtime.runtime_errors import MetadataError

PACK_YAML = """\
---
ref: wt
name: wt
description: Warm worker test pack.
version: 0.1.0
author: tests
email: tests@example.com
"""

ACTIONS: Dict[str, str] = {
    "state": '''\
        import os
        import random
        import sys

        import wt_lib
        from st2common.runners.base_action import Action


        class State(Action):
            def run(self, mutate=True):
                seen = {
                    "counter": list(wt_lib.COUNTER),
                    "value": wt_lib.VALUE,
                    "leak": os.environ.get("WT_LEAK"),
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                    "pgid": os.getpgid(0),
                    "sid": os.getsid(0),
                    "random": random.random(),
                    "sys_path": [p for p in sys.path if "site-packages" not in p],
                    "execution_id": os.environ.get("ST2_ACTION_EXECUTION_ID"),
                    "runner_env": os.environ.get("WT_RUNNER_ENV"),
                    "umask": os.umask(0o022),
                    "argv": sys.argv,
                }
                if mutate:
                    wt_lib.COUNTER.append(1)
                    os.environ["WT_LEAK"] = "leaked"
                    os.chdir("/")
                    sys.path.insert(0, "/nonexistent-leak")
                return seen
    ''',
    "outputs": '''\
        import sys

        from st2common.runners.base_action import Action


        class Outputs(Action):
            def run(self, mode):
                print("to stdout")
                sys.stderr.write("to stderr\\n")
                if mode == "fail":
                    return (False, {"why": "asked"})
                if mode == "raise":
                    raise RuntimeError("boom")
                if mode == "badstatus":
                    return ("yes", 1)
                if mode == "exit":
                    sys.exit(3)
                if mode == "secret":
                    return {"echo": self.config.get("password")}
                return {"mode": mode, "unicode": "\\u00e9\\u2713"}
    ''',
    "sleeper": '''\
        import os
        import subprocess
        import sys
        import time

        from st2common.runners.base_action import Action


        class Sleeper(Action):
            def run(self, pid_file):
                child = subprocess.Popen(["sleep", "300"])
                with open(pid_file + ".tmp", "w") as fh:
                    fh.write(f"{os.getpid()} {child.pid}")
                os.rename(pid_file + ".tmp", pid_file)
                time.sleep(300)
                return "slept"
    ''',
}

ACTION_META: Dict[str, str] = {
    "state": "parameters:\n  mutate: {type: boolean, default: true}\n"
             "  env: {default: {WT_RUNNER_ENV: from-runner}}\n",
    "outputs": "parameters:\n  mode: {type: string, required: true}\n",
    "sleeper": "parameters:\n  pid_file: {type: string, required: true}\n"
               "  timeout: {default: 600}\n",
}

LIB = '''\
import os

COUNTER = []
VALUE = "v1"
IMPORTED_IN = os.getpid()
'''


def make_pack(root: Path, extra_lib: Optional[Dict[str, str]] = None,
              extra_actions: Optional[Dict[str, str]] = None) -> Path:
    pack = root / "wt"
    (pack / "actions" / "lib" / "wt_lib").mkdir(parents=True)
    (pack / "pack.yaml").write_text(PACK_YAML)
    (pack / "config.schema.yaml").write_text(
        "password: {type: string, secret: true, required: false}\n")
    (pack / "actions" / "lib" / "wt_lib" / "__init__.py").write_text(LIB)
    for name, text in (extra_lib or {}).items():
        (pack / "actions" / "lib" / f"{name}.py").write_text(textwrap.dedent(text))
    actions = dict(ACTIONS)
    actions.update(extra_actions or {})
    for name, code in actions.items():
        (pack / "actions" / f"{name}.py").write_text(textwrap.dedent(code))
        meta = (f"---\nname: {name}\nrunner_type: python-script\nentry_point: {name}.py\n"
                + ACTION_META.get(name, "parameters: {}\n"))
        (pack / "actions" / f"{name}.yaml").write_text(meta)
    return pack


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEET_ROLLOUT_TIME_FACTOR", "0.05")
    monkeypatch.delenv("FLEET_ROLLOUT_USER", raising=False)
    monkeypatch.delenv("FLEET_ROLLOUT_ROLES", raising=False)
    monkeypatch.delenv("FLEET_ROLLOUT_PYTHON_WORKERS", raising=False)
    monkeypatch.delenv("WT_LEAK", raising=False)
    path = make_home(tmp_path / "home", settings={"user": "operator"})
    (path / "configs" / "wt.yaml").write_text("password: hunter2-secret\n")
    return path


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    return make_pack(tmp_path / "packs")


def start(home: Path, pack: Path, workers: str = "warm",
          monkeypatch: Optional[pytest.MonkeyPatch] = None) -> Runtime:
    os.environ["FLEET_ROLLOUT_PYTHON_WORKERS"] = workers
    try:
        rt = Runtime(RuntimeHome(str(home)), [str(pack)], workers=4)
        assert rt.try_become_engine()
    finally:
        del os.environ["FLEET_ROLLOUT_PYTHON_WORKERS"]
    return rt


@pytest.fixture()
def warm(home: Path, pack: Path) -> Iterator[Runtime]:
    rt = start(home, pack)
    assert rt.warm_pool is not None
    yield rt
    rt.close()


def info(rt: Runtime, pack: Path) -> Dict[str, Any]:
    assert rt.warm_pool is not None
    return rt.warm_pool.info(str(pack))


def run_until_file(rt: Runtime, path: Path, timeout: float = 90.0) -> List[int]:
    rt.run(until=path.exists, eager=True, forever=True, timeout=timeout)
    assert path.exists(), "the action did not start"
    return [int(x) for x in path.read_text().split()]


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------ results and isolation
OUTPUT_MODES = ["ok", "fail", "raise", "badstatus", "exit", "secret"]


def _outcome(rt: Runtime, mode: str) -> Dict[str, Any]:
    ex = run(rt, "wt.outputs", {"mode": mode})
    result = dict(ex["result"])
    result["stderr"] = re.sub(r"line \d+", "line N", result.get("stderr") or "")
    return {"status": ex["status"], "result": result}


def test_results_output_and_exit_codes_same_as_cold(home: Path, pack: Path) -> None:
    outcomes: Dict[str, Dict[str, Any]] = {}
    for workers in ("cold", "warm"):
        rt = start(home, pack, workers)
        try:
            assert (rt.warm_pool is None) == (workers == "cold")
            outcomes[workers] = {mode: _outcome(rt, mode) for mode in OUTPUT_MODES}
            if workers == "warm":
                assert info(rt, pack)["warm"] and info(rt, pack)["zygote_pid"]
        finally:
            rt.close()
    assert outcomes["warm"] == outcomes["cold"]
    warm = outcomes["warm"]
    assert warm["ok"]["status"] == "succeeded"
    assert warm["ok"]["result"]["result"] == {"mode": "ok", "unicode": "\u00e9\u2713"}
    assert warm["ok"]["result"]["stdout"] == "to stdout\n"
    assert warm["ok"]["result"]["stderr"] == "to stderr\n"
    assert warm["fail"]["status"] == "failed" and warm["fail"]["result"]["exit_code"] == 0
    assert warm["raise"]["result"]["exit_code"] == 1
    assert "RuntimeError: boom" in warm["raise"]["result"]["stderr"]
    assert warm["badstatus"]["result"]["exit_code"] == 220
    assert warm["exit"]["result"]["exit_code"] == 3
    # the config secret is masked in the stored result, as with a cold process
    assert "hunter2-secret" not in json.dumps(warm["secret"])


def test_each_execution_is_isolated(warm: Runtime, pack: Path) -> None:
    first = run(warm, "wt.state")["result"]["result"]
    second = run(warm, "wt.state")["result"]["result"]
    zygote = info(warm, pack)["zygote_pid"]
    assert zygote and info(warm, pack)["generation"] == 1
    for seen in (first, second):
        assert seen["counter"] == [] and seen["value"] == "v1"  # module state: fresh
        assert seen["leak"] is None  # os.environ: the execution's
        assert seen["cwd"] == str(pack / "actions")
        assert "/nonexistent-leak" not in seen["sys_path"]
        assert seen["pgid"] == seen["pid"] == seen["sid"]  # own session: killpg(pid) works
        assert seen["umask"] == 0o077
        assert seen["runner_env"] == "from-runner"
        assert seen["pid"] != zygote
    assert first["pid"] != second["pid"]
    assert first["execution_id"] != second["execution_id"]
    assert first["random"] != second["random"]
    assert not gone(zygote)


def test_sys_path_and_argv_like_cold(home: Path, pack: Path) -> None:
    seen = {}
    for workers in ("cold", "warm"):
        rt = start(home, pack, workers)
        try:
            seen[workers] = run(rt, "wt.state", {"mutate": False})["result"]["result"]
        finally:
            rt.close()
    assert seen["warm"]["sys_path"] == seen["cold"]["sys_path"]
    assert seen["warm"]["sys_path"][:3] == [
        str(REPO_ROOT / "fleet_runtime" / "st2shim"), str(pack / "actions" / "lib"),
        str(pack / "actions")]
    assert os.path.basename(seen["warm"]["argv"][0]) == "python_wrapper.py"


# ------------------------------------------------------------------ kill
def test_timeout_kills_the_process_group(warm: Runtime, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    ex_id = warm.request("wt.sleeper", {"pid_file": str(pid_file), "timeout": 3})
    pids = run_until_file(warm, pid_file)
    try:
        final = wait(warm, ex_id, timeout=90)
        assert final["status"] == "timeout"
        assert final["result"]["error"] == "Action failed to complete in 3 seconds"
        assert wait_for(lambda: all(gone(p) for p in pids), 20)
    finally:
        for pid in pids:
            kill_quietly(pid)


def test_cancel_kills_the_process_group(warm: Runtime, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    ex_id = warm.request("wt.sleeper", {"pid_file": str(pid_file)})
    pids = run_until_file(warm, pid_file)
    try:
        warm.cancel(ex_id)
        final = wait(warm, ex_id, timeout=60, until_completed=True)
        assert final["status"] == "canceled"
        assert wait_for(lambda: all(gone(p) for p in pids), 20)
    finally:
        for pid in pids:
            kill_quietly(pid)


ENGINE_SCRIPT = """\
import json, os, sys, time
from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome
from pathlib import Path
rt = Runtime(RuntimeHome({home!r}), [{pack!r}], workers=2)
assert rt.try_become_engine()
rt.request("wt.sleeper", {{"pid_file": {pid_file!r}}})
rt.run(until=Path({pid_file!r}).exists, eager=True, forever=True, timeout=120)
print(json.dumps(rt.warm_pool.info({pack!r})), flush=True)
time.sleep(300)
"""


def test_sigkill_of_the_engine_kills_zygote_and_children(home: Path, pack: Path,
                                                         tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    script = ENGINE_SCRIPT.format(home=str(home), pack=str(pack),
                                  pid_file=str(pid_file))
    env = dict(os.environ, FLEET_ROLLOUT_PYTHON_WORKERS="warm")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            text=True, env=env, cwd=str(tmp_path))
    pids: List[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the engine did not start the action"
        zygote = json.loads(line)["zygote_pid"]
        pids = [int(x) for x in pid_file.read_text().split()]
        assert zygote and not gone(zygote) and not gone(pids[0])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # engine -> zygote -> action process (PR_SET_PDEATHSIG), as the cold runner's child
        assert wait_for(lambda: gone(zygote) and gone(pids[0]), 20)
    finally:
        kill_quietly(proc.pid)
        proc.wait(timeout=30)
        for pid in pids[1:]:  # the action's own child outlives it, with either runner
            kill_quietly(pid)


# ------------------------------------------------------------------ generations and failures
def test_editing_a_lib_file_is_used_by_the_next_execution(warm: Runtime, pack: Path) -> None:
    assert run(warm, "wt.state")["result"]["result"]["value"] == "v1"
    first_zygote = info(warm, pack)["zygote_pid"]
    lib = pack / "actions" / "lib" / "wt_lib" / "__init__.py"
    lib.write_text(LIB.replace('VALUE = "v1"', 'VALUE = "v2-edited"'))
    assert run(warm, "wt.state")["result"]["result"]["value"] == "v2-edited"
    assert info(warm, pack)["generation"] == 2
    assert info(warm, pack)["zygote_pid"] != first_zygote
    assert wait_for(lambda: gone(first_zygote), 20)  # the old generation exits
    action = pack / "actions" / "outputs.py"
    action.write_text(action.read_text().replace('"mode": mode', '"mode": mode + "!"'))
    assert run(warm, "wt.outputs", {"mode": "ok"})["result"]["result"]["mode"] == "ok!"


def test_zygote_killed_mid_run_fails_the_execution_then_restarts(
        warm: Runtime, pack: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    ex_id = warm.request("wt.sleeper", {"pid_file": str(pid_file)})
    pids = run_until_file(warm, pid_file)
    try:
        zygote = info(warm, pack)["zygote_pid"]
        os.kill(zygote, signal.SIGKILL)
        final = wait(warm, ex_id, timeout=60, until_completed=True)
        assert final["status"] == "failed"
        assert final["result"]["error"] == "python worker process died"
        assert final["result"]["exit_code"] == -9
        assert wait_for(lambda: gone(pids[0]), 20)
        again = run(warm, "wt.state")
        assert again["status"] == "succeeded"
        assert info(warm, pack)["generation"] == 2 and info(warm, pack)["warm"]
        assert info(warm, pack)["failures"] == 0
    finally:
        for pid in pids:
            kill_quietly(pid)


def test_a_zygote_that_keeps_failing_falls_back_to_cold(home: Path, tmp_path: Path) -> None:
    crashing = '''\
        import os

        if not os.environ.get("ST2_ACTION_EXECUTION_ID"):
            os._exit(3)  # dies in the zygote (preload), fine in an execution
    '''
    pack = make_pack(tmp_path / "packs", extra_lib={"wt_crash": crashing})
    config = home / "config.yaml"
    config.write_text(config.read_text() + "warm_preload: [wt_crash]\n")
    rt = start(home, pack)
    try:
        for _ in range(4):
            assert run(rt, "wt.outputs", {"mode": "ok"})["status"] == "succeeded"
        state = info(rt, pack)
        assert not state["warm"] and "failed 3 times" in state["cold_reason"]
        assert state["zygote_pid"] is None
    finally:
        rt.close()


def test_a_preload_that_starts_threads_is_left_to_the_execution(home: Path,
                                                                tmp_path: Path) -> None:
    threads = '''\
        import threading
        import time

        WORKER = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
        WORKER.start()
    '''
    uses = '''\
        import threading

        import wt_threads
        from st2common.runners.base_action import Action


        class UsesThreads(Action):
            def run(self):
                return {"alive": wt_threads.WORKER.is_alive(),
                        "threads": threading.active_count()}
    '''
    pack = make_pack(tmp_path / "packs", extra_lib={"wt_threads": threads},
                     extra_actions={"uses_threads": uses})
    rt = start(home, pack)
    try:
        ex = run(rt, "wt.uses_threads")
        assert ex["status"] == "succeeded"
        assert ex["result"]["result"] == {"alive": True, "threads": 2}
        state = info(rt, pack)
        assert state["warm"] and state["excluded"] == ["wt_threads"]
        assert run(rt, "wt.state")["status"] == "succeeded"
        assert len(os.listdir(f"/proc/{state['zygote_pid']}/task")) == 1
    finally:
        rt.close()


# ------------------------------------------------------------------ settings
def test_python_workers_setting(home: Path, pack: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert RuntimeHome(str(home)).python_workers == "warm"  # the default
    monkeypatch.setenv("FLEET_ROLLOUT_PYTHON_WORKERS", "cold")
    assert RuntimeHome(str(home)).python_workers == "cold"
    monkeypatch.setenv("FLEET_ROLLOUT_PYTHON_WORKERS", "lukewarm")
    with pytest.raises(MetadataError, match="python_workers"):
        _ = RuntimeHome(str(home)).python_workers
    monkeypatch.delenv("FLEET_ROLLOUT_PYTHON_WORKERS")
    config = home / "config.yaml"
    config.write_text(config.read_text() + "python_workers: cold\n")
    assert RuntimeHome(str(home)).python_workers == "cold"
    rt = Runtime(RuntimeHome(str(home)), [str(pack)], workers=2)
    try:
        assert rt.try_become_engine() and rt.warm_pool is None
        assert run(rt, "wt.outputs", {"mode": "ok"})["status"] == "succeeded"
    finally:
        rt.close()


# ------------------------------------------------------------------ the pack's own library
ENV_READ = re.compile(r"os\.environ|os\.getenv|environ\.get")


def test_the_pack_library_reads_no_environment_at_import() -> None:
    """The zygote imports the pack library once, before an execution's ST2_ACTION_* / runner
    env exist: module-level code must not read the environment (grep-level: an environment
    read at indentation 0, outside any function or class)."""
    offenders = []
    lib = REPO_ROOT / "actions" / "lib"
    for path in sorted(lib.rglob("*.py")):
        in_docstring = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.count('"""') % 2 == 1:
                in_docstring = not in_docstring
                continue
            if in_docstring or not line or line[0] in " \t#":
                continue
            if ENV_READ.search(line):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line}")
    assert offenders == []
