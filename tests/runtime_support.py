"""Helpers for tests of the runtime and of packs run on it (fixture homes, engines, the CLI)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import requests
from locations import FIXTURES, ROOT

from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome
from fleet_runtime.statuses import COMPLETED

FIXTURE_PACK = FIXTURES / "runtime_pack"


def make_home(path: Path, config: Optional[Dict[str, Any]] = None,
              settings: Optional[Dict[str, Any]] = None) -> Path:
    """A runtime home with a config for the rt_test fixture pack."""
    import yaml

    path.mkdir(parents=True, exist_ok=True)
    (path / "configs").mkdir(exist_ok=True)
    cfg = {"api_token": "s3cr3t-token", "journal_dir": str(path / "journal")}
    cfg.update(config or {})
    (path / "configs" / "rt_test.yaml").write_text(yaml.safe_dump(cfg))
    if settings:
        (path / "config.yaml").write_text(yaml.safe_dump(settings))
    return path


def fixture_home(path: Path, monkeypatch: Any, time_factor: str = "0.05",
                 user: str = "operator", settings: Optional[Dict[str, Any]] = None) -> Path:
    """A fixture home for engine tests: fast timers, the user and any other `settings` from
    the settings file (not from the caller's environment)."""
    monkeypatch.setenv("FLEET_ROLLOUT_TIME_FACTOR", time_factor)
    for name in ("FLEET_ROLLOUT_USER", "FLEET_ROLLOUT_ROLES", "FLEET_ROLLOUT_DEAD_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    return make_home(path, settings=dict(settings or {}, user=user))


def engine(home: Path, packs: Optional[List[str]] = None, workers: int = 8) -> Runtime:
    """An in-process runtime holding the engine role for `home`."""
    rt = Runtime(RuntimeHome(str(home)), packs or [str(FIXTURE_PACK)], workers=workers)
    assert rt.try_become_engine()
    return rt


def run(rt: Runtime, ref: str, params: Optional[Dict[str, Any]] = None,
        context: Optional[Dict[str, Any]] = None, timeout: float = 60) -> Dict[str, Any]:
    """Request an execution and drive the engine until it finishes or waits for a person."""
    ex_id = rt.request(ref, params or {}, context)
    return wait(rt, ex_id, timeout=timeout)


def wait(rt: Runtime, ex_id: str, timeout: float = 60, until_completed: bool = False
         ) -> Dict[str, Any]:
    def done() -> bool:
        record = rt.store.get_execution(ex_id)
        assert record is not None
        if until_completed:
            return record["status"] in COMPLETED
        return rt.settled(ex_id)

    rt.run(until=done, timeout=timeout, forever=until_completed)
    record = rt.store.get_execution(ex_id)
    assert record is not None
    return record


def children(rt: Runtime, ex_id: str) -> List[Dict[str, Any]]:
    return rt.store.find_executions("parent_id=?", (ex_id,))


def journal(home: Path, name: str) -> List[Dict[str, Any]]:
    path = home / "journal" / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cli(home: Path, *args: str, packs: Optional[List[str]] = None, env: Optional[Dict[str, str]]
        = None, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
    """Run `fleet-rollout ARGS` for `home` with the fixture pack (not the repository pack)."""
    argv = [sys.executable, "-m", "fleet_runtime.cli", *args]
    for pack in packs or [str(FIXTURE_PACK)]:
        argv += ["--pack", pack]
    argv.append("--no-default-pack")
    full_env = dict(os.environ)
    full_env["FLEET_ROLLOUT_HOME"] = str(home)
    full_env.pop("FLEET_ROLLOUT_KILL_AFTER_COMMITS", None)
    full_env.update(env or {})
    proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout,
                          cwd=str(ROOT))
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


RUNTIME_COMMANDS = ("run", "execution", "inquiry", "chat", "key", "pack", "engine")


def cli_inprocess(
    home: Path, *args: str, packs: Optional[List[str]] = None
) -> Tuple[int, str, str]:
    """Run one of the runtime's commands in this process: (exit code, stdout, stderr)."""
    import argparse
    import contextlib
    import importlib
    import io

    parser = argparse.ArgumentParser(prog="fleet-rollout")
    sub = parser.add_subparsers(dest="command")
    for name in RUNTIME_COMMANDS:
        importlib.import_module(f"fleet_runtime.commands.{name}").register(sub)
    argv = list(args)
    if argv and argv[0] not in ("key",):
        for pack in packs or [str(FIXTURE_PACK)]:
            argv += ["--pack", pack]
        argv += ["--no-default-pack"]
    argv += ["--home", str(home)]
    parsed = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = int(parsed.func(parsed) or 0)
    return code, out.getvalue(), err.getvalue()


def api_call(rt: Runtime, method: str, path: str, body: Any = None,
             user: str = "operator") -> Any:
    """An st2 API request to `rt`'s API as `user`, the engine driven in this thread while it
    is answered (the API's PUT of a completed status answers once the engine recorded it)."""
    answer: Dict[str, Any] = {}

    def call() -> None:
        answer["response"] = requests.request(
            method, f"{rt.api.url}/{path}", json=body, timeout=60,
            headers={"X-Auth-Token": rt.api.issue_token(user)})

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    rt.run(until=lambda: not thread.is_alive(), forever=True, eager=True, timeout=60)
    thread.join(5)
    return answer["response"]
