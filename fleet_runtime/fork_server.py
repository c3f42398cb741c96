"""The serve loop of the fork servers: the zygote (`fleet_runtime.zygote`) and the action
runner process (`fleet_runtime.runner_host`).

A fork server serves one AF_UNIX SOCK_SEQPACKET socket, one JSON document per message: a
request, with SCM_RIGHTS descriptors, in; its reply out; and {"pid", "code"} (Popen-style
returncode: -N for a signal) for every child it reaps. SIGCHLD wakes the loop through a
non-blocking pipe (signal.set_wakeup_fd); end of file on the socket ends it.

The zygote imports this module before it preloads a pack's modules: it imports only the
standard library and starts no thread and opens no file at import time.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from typing import Any, Dict, List, Optional

PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 1 << 20


def drain(fd: int) -> None:
    """Read a non-blocking wake-up pipe empty."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def pdeathsig() -> None:
    """Be SIGKILLed when the thread that started this process ends."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


def server_socket(argc: int) -> Optional[socket.socket]:
    """The start of a fork server's main, run as `python -m <module> <parent pid> <fd> ...`
    with `argc` words in sys.argv: it dies with the thread that started it, and ignores
    SIGINT. Its socket (fd `<fd>`), or None when the arguments are off or its parent is not
    `<parent pid>` (gone already)."""
    pdeathsig()
    if len(sys.argv) != argc or os.getppid() != int(sys.argv[1]):
        return None
    sock = socket.socket(fileno=int(sys.argv[2]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return sock


def send(sock: socket.socket, payload: Dict[str, Any]) -> None:
    sock.send(json.dumps(payload).encode())


def close_fds(fds: List[int]) -> None:
    for fd in fds:
        os.close(fd)


class ForkServer:
    """The serve loop: requests in (`_handle`), replies and exit codes of reaped children
    out. `serve` returns 0 once the socket closes or a send fails."""

    MAX_FDS = 0
    """How many descriptors one request carries at the most."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def serve(self) -> int:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w)
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        self._ready()
        while True:
            for fd, _ in poller.poll(1000):
                if fd == self.wake_r:
                    drain(self.wake_r)
                elif not self._message():
                    return 0
            if not self._reap():
                return 0

    def _ready(self) -> None:
        """Runs once SIGCHLD wakes the loop, before the first request is read."""

    def _handle(self, request: Dict[str, Any], fds: List[int]) -> Optional[Dict[str, Any]]:
        """Serve one request, closing `fds`: the reply to send, or None for no reply."""
        raise NotImplementedError

    def _has_children(self) -> bool:
        """Whether a child may be left to reap (a server that counts its children says
        False when it has none)."""
        return True

    def _reaped(self, pid: int) -> None:
        """Child `pid` was reaped (its exit code is sent next)."""

    def _message(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, self.MAX_FDS)
        except (ConnectionError, OSError):
            return False
        if not data:
            close_fds(fds)
            return False
        reply = self._handle(json.loads(data), fds)
        if reply is None:
            return True
        try:
            send(self.sock, reply)
        except OSError:
            return False
        return True

    def _reap(self) -> bool:
        while self._has_children():
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            self._reaped(pid)
            try:
                send(self.sock, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})
            except OSError:
                return False
        return True
