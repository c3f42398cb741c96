"""The fork server ("zygote") of warm python workers: one per pack and generation.

Started by `fleet_runtime.warm.WarmPool` as `python -m fleet_runtime.zygote <engine pid> <fd>`
with the environment and PYTHONPATH of the cold python runner; `<fd>` is its end of an
AF_UNIX SOCK_SEQPACKET socketpair. Protocol (one JSON document per message):

- engine -> zygote, first message: {"pack_path", "pack_lib", "entry_points", "action_dirs",
  "preload", "exclude"};
- zygote -> engine: {"op": "ready", "pid", "modules", "files_z"} once the preload is done, or
  {"op": "tainted", "module", "reason"} (that import started a thread or kept a file open; the
  engine starts a new zygote without it), or {"op": "error", "error"};
- engine -> zygote: {"op": "fork", "id"} with SCM_RIGHTS [stdin, stdout, stderr] of the child;
- zygote -> engine: {"id", "pid"} once the child runs in its own session, later
  {"pid", "code"} (Popen-style returncode: -N for a signal) when the zygote reaped it.

The zygote never sees an execution's config, parameters, token or environment: the engine
writes the spec (python_wrapper's stdin line, with `env` and `cwd`) to the child's stdin.
End of file on the socket ends the zygote. PR_SET_PDEATHSIG ties the zygote to the engine's
pool thread and every child to the zygote.
"""
from __future__ import annotations

import atexit
import base64
import gc
import importlib
import importlib.util
import io
import json
import os
import select
import signal
import socket
import sys
import traceback
import zlib
from typing import Any, Dict, List, NoReturn, Optional, Set, Tuple

from fleet_runtime.fork_server import (
    MAX_MESSAGE,
    ForkServer,
    close_fds,
    pdeathsig,
    send,
    server_socket,
)

SCOUT_TIMEOUT = 120.0
CHILD_UMASK = 0o077
ALWAYS_PRELOAD = (
    "fleet_runtime.python_wrapper",
    "fleet_runtime.datastore",
    "cryptography.fernet",
    "st2common.runners.base_action",
)


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def _fds() -> Set[str]:
    return set(os.listdir("/proc/self/fd"))


def _top_level_names(action_dirs: List[str]) -> Set[str]:
    """Modules and packages directly in an action directory: the child puts that directory
    first on sys.path, so a preloaded module of that name could be the wrong one."""
    names: Set[str] = set()
    for directory in action_dirs:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(directory, entry)
            if entry.endswith(".py") or entry.endswith(".so"):
                names.add(entry.split(".", 1)[0])
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                names.add(entry)
    return names


