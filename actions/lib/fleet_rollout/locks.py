"""Locks that hold across processes: one per host (every step and restore of any rollout takes
it), and one per rollout for read-modify-write updates of its datastore keys.

StackStorm runs each action in its own process, possibly several at once for one host (a retry,
a rollback meeting a running step, two rollouts). flock(2) locks on files under the pack's
state_dir serialise them; the kernel drops a lock when its process dies, so a killed action
never leaves one behind. With several action runner machines, state_dir must be shared (it holds
the audit trail too) on a file system with working flock (local, NFSv4).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from typing import Callable, Iterator

from fleet_rollout.errors import HostError

LOCK_DIR = "locks"


class HostBusy(HostError):
    """Another step or restore holds the host's lock for longer than we may wait."""


def private_dir(path: str) -> str:
    """`path` as a directory only its owner can read (0700), created if missing: the pack's
    state_dir holds the audit trail, reports, locks and claims."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _lock_path(state_dir: str, name: str) -> str:
    directory = private_dir(os.path.join(state_dir, LOCK_DIR))
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]  # any name becomes a safe file name
    return os.path.join(directory, f"{digest}.lock")


@contextlib.contextmanager
def file_lock(state_dir: str, name: str, wait: float, what: str, host: str = "",
              sleep: Callable[[float], None] = time.sleep, poll: float = 0.2) -> Iterator[None]:
    """Hold the lock `name`; wait up to `wait` seconds for it, then raise HostBusy."""
    path = _lock_path(state_dir, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise HostBusy(f"{what}: busy (another step or restore of this host has "
                                   f"held its lock for over {wait:.0f}s); not started",
                                   host or None) from None
                sleep(poll)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def host_lock(state_dir: str, host: str, wait: float, what: str,
              sleep: Callable[[float], None] = time.sleep) -> contextlib.AbstractContextManager:
    """The host's lock, shared by every rollout (two rollouts never work on a host at once)."""
    return file_lock(state_dir, f"host:{host}", wait, what, host, sleep)


def rollout_lock(state_dir: str, rollout_id: str, part: str,
                 wait: float = 120.0) -> contextlib.AbstractContextManager:
    """A rollout's lock for read-modify-write of one of its datastore keys (meta, batch ...)."""
    return file_lock(state_dir, f"rollout:{rollout_id}:{part}", wait,
                     f"rollout {rollout_id} {part} update")
