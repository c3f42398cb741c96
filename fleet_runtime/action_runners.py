"""Action runners as processes of their own, engine side (the `runners` setting, 2 or more).

On StackStorm several st2actionrunner processes, on several machines, consume the same
action queue and share the database, the message bus and the coordination backend, but no
file system. Here each runner k (1-based) is a process of its own
(`fleet_runtime.runner_host`, a spawn server in its own session, started by the engine) with
its own directory `<home>/runners/<k>/`:

- every process of an action that runs on runner k is started by that process: cold python
  actions and local shell commands and scripts are its children (the engine sends it the
  argv, environment, cwd and the stdin/stdout/stderr pipes over SCM_RIGHTS), warm python
  actions are forked by runner k's own zygotes (a `WarmPool` per runner whose zygotes runner k
  starts), so they are its grandchildren;
- `runner.json` in its directory says its hostname (`runner-<k>`), pid and, once it died, when;
  `lost.jsonl` lists the executions dispatched to it that had not ended when it died; python-script
  actions on it see their pack config's `state_dir` as `<home>/runners/<k>/state_dir`
  (engine/actions.py);
- dispatch (`acquire`): the live runner with the fewest running executions, the lowest index
  on a tie, as competing consumers of st2's action queue;
- killing runner k (`kill`, or `kill_runner(home, k)` from another process): SIGKILL of its
  process and everything below it, by PID (runner_host.kill_tree). Its running executions are
  lost: they stay `running` and nothing reports them, as with an st2 action runner machine
  that dies; new executions go to the other runners. It stays dead until the engine starts
  again.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from fleet_runtime import fork_server, runner_host
from fleet_runtime.paths import REPO_ROOT
from fleet_runtime.runtime_errors import NotFoundError, RuntimeErrorBase
from fleet_runtime.statuses import RUNNING
from fleet_runtime.warm import ForkServerChild, WarmPool, WarmProcess

if TYPE_CHECKING:
    from fleet_runtime.database import Store
    from fleet_runtime.home import RuntimeHome

LOG = logging.getLogger("fleet_runtime.action_runners")

READY_TIMEOUT = 60.0
SPAWN_TIMEOUT = 60.0
# a warm action's process dies with its runner's zygote a moment before the engine hears that
# the runner itself died: how long to wait for that news before counting it a worker failure
DEATH_GRACE = 2.0
STOP_TIMEOUT = 10.0
STATE_FILE = "runner.json"
LOST_FILE = "lost.jsonl"
STATE_DIR = "state_dir"
PROCESS_RUNNERS = ("python-script", "local-shell-cmd", "local-shell-script")


class RunnerGone(RuntimeErrorBase):
    """The action runner died before it started the action's process."""


def hostname(index: int) -> str:
    return f"runner-{index}"


class RunnerChild(ForkServerChild):
    """A process without pipes started by a runner (a zygote), used like subprocess.Popen."""

    def kill(self) -> None:
        if self.pid and self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass


