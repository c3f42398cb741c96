"""Runners that execute an action outside the engine thread (subprocesses, chat posts).

Each returns `(status, result)` with st2's result shapes:
- python-script: {"stdout", "stderr", "exit_code", "result"} (+ "error" on timeout);
- local-shell-cmd / local-shell-script: {"stdout", "stderr", "return_code", "succeeded",
  "failed"} (+ "error" on timeout);
- announcement (chatops.post_message): the posted message.
Subprocesses run in their own process group and die with the runtime (PR_SET_PDEATHSIG).
python-script actions run in a child forked by the pack's warm worker zygote when the runtime
gives a `fleet_runtime.warm.WarmPool` (same spec, result, exit codes, kill), else in a new
`python -u -m fleet_runtime.python_wrapper` process. Given a `host` (an action runner process,
fleet_runtime.action_runners), that process starts the action's processes instead of this one.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple
from urllib.parse import urlparse

from fleet_runtime import chatlog
from fleet_runtime.paths import REPO_ROOT
from fleet_runtime.python_wrapper import ACTION_OUTPUT_RESULT_DELIMITER, INVALID_STATUS_EXIT_CODE
from fleet_runtime.statuses import CANCELED, FAILED, SUCCEEDED, TIMEOUT
from fleet_runtime.warm import WORKER_DIED, WarmPool

CHILD_UMASK = 0o077  # what an action writes (audit files, reports) is private to the user


def _child_setup() -> None:
    os.setsid()
    os.umask(CHILD_UMASK)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class ProcessHandle:
    """A running action subprocess that the engine can cancel (a Popen or a WarmProcess:
    either runs in its own session, so killpg(pid) kills it and its children)."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.canceled = False
        self.worker_died = False  # the warm worker zygote of the process died
        self._lock = threading.Lock()

    def attach(self, proc: Any) -> None:
        with self._lock:
            self.proc = proc
            if self.canceled:
                self._kill()

    def cancel(self) -> None:
        with self._lock:
            self.canceled = True
            self._kill()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


Spawner = Callable[[], Tuple[Any, Optional[str]]]
"""Starts an action process: (a Popen-like process, the text to write on its stdin)."""


class ProcessHost(Protocol):
    """Who starts an action's processes when not this process (an action runner)."""

    def spawn(self, argv: Sequence[str], env: Optional[Dict[str, str]], cwd: Optional[str]
              ) -> Any:
        """A Popen(text=True)-like process with stdin/stdout/stderr pipes, in its own
        session."""


def _popen_spawner(argv: List[str], stdin_text: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                   host: Optional[ProcessHost] = None) -> Spawner:
    def spawn() -> Tuple[Any, Optional[str]]:
        if host is not None:
            return host.spawn(argv, env, cwd or None), stdin_text
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd or None,
            preexec_fn=_child_setup,
            text=True,
        )
        return proc, stdin_text

    return spawn


