"""Warm python workers, engine side: one fork server (fleet_runtime.zygote) per pack.

`WarmPool.spawn(pack_path, cwd)` returns a `WarmProcess` (Popen-like: `pid`, `poll()`,
`wait()`, `communicate(input, timeout)`, `returncode`) for one python-script execution, a
child forked by the pack's zygote, or None when the pack runs cold (then the runner starts
`python -m fleet_runtime.python_wrapper`, as st2 does). The child runs in its own session
(`os.killpg(pid, SIGKILL)` kills it and its children), reads the spec on stdin, and its
stdout/stderr are pipes of this process, as with Popen.

- Zygotes are started from the pool's own thread (PR_SET_PDEATHSIG fires when the *thread*
  that started a process ends), which also reads every zygote socket.
- Before each spawn the pack's `*.py`/`*.so` under `actions/`, this process's environment and
  (at most every 2 s) the files of the preloaded modules are fingerprinted: a change starts a
  new zygote generation for new executions; the old one serves its running children, then
  exits.
- A zygote that dies fails its running executions ("python worker process died", exit -9);
  the next spawn starts a new one; after 3 failures in a row the pack runs cold. A preloaded
  module that starts a thread (or keeps a file open) is left out of the preload (imported by
  each execution itself); after more than 3 such modules the pack runs cold.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import locale
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from fleet_runtime.fork_server import drain
from fleet_runtime.paths import REPO_ROOT

LOG = logging.getLogger("fleet_runtime.warm")

MAX_FAILURES = 3
MAX_TAINTED = 3
START_TIMEOUT = 180.0
FORK_TIMEOUT = 60.0
EXTERNAL_CHECK_INTERVAL = 2.0
IDLE_TIMEOUT = 600.0
WORKER_DIED = "python worker process died"
MAX_MESSAGE = 1 << 18

Launcher = Callable[[socket.socket, Dict[str, str]], Any]
"""Starts a zygote given its end of the socketpair and its environment: a Popen-like process
(`pid`, `poll()`, `wait(timeout)`, `kill()`) that runs `python -m fleet_runtime.zygote <its
parent's pid> <fd>` (an action runner process: fleet_runtime.action_runners)."""


class ForkServerChild:
    """A process a fork server (fleet_runtime.fork_server) started for this process, used
    like subprocess.Popen: `pid` is set from the server's reply, `_exit` from its exit code
    (or when the server died: `worker_died`)."""

    def __init__(self, args: List[str]) -> None:
        self.args = args
        self.pid = 0
        self.returncode: Optional[int] = None
        self.worker_died = False
        self._exited = threading.Event()

    def _exit(self, code: int, died: bool = False) -> None:
        if self.returncode is None:
            self.returncode = code
            self.worker_died = died
        self._exited.set()

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode


class WarmProcess(ForkServerChild):
    """A python action process forked by a zygote, used like subprocess.Popen(text=True)."""

    def __init__(self, args: List[str], stdin_fd: int, stdout_fd: int, stderr_fd: int) -> None:
        super().__init__(args)
        self._stdin: Optional[int] = stdin_fd
        self._outputs: Dict[int, bytearray] = {stdout_fd: bytearray(), stderr_fd: bytearray()}
        self._stdout_fd, self._stderr_fd = stdout_fd, stderr_fd
        self._open = {stdout_fd, stderr_fd}
        self._input: Optional[memoryview] = None
        self._input_given = False
        for fd in (stdin_fd, stdout_fd, stderr_fd):
            os.set_blocking(fd, False)

    def _close_stdin(self) -> None:
        if self._stdin is not None:
            os.close(self._stdin)
            self._stdin = None
        self._input = None

    def communicate(self, input: Optional[str] = None, timeout: Optional[float] = None
                    ) -> Tuple[str, str]:
        deadline = time.monotonic() + timeout if timeout is not None else None
        if not self._input_given:
            self._input_given = True
            if input:
                self._input = memoryview(input.encode(_encoding()))
            else:
                self._close_stdin()
        while self._open or self._stdin is not None:
            poller = select.poll()
            for fd in self._open:
                poller.register(fd, select.POLLIN)
            if self._stdin is not None:
                poller.register(self._stdin, select.POLLOUT)
            wait_ms = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                wait_ms = int(left * 1000) + 1
            for fd, _event in poller.poll(wait_ms):
                if fd == self._stdin:
                    self._write_input()
                else:
                    self._read(fd)
        left_wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._exited.wait(left_wait):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return (_text(bytes(self._outputs[self._stdout_fd])),
                _text(bytes(self._outputs[self._stderr_fd])))

    def _write_input(self) -> None:
        assert self._stdin is not None
        if not self._input:
            self._close_stdin()
            return
        try:
            written = os.write(self._stdin, self._input[:65536])
        except BlockingIOError:
            return
        except OSError:  # the child exited without reading (EPIPE)
            self._close_stdin()
            return
        self._input = self._input[written:]
        if not self._input:
            self._close_stdin()

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._outputs[fd] += chunk
            return
        os.close(fd)
        self._open.discard(fd)

    def close(self) -> None:
        self._close_stdin()
        for fd in list(self._open):
            os.close(fd)
        self._open.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _encoding() -> str:
    return locale.getpreferredencoding(False)


def _text(data: bytes) -> str:
    """What Popen(text=True).communicate() returns: decoded, universal newlines."""
    return data.decode(_encoding()).replace("\r\n", "\n").replace("\r", "\n")


class _Zygote:
    """One zygote process (a generation of a pack's warm workers)."""

    def __init__(self, pack: _PackState, proc: subprocess.Popen, sock: socket.socket,
                 fingerprint: str) -> None:
        self.pack = pack
        self.proc = proc
        self.sock = sock
        self.fingerprint = fingerprint
        self.ready = threading.Event()
        self.outcome: Dict[str, Any] = {}
        self.dead = False
        self.retired = False
        self.children: Dict[int, WarmProcess] = {}
        self.pending: Dict[int, Tuple[WarmProcess, threading.Event]] = {}
        self.files: List[str] = []
        self.external_fp = ""
        self.external_checked = 0.0
        self.last_used = time.monotonic()
        self.send_lock = threading.Lock()


class _PackState:
    def __init__(self, path: str, entry_points: List[str]) -> None:
        self.path = path
        self.entry_points = entry_points
        self.current: Optional[_Zygote] = None
        self.failures = 0
        self.cold_reason: Optional[str] = None
        self.excluded: List[str] = []
        self.generation = 0
        self.lock = threading.Lock()


class WarmPool:
    """The zygotes of the packs' python actions (see the module docstring)."""

    def __init__(self, packs: Dict[str, List[str]], preload: Optional[List[str]] = None,
                 idle_timeout: float = IDLE_TIMEOUT, launcher: Optional[Launcher] = None
                 ) -> None:
        """`packs`: pack directory -> the absolute entry points of its python-script
        actions (a pack not listed runs cold); `preload`: more module names to import;
        `launcher`: who starts the zygotes (default: this process, as its children)."""
        self._launcher = launcher
        self._packs = {os.path.abspath(p): _PackState(os.path.abspath(p), list(e))
                       for p, e in packs.items()}
        self._preload = list(preload or [])
        self._idle_timeout = idle_timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._zygotes: Dict[int, _Zygote] = {}  # by socket fd, read by the pool thread
        self._starts: queue.Queue = queue.Queue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="warm-pool", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ engine API
    def spawn(self, pack_path: str, cwd: str) -> Optional[WarmProcess]:
        """A forked child for one execution, or None: run it cold."""
        state = self._packs.get(os.path.abspath(pack_path))
        if state is None or self._closed or not self._thread.is_alive():
            return None
        for _ in range(2):
            with state.lock:
                if state.cold_reason is not None:
                    return None
                zygote = self._current(state)
                if zygote is None:
                    return None
                zygote.last_used = time.monotonic()
            proc = self._fork(zygote, cwd)
            if proc is not None or not zygote.retired:
                return proc
        return None

    def info(self, pack_path: str) -> Dict[str, Any]:
        """What the pool knows of a pack (tests, diagnostics)."""
        state = self._packs.get(os.path.abspath(pack_path))
        if state is None:
            return {"warm": False, "cold_reason": "not a warm pack"}
        zygote = state.current
        return {
            "warm": state.cold_reason is None,
            "cold_reason": state.cold_reason,
            "excluded": list(state.excluded),
            "generation": state.generation,
            "failures": state.failures,
            "zygote_pid": zygote.proc.pid if zygote is not None and not zygote.dead else None,
            "modules": zygote.outcome.get("modules") if zygote is not None else None,
        }

    def close(self) -> None:
        """Stop every zygote (their children die with them: PR_SET_PDEATHSIG)."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ generations
    def _current(self, state: _PackState) -> Optional[_Zygote]:
        fingerprint = self._fingerprint(state)
        zygote = state.current
        if zygote is not None and (zygote.dead or zygote.retired
                                   or zygote.fingerprint != fingerprint
                                   or self._externals_changed(zygote)):
            self._retire(zygote)
            zygote = state.current = None
        while zygote is None:
            zygote, again = self._start(state, fingerprint)
            if zygote is None and not again:
                return None
            if again:  # a tainted preload: try again without that module
                fingerprint = self._fingerprint(state)
        state.current = zygote
        return zygote

    def _fingerprint(self, state: _PackState) -> str:
        digest = hashlib.sha1()
        actions = os.path.join(state.path, "actions")
        for folder, dirs, files in os.walk(actions):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".so")):
                    path = os.path.join(folder, name)
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    digest.update(f"{path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
        for key, value in sorted(os.environ.items()):
            digest.update(f"{key}={value}\n".encode())
        digest.update(" ".join(state.excluded).encode())
        return digest.hexdigest()

    @staticmethod
    def _files_fingerprint(files: List[str]) -> str:
        digest = hashlib.sha1()
        for path in files:
            try:
                st = os.stat(path)
                digest.update(f"{path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
            except OSError:
                digest.update(f"{path}\0-\n".encode())
        return digest.hexdigest()

    def _externals_changed(self, zygote: _Zygote) -> bool:
        now = time.monotonic()
        if now - zygote.external_checked < EXTERNAL_CHECK_INTERVAL:
            return False
        zygote.external_checked = now
        return self._files_fingerprint(zygote.files) != zygote.external_fp

    def _retire(self, zygote: _Zygote) -> None:
        """No new forks; the zygote ends once its running children are reported."""
        with self._lock:
            zygote.retired = True
        self._wake()

    def _start(self, state: _PackState, fingerprint: str) -> Tuple[Optional[_Zygote], bool]:
        """Start a zygote for the pack and wait until it preloaded: (zygote or None, whether
        to try again)."""
        done = threading.Event()
        box: Dict[str, Any] = {}
        self._starts.put((state, fingerprint, done, box))
        self._wake()
        if not done.wait(START_TIMEOUT):
            return self._failed(state, "the warm pool thread did not start the zygote")
        zygote: Optional[_Zygote] = box.get("zygote")
        if zygote is None:
            return self._failed(state, str(box.get("error") or "could not start"))
        if not zygote.ready.wait(START_TIMEOUT):
            zygote.outcome = {"op": "error", "error": "preload timed out"}
            self._kill(zygote)
        outcome = zygote.outcome
        if outcome.get("op") == "ready":
            packed = str(outcome.get("files_z") or "")
            files = zlib.decompress(base64.b64decode(packed)) if packed else b"[]"
            zygote.files = [str(f) for f in json.loads(files)]
            zygote.external_fp = self._files_fingerprint(zygote.files)
            zygote.external_checked = time.monotonic()
            state.generation += 1
            return zygote, False
        self._retire(zygote)
        if outcome.get("op") == "tainted":
            module = str(outcome.get("module"))
            LOG.warning("warm workers of %s: not preloading %s (%s)", state.path, module,
                        outcome.get("reason"))
            state.excluded.append(module)
            if len(state.excluded) > MAX_TAINTED:
                state.cold_reason = (f"preloading starts threads or keeps files open"
                                     f" ({', '.join(state.excluded)})")
                LOG.warning("warm workers of %s: running cold: %s", state.path,
                            state.cold_reason)
                return None, False
            return None, True
        return self._failed(state, str(outcome.get("error") or "the zygote died while starting"))

    def _failed(self, state: _PackState, error: str) -> Tuple[None, bool]:
        state.failures += 1
        LOG.warning("warm workers of %s: zygote failed (%s)", state.path, error)
        if state.failures >= MAX_FAILURES:
            state.cold_reason = f"the zygote failed {state.failures} times in a row: {error}"
            LOG.warning("warm workers of %s: running cold: %s", state.path, state.cold_reason)
        return None, False

    def _fork(self, zygote: _Zygote, cwd: str) -> Optional[WarmProcess]:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        proc = WarmProcess([sys.executable, "-m", "fleet_runtime.zygote", cwd],
                           stdin_w, stdout_r, stderr_r)
        replied = threading.Event()
        request_id = next(self._ids)
        with self._lock:
            if zygote.dead or zygote.retired:
                ok = False
            else:
                zygote.pending[request_id] = (proc, replied)
                ok = True
        try:
            if ok:
                message = json.dumps({"op": "fork", "id": request_id}).encode()
                with zygote.send_lock:
                    socket.send_fds(zygote.sock, [message], [stdin_r, stdout_w, stderr_w])
        except OSError:
            ok = False
        finally:
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        if ok and not replied.wait(FORK_TIMEOUT):
            ok = False
        with self._lock:
            zygote.pending.pop(request_id, None)
        if not ok or not proc.pid:
            # No child runs this execution (the spec was not written): run it cold.
            proc.close()
            return None
        return proc

    # ------------------------------------------------------------------ pool thread
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        try:
            while not self._closed:
                poller = select.poll()
                poller.register(self._wake_r, select.POLLIN)
                with self._lock:
                    zygotes = list(self._zygotes.items())
                for fd, _ in zygotes:
                    poller.register(fd, select.POLLIN)
                try:
                    self._step(poller)
                except Exception:  # pragma: no cover - defensive: keep serving
                    LOG.exception("warm pool thread")
                    time.sleep(0.1)
        finally:
            with self._lock:
                zygotes = list(self._zygotes.values())
            for zygote in zygotes:
                self._kill(zygote)
                self._died(zygote)
                self._remove(zygote)
            while not self._starts.empty():
                _, _, done, box = self._starts.get_nowait()
                box["error"] = "the warm pool is closed"
                done.set()

    def _step(self, poller: Any) -> None:
        for fd, _ in poller.poll(1000):
            if fd == self._wake_r:
                drain(self._wake_r)
            else:
                zygote = self._zygotes.get(fd)
                if zygote is not None:
                    self._receive(zygote)
        self._launch_requested()
        self._housekeeping()

    def _launch_requested(self) -> None:
        while True:
            try:
                state, fingerprint, done, box = self._starts.get_nowait()
            except queue.Empty:
                return
            try:
                box["zygote"] = self._launch(state, fingerprint)
            except Exception as e:
                box["error"] = f"{type(e).__name__}: {e}"
            done.set()

    def _launch(self, state: _PackState, fingerprint: str) -> _Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = os.environ.copy()
        runtime_root = str(REPO_ROOT)  # where fleet_runtime is importable from
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in [runtime_root, env.get("PYTHONPATH", "")] if p])
        try:
            if self._launcher is not None:
                proc = self._launcher(theirs, env)
            else:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "fleet_runtime.zygote", str(os.getpid()),
                     str(theirs.fileno())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, cwd="/",
                    pass_fds=[theirs.fileno()], start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        zygote = _Zygote(state, proc, ours, fingerprint)
        action_dirs = sorted({os.path.dirname(e) for e in state.entry_points})
        config = {"pack_path": state.path, "pack_lib": os.path.join(state.path, "actions", "lib"),
                  "entry_points": state.entry_points, "action_dirs": action_dirs,
                  "preload": self._preload, "exclude": state.excluded}
        try:
            ours.send(json.dumps(config).encode())
        except OSError:
            pass
        with self._lock:
            self._zygotes[ours.fileno()] = zygote
        return zygote

    def _receive(self, zygote: _Zygote) -> None:
        try:
            data = zygote.sock.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._died(zygote)
            self._remove(zygote)
            return
        message = json.loads(data)
        if "op" in message:
            zygote.outcome = message
            zygote.ready.set()
        elif "id" in message:
            with self._lock:
                pending = zygote.pending.get(int(message["id"]))
                if pending is not None:
                    proc, replied = pending
                    proc.pid = int(message["pid"])
                    zygote.children[proc.pid] = proc
                    replied.set()
        elif "pid" in message:
            with self._lock:
                proc = zygote.children.pop(int(message["pid"]), None)
            if proc is not None:
                proc._exit(int(message["code"]))
                zygote.pack.failures = 0  # this zygote works

    def _died(self, zygote: _Zygote) -> None:
        """The zygote's socket closed: its children died with it (PR_SET_PDEATHSIG)."""
        with self._lock:
            was_dead = zygote.dead
            zygote.dead = True
            children = list(zygote.children.values())
            zygote.children.clear()
            pending = list(zygote.pending.values())
        for proc in children:
            # the child died with the zygote; what it started (holding its stdout) goes too,
            # as on a timeout or cancel: the child's session is its process group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc._exit(-9, died=True)
        for _, replied in pending:
            replied.set()
        if not zygote.ready.is_set():
            zygote.outcome = zygote.outcome or {"op": "error",
                                                "error": "the zygote died while starting"}
            zygote.ready.set()
        elif (not was_dead and not zygote.retired and not self._closed
              and zygote.outcome.get("op") == "ready"):
            zygote.pack.failures += 1
            LOG.warning("warm workers of %s: the zygote (pid %s) died", zygote.pack.path,
                        zygote.proc.pid)
            if zygote.pack.failures >= MAX_FAILURES:
                zygote.pack.cold_reason = (f"the zygote died {zygote.pack.failures} times"
                                           " in a row")

    def _remove(self, zygote: _Zygote) -> None:
        with self._lock:
            self._zygotes.pop(zygote.sock.fileno(), None)
        try:
            zygote.sock.close()
        except OSError:
            pass
        try:
            zygote.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill(zygote)
            zygote.proc.wait()

    @staticmethod
    def _kill(zygote: _Zygote) -> None:
        if zygote.proc.poll() is None:
            try:
                zygote.proc.kill()
            except OSError:
                pass

    def _housekeeping(self) -> None:
        now = time.monotonic()
        with self._lock:
            zygotes = list(self._zygotes.values())
        for zygote in zygotes:
            idle = (not zygote.children and not zygote.pending
                    and now - zygote.last_used > self._idle_timeout)
            if idle and zygote.ready.is_set() and not zygote.retired:
                with self._lock:
                    zygote.retired = True
            if zygote.retired and not zygote.children and not zygote.pending:
                with self._lock:
                    if zygote.pack.current is zygote:
                        zygote.pack.current = None
                zygote.dead = True
                self._remove(zygote)