def _scout(entry_points: List[str]) -> List[str]:
    """Names of the modules the pack's python entry points import (in a forked process, so
    nothing of them stays here)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the scout
        try:
            os.close(read_fd)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            from fleet_runtime.python_wrapper import action_module_name

            for entry in entry_points:
                directory = os.path.dirname(entry)
                sys.path.insert(0, directory)
                try:
                    spec = importlib.util.spec_from_file_location(
                        action_module_name(entry), entry)
                    if spec is not None and spec.loader is not None:
                        module = importlib.util.module_from_spec(spec)
                        sys.modules[spec.name] = module
                        spec.loader.exec_module(module)
                except BaseException:
                    pass
                finally:
                    if sys.path and sys.path[0] == directory:
                        sys.path.pop(0)
            data = json.dumps(list(sys.modules)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks: List[bytes] = []
    while True:
        ready, _, _ = select.select([read_fd], [], [], SCOUT_TIMEOUT)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    try:
        names = json.loads(b"".join(chunks) or b"[]")
    except ValueError:
        return []
    return [str(n) for n in names]


def _excluded(name: str, shadowed: Set[str], exclude: List[str]) -> bool:
    if name == "__main__" or name.startswith("st2_action_"):
        return True
    if name.split(".", 1)[0] in shadowed:
        return True
    return any(name == x or name.startswith(x + ".") for x in exclude)


def preload(sock: socket.socket, cfg: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """Import what the pack's actions use. Returns (module, reason) when an import started a
    thread or left a file descriptor open (this zygote is then unusable)."""
    from fleet_runtime import python_wrapper

    python_wrapper.setup_paths({"sys_path": [cfg["pack_lib"]]})
    tasks, fds = _tasks(), _fds()
    shadowed = _top_level_names(cfg.get("action_dirs") or [])
    exclude = [str(x) for x in cfg.get("exclude") or []]
    names = list(ALWAYS_PRELOAD) + [str(x) for x in cfg.get("preload") or []]
    names += _scout([str(x) for x in cfg.get("entry_points") or []])
    for name in names:
        if name in sys.modules or _excluded(name, shadowed, exclude):
            continue
        try:
            importlib.import_module(name)
        except BaseException:
            continue
        now_tasks, now_fds = _tasks(), _fds()
        if now_tasks != tasks:
            return name, f"importing it started {now_tasks - tasks} thread(s)"
        if now_fds != fds:
            return name, "importing it left a file descriptor open"
    return None


def _module_files(pack_path: str) -> List[str]:
    """Files of the preloaded modules outside the pack (a pip upgrade changes them)."""
    prefix = os.path.join(os.path.abspath(pack_path), "")
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and not os.path.abspath(path).startswith(prefix):
            files.add(path)
    return sorted(files)


class Zygote(ForkServer):
    """The serve loop after the preload: fork requests in, pids and exit codes out."""

    MAX_FDS = 3

    def __init__(self, sock: socket.socket, base_path: List[str], pack_lib: str) -> None:
        super().__init__(sock)
        self.base_path = base_path
        self.pack_lib = pack_lib
        self.children: Set[int] = set()

    def _handle(self, request: Dict[str, Any], fds: List[int]) -> Optional[Dict[str, Any]]:
        if request.get("op") != "fork" or len(fds) != 3:
            close_fds(fds)
            return None
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            self._child(fds, ready_r, ready_w)
        os.close(ready_w)
        close_fds(fds)
        os.read(ready_r, 1)  # the child runs in its own session (killpg(pid) reaches it)
        os.close(ready_r)
        self.children.add(pid)
        return {"id": request.get("id"), "pid": pid}

    def _has_children(self) -> bool:
        return bool(self.children)

    def _reaped(self, pid: int) -> None:
        self.children.discard(pid)

    def _child(self, fds: List[int], ready_r: int, ready_w: int) -> NoReturn:
        code = 1
        try:
            zygote_pid = os.getppid()
            os.setsid()
            os.umask(CHILD_UMASK)
            pdeathsig()
            if os.getppid() != zygote_pid:
                os._exit(1)
            os.close(ready_r)
            os.write(ready_w, b"1")
            os.close(ready_w)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            self.sock.detach()
            os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
            _std_streams()
            code = run_child(self.base_path, self.pack_lib)
        except BaseException:
            try:
                traceback.print_exc()
            except BaseException:
                pass
        finally:
            os._exit(code)


def _std_streams() -> None:
    """stdin/stdout/stderr on the new fds 0/1/2, as `python -u` has them."""
    encoding = sys.stdout.encoding if sys.stdout is not None else "utf-8"
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                             encoding=encoding, errors="strict")
    stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding,
                              errors="strict", write_through=True)
    stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                              errors="backslashreplace", write_through=True)
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = stdin, stdout, stderr


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:
        pass
    return 1


def run_child(base_path: List[str], pack_lib: str) -> int:
    """One execution in a forked child: read the spec, run the action, finish like an
    interpreter exit (threads joined, atexit handlers, logging flushed) but skip finalising
    the preloaded modules."""
    import logging
    import threading

    from fleet_runtime import python_wrapper

    try:
        spec = json.loads(sys.stdin.readline())
        cwd = str(spec.get("cwd") or os.getcwd())
        # what `python -m` in cwd has; child_main puts the spec's sys_path in front
        sys.path[:] = [cwd] + [p for p in base_path if p != pack_lib]
        sys.argv = [python_wrapper.__file__]
        code = python_wrapper.child_main(spec)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        logging.shutdown()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return code


def main() -> int:
    sock = server_socket(3)
    if sock is None:
        return 1
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)  # `-m` put the zygote's cwd first; each child gets its own
    base_path = list(sys.path)
    try:
        cfg = json.loads(sock.recv(MAX_MESSAGE) or b"{}")
        pack_lib = str(cfg.get("pack_lib") or "")
        if not pack_lib:
            return 1
        tainted = preload(sock, cfg)
        if tainted is not None:
            send(sock, {"op": "tainted", "module": tainted[0], "reason": tainted[1]})
            return 0
        files = _module_files(str(cfg.get("pack_path") or pack_lib))
        gc.collect()
        gc.freeze()
        packed = base64.b64encode(zlib.compress(json.dumps(files).encode())).decode()
        send(sock, {"op": "ready", "pid": os.getpid(), "modules": len(sys.modules),
                    "files_z": packed})
    except OSError:
        return 1
    except Exception as e:
        try:
            send(sock, {"op": "error", "error": f"{type(e).__name__}: {e}"})
        except OSError:
            pass
        return 1
    return Zygote(sock, base_path, pack_lib).serve()


if __name__ == "__main__":
    sys.exit(main())