def _run_process(
    argv: List[str],
    handle: ProcessHandle,
    timeout: Optional[float],
    stdin_text: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[str] = None,
    spawn: Optional[Spawner] = None,
    host: Optional[ProcessHost] = None,
) -> Tuple[int, str, str, bool]:
    proc, stdin_text = (spawn or _popen_spawner(argv, stdin_text, env, cwd, host))()
    handle.attach(proc)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(input=stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate()
    if getattr(proc, "worker_died", False):
        handle.worker_died = True
        stderr = (stderr or "") + f"{WORKER_DIED}\n"
    return proc.returncode, stdout or "", stderr or "", timed_out


def run_python(
    entry_point: str,
    pack: str,
    pack_path: Optional[str],
    config: Dict[str, Any],
    parameters: Dict[str, Any],
    runner_params: Dict[str, Any],
    user: str,
    db_path: str,
    key_path: str,
    env_extra: Dict[str, str],
    handle: ProcessHandle,
    pool: Optional[WarmPool] = None,
    datastore_api: bool = False,
    host: Optional[ProcessHost] = None,
) -> Tuple[str, Dict[str, Any]]:
    """st2's python runner; with `pool`, in a child forked by the pack's warm zygote (when
    the pool has one for the pack, else cold, started by `host` when given). `datastore_api`:
    the action's datastore goes through the local API as the execution's user (RBAC
    applies), as st2's does."""
    sys_path = [os.path.dirname(entry_point)]
    if pack_path:
        sys_path.append(os.path.join(pack_path, "actions", "lib"))
    spec = {
        "pack": pack,
        "file_path": entry_point,
        "config": config,
        "parameters": parameters,
        "user": user,
        "log_level": runner_params.get("log_level") or "DEBUG",
        "db_path": db_path,
        "key_path": key_path,
        "datastore_api": datastore_api,
        "sys_path": sys_path,
    }
    env = os.environ.copy()
    env.update({k: str(v) for k, v in (runner_params.get("env") or {}).items()})
    env.update(env_extra)
    runtime_root = str(REPO_ROOT)  # where fleet_runtime is importable from
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in [runtime_root, env.get("PYTHONPATH", "")] if p]
    )
    timeout = runner_params.get("timeout") or 600
    argv = [sys.executable, "-u", "-m", "fleet_runtime.python_wrapper"]
    cwd = os.path.dirname(entry_point)
    cold = _popen_spawner(argv, json.dumps(spec, default=str) + "\n", env, cwd, host)

    def spawn() -> Tuple[Any, Optional[str]]:
        warm = pool.spawn(pack_path, cwd) if pool is not None and pack_path else None
        if warm is None:
            return cold()
        return warm, json.dumps({**spec, "env": env, "cwd": cwd}, default=str) + "\n"

    code, stdout, stderr, timed_out = _run_process(argv, handle, timeout, spawn=spawn)
    if handle.canceled:
        return CANCELED, {"stdout": stdout, "stderr": stderr, "exit_code": code, "result": None}
    if code == INVALID_STATUS_EXIT_CODE:
        return FAILED, {"stdout": stdout, "stderr": stderr, "exit_code": code, "result": None,
                        "error": stderr.strip()}
    action_result: Any = None
    action_status = None
    if ACTION_OUTPUT_RESULT_DELIMITER in stdout:
        parts = stdout.split(ACTION_OUTPUT_RESULT_DELIMITER)
        if len(parts) == 3:
            stdout = parts[0] + parts[2]
            try:
                decoded = json.loads(parts[1].strip())
                action_result = decoded.get("result")
                action_status = decoded.get("status")
            except ValueError:
                action_result = parts[1].strip()
    else:
        action_result = "None"
    result: Dict[str, Any] = {
        "stdout": stdout,
        "stderr": stderr,
        "exit_code": code,
        "result": action_result,
    }
    if timed_out:
        result["error"] = f"Action failed to complete in {timeout} seconds"
        return TIMEOUT, result
    if handle.worker_died:
        result["error"] = WORKER_DIED
        return FAILED, result
    if action_status is not None:
        status = SUCCEEDED if (code == 0 and action_status is True) else FAILED
    else:
        status = SUCCEEDED if code == 0 else FAILED
    return status, result


def _local_outcome(
    code: int, stdout: str, stderr: str, timed_out: bool, timeout: Any, handle: ProcessHandle
) -> Tuple[str, Dict[str, Any]]:
    """The status and result of a finished local command or script."""
    result = _local_result(code, stdout, stderr)
    if handle.canceled:
        return CANCELED, result
    if timed_out:
        result["error"] = f"Action failed to complete in {timeout} seconds"
        return TIMEOUT, result
    return (SUCCEEDED if code == 0 else FAILED), result


def _local_result(code: int, stdout: str, stderr: str) -> Dict[str, Any]:
    return {
        "failed": code != 0,
        "succeeded": code == 0,
        "return_code": code,
        "stdout": stdout.rstrip("\n") if stdout else stdout,
        "stderr": stderr.rstrip("\n") if stderr else stderr,
    }


def _local_env(runner_params: Dict[str, Any], env_extra: Dict[str, str]) -> Dict[str, str]:
    env = os.environ.copy()
    env.update({k: str(v) for k, v in (runner_params.get("env") or {}).items()})
    env.update(env_extra)
    return env