class RunnerProcess:
    """One action runner: its process, the processes it started for the engine, its state."""

    def __init__(self, index: int, directory: Path) -> None:
        self.index = index
        self.hostname = hostname(index)
        self.directory = directory
        self.state_dir = directory / STATE_DIR
        self.pid = 0
        self.proc: Optional[subprocess.Popen] = None
        self.ready = threading.Event()
        self.dead = threading.Event()
        self.finished = threading.Event()  # its death handled (lost executions recorded)
        self.closing = False
        self.lost_on_death = False  # it died without the engine stopping it
        self.running: Set[str] = set()  # executions dispatched here (ActionRunners' lock)
        self.warm_pool: Optional[WarmPool] = None
        self.on_death: Any = None
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, Tuple[Any, threading.Event, Dict[str, Any]]] = {}
        self._children: Dict[int, Any] = {}
        # PR_SET_PDEATHSIG of the runner fires when the thread that started it ends: this
        # thread starts it and reads its socket for as long as it lives
        self._thread = threading.Thread(target=self._loop, name=self.hostname, daemon=True)

    @property
    def alive(self) -> bool:
        return self.ready.is_set() and not self.dead.is_set()

    def info(self) -> Dict[str, Any]:
        """st2's runner_info of an execution that runs here (system_info.get_process_info)."""
        return {"hostname": self.hostname, "pid": self.pid}

    def start(self) -> None:
        self._thread.start()

    # ------------------------------------------------------------------ the reader thread
    def _loop(self) -> None:
        try:
            self._launch()
        except Exception as e:
            LOG.warning("%s did not start: %s", self.hostname, e)
            self._died()
            self.ready.set()
            return
        self.ready.set()
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(fork_server.MAX_MESSAGE)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                break
            self._receive(json.loads(data))
        self._died()

    def _launch(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p])
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", runner_host.MODULE, str(os.getpid()),
                 str(theirs.fileno()), str(self.index), str(self.directory)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                cwd=str(self.directory), pass_fds=[theirs.fileno()], start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        ours.settimeout(READY_TIMEOUT)
        try:
            hello = json.loads(ours.recv(fork_server.MAX_MESSAGE) or b"{}")
        finally:
            ours.settimeout(None)
        if hello.get("op") != "ready":
            raise RuntimeErrorBase(f"{self.hostname} exited while starting")
        self.pid = int(hello["pid"])

    def _receive(self, message: Dict[str, Any]) -> None:
        if "id" in message:
            with self._lock:
                pending = self._pending.get(int(message["id"]))
                if pending is None:
                    return
                proc, replied, box = pending
                if "pid" in message:
                    proc.pid = int(message["pid"])
                    self._children[proc.pid] = proc
                else:
                    box.update(message)
            replied.set()
        elif "pid" in message:
            with self._lock:
                proc = self._children.pop(int(message["pid"]), None)
            if proc is not None:
                proc._exit(int(message["code"]))

    def _died(self) -> None:
        """The runner's socket closed: the runner is gone, and what it ran with it."""
        with self._lock:
            self.lost_on_death = not self.closing
            self.dead.set()
            pending = list(self._pending.values())
            children = list(self._children.values())
            self._children.clear()
        for _, replied, _ in pending:
            replied.set()
        for proc in children:
            proc._exit(-9, died=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:  # closing: it did not leave on its own
                runner_host.kill_tree(self.proc.pid)
                self.proc.wait()
        if self._sock is not None:
            self._sock.close()
        if self.warm_pool is not None:
            self.warm_pool.close()
        try:
            if self.on_death is not None:
                self.on_death(self)
        finally:
            self.finished.set()

    # ------------------------------------------------------------------ starting processes
    def spawn(self, argv: Sequence[str], env: Optional[Dict[str, str]], cwd: Optional[str]
              ) -> WarmProcess:
        """An action's process started by this runner, used like Popen(text=True) with
        stdin/stdout/stderr pipes (fleet_runtime.runners)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        proc = WarmProcess(list(argv), stdin_w, stdout_r, stderr_r)
        try:
            self._request({"argv": list(argv), "env": dict(os.environ if env is None else env),
                           "cwd": cwd, "fds": [0, 1, 2]}, [stdin_r, stdout_w, stderr_w], proc)
        except BaseException:
            proc.close()
            raise
        return proc

    def launch(self, sock: socket.socket, env: Dict[str, str]) -> RunnerChild:
        """A zygote of this runner's WarmPool (fleet_runtime.warm.Launcher), its end of the
        socketpair as fd 3."""
        argv = [sys.executable, "-m", "fleet_runtime.zygote", str(self.pid), "3"]
        proc = RunnerChild(argv)
        self._request({"argv": argv, "env": env, "cwd": "/", "fds": [3]},
                      [os.dup(sock.fileno())], proc)
        return proc

    def _request(self, message: Dict[str, Any], fds: List[int], proc: Any) -> None:
        """Ask the runner to start `proc`'s process with `fds` (closed here); its pid is set
        on `proc`. Raises RunnerGone when the runner died, OSError as Popen does."""
        replied = threading.Event()
        box: Dict[str, Any] = {}
        request_id = next(self._ids)
        with self._lock:
            ok = self.alive and self._sock is not None
            if ok:
                self._pending[request_id] = (proc, replied, box)
        try:
            if ok:
                assert self._sock is not None
                payload = json.dumps({"op": "spawn", "id": request_id, **message}).encode()
                with self._send_lock:
                    socket.send_fds(self._sock, [payload], fds)
        except OSError:
            ok = False
        finally:
            for fd in fds:
                os.close(fd)
        if ok and not replied.wait(SPAWN_TIMEOUT):
            box.setdefault("strerror", f"{self.hostname} did not answer in {SPAWN_TIMEOUT} s")
        with self._lock:
            self._pending.pop(request_id, None)
        if proc.pid:
            return
        if not ok or self.dead.is_set():
            raise RunnerGone(f"{self.hostname} is dead")
        if box.get("errno"):
            raise OSError(int(box["errno"]), str(box.get("strerror")), box.get("filename"))
        raise RuntimeErrorBase(f"{self.hostname}: {box.get('strerror') or 'no process'}")

    # ------------------------------------------------------------------ stopping
    def kill(self) -> List[int]:
        """SIGKILL the runner and every process below it; returns their PIDs."""
        if not self.alive:
            return []
        pids = runner_host.kill_tree(self.pid)
        self.finished.wait(STOP_TIMEOUT)
        return pids

    def close(self) -> None:
        """Stop the runner (the engine stops): its zygotes, then the runner itself (end of
        file on its socket); its remaining children die with it (PR_SET_PDEATHSIG)."""
        self.closing = True
        if self.warm_pool is not None:
            self.warm_pool.close()
        sock = self._sock
        if sock is not None and not self.dead.is_set():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_TIMEOUT + 5)


class ActionRunners:
    """The engine's N action runners: start, dispatch, kill, stop."""

    def __init__(self, home: RuntimeHome, count: int,
                 warm_packs: Optional[Dict[str, List[str]]] = None,
                 preload: Optional[List[str]] = None, lost: Optional[Set[str]] = None
                 ) -> None:
        """`warm_packs` (fleet_runtime.warm.WarmPool's `packs`): each runner forks the packs'
        python actions from zygotes of its own; None: every python action runs cold. `lost`:
        the set the executions lost with a runner are added to."""
        self.home = home
        self.lost: Set[str] = lost if lost is not None else set()
        self._lock = threading.Lock()
        self.runners = [RunnerProcess(k, home.runner_dir(k)) for k in range(1, count + 1)]
        for runner in self.runners:
            runner.on_death = self._on_death
            runner.start()
        for runner in self.runners:
            if not runner.ready.wait(READY_TIMEOUT) or runner.dead.is_set():
                LOG.warning("%s is dead from the start", runner.hostname)
                continue
            if warm_packs is not None:
                runner.warm_pool = WarmPool(warm_packs, preload, launcher=runner.launch)
            _write_state(runner, {"index": runner.index, "hostname": runner.hostname,
                                  "pid": runner.pid, "engine_pid": os.getpid(),
                                  "started": time.time()})

    def runner(self, index: int) -> RunnerProcess:
        if not 1 <= index <= len(self.runners):
            raise NotFoundError(f"no action runner {index} (runners: {len(self.runners)})")
        return self.runners[index - 1]

    # ------------------------------------------------------------------ dispatch
    def acquire(self, ex_id: str) -> Optional[RunnerProcess]:
        """The runner that runs the execution: the live one with the fewest running
        executions, the lowest index on a tie; None when every runner is dead."""
        with self._lock:
            alive = [r for r in self.runners if r.alive]
            if not alive:
                return None
            chosen = min(alive, key=lambda r: (len(r.running), r.index))
            chosen.running.add(ex_id)
            return chosen

    def release(self, runner: RunnerProcess, ex_id: str) -> None:
        with self._lock:
            runner.running.discard(ex_id)

    @staticmethod
    def died_under(runner: RunnerProcess, worker_died: bool) -> bool:
        """Whether the runner died (not stopped with the engine) under the execution that
        ran on it: dead already, or its process died with a zygote of the runner and the
        runner's death follows within DEATH_GRACE."""
        if not runner.dead.is_set() and not (worker_died and runner.dead.wait(DEATH_GRACE)):
            return False
        return runner.lost_on_death

    # ------------------------------------------------------------------ kill, list, stop
    def kill(self, index: int) -> Dict[str, Any]:
        runner = self.runner(index)
        if not runner.alive:
            raise RuntimeErrorBase(f"{runner.hostname} is not running")
        pid = runner.pid
        pids = runner.kill()
        return {"index": index, "hostname": runner.hostname, "pid": pid, "killed": pids}

    def _on_death(self, runner: RunnerProcess) -> None:
        """A runner died without the engine stopping it: the executions dispatched to it are
        lost, noted in its `lost.jsonl` (a restarted engine leaves them `running`, as st2
        does)."""
        if not runner.lost_on_death:
            return
        with self._lock:
            lost = sorted(runner.running)
            self.lost.update(lost)
        LOG.warning("%s (pid %s) died; executions running on it stay running: %s",
                    runner.hostname, runner.pid, ", ".join(lost) or "none")
        if lost:
            now = time.time()
            lines = "".join(json.dumps({"execution": ex_id, "runner_pid": runner.pid,
                                        "ts": now}) + "\n" for ex_id in lost)
            with open(runner.directory / LOST_FILE, "a") as handle:
                handle.write(lines)
        state = _read_state(runner.directory)
        if state.get("pid") == runner.pid:
            state["died"] = time.time()
            _write_state(runner, state)

    def close(self) -> None:
        for runner in self.runners:
            runner.closing = True
        for runner in self.runners:
            runner.close()


# ---------------------------------------------------------------------------- files
def _write_state(runner: RunnerProcess, state: Dict[str, Any]) -> None:
    path = runner.directory / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _read_state(directory: Path) -> Dict[str, Any]:
    try:
        data = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lost_executions(home: RuntimeHome) -> Set[str]:
    """Every execution that was running on an action runner when it died (any runner
    directory of the home)."""
    found: Set[str] = set()
    root = home.path / "runners"
    if not root.is_dir():
        return found
    for directory in root.iterdir():
        try:
            text = (directory / LOST_FILE).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            try:
                found.add(str(json.loads(line)["execution"]))
            except (ValueError, KeyError, TypeError):
                continue
    return found


# ---------------------------------------------------------------------------- any process
def runner_status(home: RuntimeHome, store: Store) -> List[Dict[str, Any]]:
    """The home's action runners as any process sees them: index, hostname, pid, alive, the
    executions running on it (status `running`, its runner_info) and its directory."""
    running: Dict[Tuple[str, int], List[str]] = {}
    for row in store.find_executions("status=? AND runner_info IS NOT NULL", (RUNNING,)):
        info = row.get("runner_info") or {}
        if isinstance(info, dict):
            running.setdefault((str(info.get("hostname")), int(info.get("pid") or 0)),
                               []).append(row["id"])
    out = []
    for index in range(1, home.runners + 1):
        directory = home.runner_dir(index)
        state = _read_state(directory)
        pid = int(state.get("pid") or 0)
        alive = bool(pid) and "died" not in state and runner_host.is_runner(pid, str(directory))
        executions = running.get((hostname(index), pid), []) if pid else []
        out.append({"index": index, "hostname": hostname(index), "pid": pid or None,
                    "alive": alive, "running": len(executions), "executions": executions,
                    "directory": str(directory)})
    return out


def kill_runner(home: RuntimeHome, index: int) -> Dict[str, Any]:
    """SIGKILL action runner `index` of the home's engine and everything it started, from any
    process of the same user (the engine sees its socket close). Refuses a PID that is not
    that runner's process."""
    if home.runners < 2:
        raise RuntimeErrorBase("runners: 1: actions run as children of the engine process; set"
                               " `runners` to 2 or more for runners of their own")
    if not 1 <= index <= home.runners:
        raise NotFoundError(f"no action runner {index} (runners: {home.runners})")
    directory = home.runner_dir(index)
    state = _read_state(directory)
    pid = int(state.get("pid") or 0)
    if not pid or "died" in state or not runner_host.is_runner(pid, str(directory)):
        raise RuntimeErrorBase(f"{hostname(index)} is not running")
    pids = runner_host.kill_tree(pid)
    runner_host.wait_gone(pid, STOP_TIMEOUT)
    return {"index": index, "hostname": hostname(index), "pid": pid, "killed": pids}
