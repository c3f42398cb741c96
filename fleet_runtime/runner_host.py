"""An action runner process (st2's st2actionrunner on one machine), and killing one.

With the `runners` setting at 2 or more, the engine (`fleet_runtime.action_runners`) starts
one such process per runner as `python -m fleet_runtime.runner_host <engine pid> <fd> <index>
<runner dir>`, in a session of its own, with `<runner dir>` (`<home>/runners/<k>`) as its
working directory; `<fd>` is its end of an AF_UNIX SOCK_SEQPACKET socketpair. It is a spawn
server: every process of an action that runs on this runner is its child (a cold python
action, a local shell command or script) or its grandchild (a warm python action, forked by
one of this runner's zygotes, which are its children). It is a child subreaper
(PR_SET_CHILD_SUBREAPER), so whatever its children leave behind (a daemonised grandchild)
stays in its process tree.

Protocol (one JSON document per message):
- runner -> engine, first: {"op": "ready", "pid"};
- engine -> runner: {"op": "spawn", "id", "argv", "env", "cwd", "fds"} with SCM_RIGHTS
  descriptors, the i-th becoming the child's descriptor fds[i]; 0 and 1 not named are
  /dev/null, 2 not named is the runner's stderr. The child runs in its own session, umask
  077, PR_SET_PDEATHSIG, default signal dispositions, then execs argv (PATH searched);
- runner -> engine: {"id", "pid"} once it runs, or {"id", "errno", "strerror", "filename"}
  when exec (or the chdir to cwd) failed, as subprocess.Popen raises it; later
  {"pid", "code"} (Popen-style returncode: -N for a signal) for every child it reaped.

End of file on the socket ends the runner; PR_SET_PDEATHSIG ties it to the engine thread that
started it and its children to it. `kill_tree(pid)` stops (SIGSTOP) the runner and every
descendant until no new one appears, then SIGKILLs each of them by PID: what st2 sees of an
action runner machine that dies.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import time
from typing import Any, Dict, List, NoReturn, Optional, Set

from fleet_runtime.fork_server import ForkServer, close_fds, pdeathsig, send, server_socket

MODULE = "fleet_runtime.runner_host"
PR_SET_CHILD_SUBREAPER = 36
CHILD_UMASK = 0o077
# dispositions a Python process changes and an exec'd program must not inherit
_RESET_SIGNALS = ("SIGPIPE", "SIGXFSZ", "SIGXFZ", "SIGINT", "SIGCHLD", "SIGTERM", "SIGHUP")


def _subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    except Exception:
        pass


class RunnerHost(ForkServer):
    """The runner's serve loop: spawn requests in, pids and exit codes out. As a child
    subreaper it reaps, and reports, every process that becomes its child."""

    MAX_FDS = 8

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.pid = os.getpid()

    def _ready(self) -> None:
        send(self.sock, {"op": "ready", "pid": self.pid})

    def _handle(self, request: Dict[str, Any], fds: List[int]) -> Optional[Dict[str, Any]]:
        targets = [int(t) for t in request.get("fds") or []]
        if request.get("op") != "spawn" or len(targets) != len(fds):
            close_fds(fds)
            return None
        return self._spawn(request, fds, targets)

    def _spawn(self, request: Dict[str, Any], fds: List[int], targets: List[int]
               ) -> Dict[str, Any]:
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds + [err_r, err_w]:
                os.close(fd)
            return {"id": request.get("id"), "errno": e.errno, "strerror": e.strerror,
                    "filename": None}
        if pid == 0:
            self._child(request, fds, targets, err_w)
        os.close(err_w)
        for fd in fds:
            os.close(fd)
        chunks: List[bytes] = []
        while True:
            chunk = os.read(err_r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(err_r)
        if chunks:  # exec failed: the child wrote why and exits
            os.waitpid(pid, 0)
            failure = json.loads(b"".join(chunks))
            return {"id": request.get("id"), **failure}
        return {"id": request.get("id"), "pid": pid}

    def _child(self, request: Dict[str, Any], fds: List[int], targets: List[int],
               err_w: int) -> NoReturn:
        try:
            os.setsid()
            os.umask(CHILD_UMASK)
            pdeathsig()
            if os.getppid() != self.pid:
                os._exit(1)  # the runner is gone already
            signal.set_wakeup_fd(-1)
            for name in _RESET_SIGNALS:
                number = getattr(signal, name, None)
                if number is not None:
                    signal.signal(number, signal.SIG_DFL)
            base = max(targets + [2]) + 1
            err_w = fcntl.fcntl(err_w, fcntl.F_DUPFD_CLOEXEC, base)
            moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in fds]
            for fd, target in zip(moved, targets):
                os.dup2(fd, target, inheritable=True)
            null = os.open(os.devnull, os.O_RDWR)
            for std in (0, 1):
                if std not in targets:
                    os.dup2(null, std)
            keep = set(targets) | {0, 1, 2, err_w}
            for fd in _open_fds():
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            cwd = request.get("cwd")
            filename: Optional[str] = None
            try:
                if cwd:
                    filename = str(cwd)
                    os.chdir(filename)
                argv = [str(a) for a in request["argv"]]
                filename = argv[0]
                env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
                os.execvpe(argv[0], argv, env)
            except OSError as e:
                failure = {"errno": e.errno, "strerror": e.strerror, "filename": filename}
                os.write(err_w, json.dumps(failure).encode())
        except BaseException as e:
            try:
                os.write(err_w, json.dumps({"errno": 0, "strerror": f"{type(e).__name__}: {e}",
                                            "filename": None}).encode())
            except BaseException:
                pass
        os._exit(127)


def _open_fds() -> List[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


# ---------------------------------------------------------------------------- process trees
def _parents() -> Dict[int, int]:
    """pid -> parent pid of every process this user can read."""
    found: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry)] = int(fields[1])
    return found


def descendants(root: int) -> List[int]:
    """The processes below `root` (children, their children, ...)."""
    children: Dict[int, List[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    out: List[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int) -> List[int]:
    """SIGKILL `root` and every process below it, by PID: all of them are stopped first
    (SIGSTOP, again for any process that appears meanwhile), so none forks or is reaped
    away from the tree while it is walked. Returns the PIDs signalled."""
    stopped: Set[int] = set()
    while True:
        found = [root] + descendants(root)
        new = [pid for pid in found if pid not in stopped]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped.update(new)
    for pid in [root] + sorted(stopped - {root}):
        _signal(pid, signal.SIGKILL)
    return sorted(stopped)


def gone(pid: int) -> bool:
    """The process has exited (or is a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def is_runner(pid: int, directory: str) -> bool:
    """`pid` is a live runner process serving the runner directory `directory`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    if gone(pid):
        return False
    return MODULE in argv and os.path.abspath(directory) in argv


def main() -> int:
    sock = server_socket(5)
    if sock is None:
        return 1
    _subreaper()
    return RunnerHost(sock).serve()


if __name__ == "__main__":
    sys.exit(main())