def run_local_cmd(
    cmd: str, runner_params: Dict[str, Any], env_extra: Dict[str, str], handle: ProcessHandle,
    host: Optional[ProcessHost] = None,
) -> Tuple[str, Dict[str, Any]]:
    if runner_params.get("sudo"):
        return FAILED, {"error": "sudo is not supported by the embedded runtime", "failed": True,
                        "succeeded": False, "return_code": -1, "stdout": "", "stderr": ""}
    timeout = runner_params.get("timeout") or 60
    code, stdout, stderr, timed_out = _run_process(
        ["/bin/bash", "-c", cmd],
        handle,
        timeout,
        env=_local_env(runner_params, env_extra),
        cwd=runner_params.get("cwd"),
        host=host,
    )
    return _local_outcome(code, stdout, stderr, timed_out, timeout, handle)


def script_arguments(
    action_params: Dict[str, Any], definitions: Dict[str, Any], kwarg_op: str
) -> List[str]:
    """st2's ShellScriptAction arguments: --name=value for named, then positionals."""
    positional = sorted(
        (d["position"], n) for n, d in definitions.items() if "position" in d and n in action_params
    )
    positional_names = {n for _, n in positional}
    argv: List[str] = []
    for name, value in action_params.items():
        if name in positional_names:
            continue
        if value is None or (isinstance(value, str) and len(value) < 1):
            continue
        if isinstance(value, bool):
            if value:
                argv.append(f"{kwarg_op}{name}")
            continue
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        argv.append(f"{kwarg_op}{name}={text}")
    for _, name in positional:
        value = action_params[name]
        if value is None:
            value = ""
        elif isinstance(value, (dict, list)):
            value = json.dumps(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        argv.append(str(value))
    return argv


def run_local_script(
    entry_point: str,
    action_params: Dict[str, Any],
    definitions: Dict[str, Any],
    runner_params: Dict[str, Any],
    env_extra: Dict[str, str],
    handle: ProcessHandle,
    host: Optional[ProcessHost] = None,
) -> Tuple[str, Dict[str, Any]]:
    kwarg_op = runner_params.get("kwarg_op") or "--"
    argv = [entry_point, *script_arguments(action_params, definitions, kwarg_op)]
    if not os.access(entry_point, os.X_OK):
        argv = ["/bin/bash", *argv]
    timeout = runner_params.get("timeout") or 60
    code, stdout, stderr, timed_out = _run_process(
        argv,
        handle,
        timeout,
        env=_local_env(runner_params, env_extra),
        cwd=runner_params.get("cwd") or os.path.dirname(entry_point),
        host=host,
    )
    return _local_outcome(code, stdout, stderr, timed_out, timeout, handle)


def check_loopback_url(url: str) -> None:
    """The runtime only talks to this machine (webhooks must be on 127.0.0.1/localhost)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"webhook URL {url!r}: only http(s) is supported")
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(
            f"webhook URL {url!r}: only loopback addresses (127.0.0.1, localhost) are allowed"
        )


def post_message(
    home: Path, webhook: Optional[str], params: Dict[str, Any], route: str,
    mask: Optional[Callable[[Any], Any]] = None,
) -> Tuple[str, Dict[str, Any]]:
    """chatops.post_message, like st2's announcement runner: publish the action parameters as
    stream event `st2.announcement__<route>` (fleet_runtime.chatlog: only route `chatops`
    reaches chat, and the webhook). Result as st2's: {"output": params, **params}. `mask`
    hides config and datastore secrets in what is posted."""
    if mask is not None:
        params = dict(mask(params))
    entry = chatlog.publish(home, params, route, mask=mask)
    result: Dict[str, Any] = {"output": dict(params)}
    result.update(params)
    if webhook and entry["reaches_chat"]:
        import requests

        try:
            check_loopback_url(webhook)
            body = {k: v for k, v in entry.items() if k != "reaches_chat"}
            resp = requests.post(webhook, json=body, timeout=10)
            result["webhook_status"] = resp.status_code
            if resp.status_code >= 400:
                result["error"] = f"webhook answered HTTP {resp.status_code}"
                return FAILED, result
        except Exception as e:
            result["error"] = f"webhook post failed: {e}"
            return FAILED, result
    return SUCCEEDED, result


def shell_quote(argv: List[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
