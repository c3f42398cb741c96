"""One ansible-playbook process: its command line, environment, time limit and the per-host
results its callback plugin writes.

The run's stdout callback is the pack's `fleet_events` plugin (ansible_plugins/callback): one
JSON line per host result to a file in the run's private directory, read back when the process
has ended. Nothing goes through a terminal: no pty to poll, no event per line of output to
decode and store (ansible-runner's way, which cost the controller a quarter of its CPU in a
rollout).

Time limit and cancel: the run is a process group of its own, started by a small `sh` that
the caller's end reaches as SIGTERM (PR_SET_PDEATHSIG) and that passes SIGTERM on to the whole
group: ansible-playbook, and its workers and their commands where they share its group
(ansible-core 2.15). Workers in sessions of their own (ansible-core 2.19) are ended by
ansible-playbook itself when it gets SIGTERM, not when it is killed outright. So an action
killed with its process group (the embedded runtime's cancel and timeout) takes its whole run
with it on either. A run past its time gets SIGTERM on its whole process tree, SIGKILL 10 s
later.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

CALLBACK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ansible_plugins",
                            "callback")
CALLBACK_NAME = "fleet_events"
EVENTS_ENV = "FLEET_ROLLOUT_EVENTS"
KILL_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of a run past its time
POLL = 0.1  # seconds between looks at a run's process tree while it ends
GONE_WAIT = 5.0  # seconds at most for the killed processes to exit (a loaded machine is slow)
STDERR_TAIL = 2000  # characters of ansible-playbook's own stderr kept for errors
# the run's first process: ansible-playbook ("$@") in the background (a trapped signal ends the
# shell's wait, not a foreground command's); SIGTERM to the shell goes to the run's whole
# process group, the shell then ignores it and waits for ansible-playbook to end; its exit
# status is ansible-playbook's
GROUP_SHELL = ("trap 'trap \"\" TERM; kill -TERM 0' TERM\n"
               "\"$@\" &\n"
               "pid=$!\n"
               "while :; do\n"
               "  wait \"$pid\"; rc=$?\n"
               "  kill -0 \"$pid\" 2>/dev/null || exit \"$rc\"\n"
               "done\n")


@dataclass
class PlaybookProcess:
    """How one ansible-playbook run ended."""
    status: str  # successful | failed | timeout
    rc: Optional[int]
    events: List[Dict[str, Any]] = field(default_factory=list)
    stderr: str = ""  # the tail of what ansible-playbook itself said (errors, warnings)


def callback_env(events_path: str, verbose: bool = False) -> Dict[str, str]:
    """The variables that make `fleet_events` the run's stdout callback, writing to
    `events_path` (and echoing a line per result when `verbose`)."""
    # the user's own callback plugin dirs (ANSIBLE_CALLBACK_PLUGINS) stay searched after ours
    theirs = os.environ.get("ANSIBLE_CALLBACK_PLUGINS")
    env = {
        "ANSIBLE_CALLBACK_PLUGINS": CALLBACK_DIR + (os.pathsep + theirs if theirs else ""),
        "ANSIBLE_STDOUT_CALLBACK": CALLBACK_NAME,
        EVENTS_ENV: events_path,
    }
    if verbose:
        env["FLEET_ROLLOUT_EVENTS_ECHO"] = "1"
    return env


def command(binary: str, playbooks: List[str], inventory: str, limit: List[str],
            extravars_file: str, forks: int, private_key: Optional[str] = None) -> List[str]:
    """ansible-playbook's argv (limit: plain host names, already checked; the playbooks run
    one after the other)."""
    argv = [binary, "-i", inventory, "--limit", ",".join(limit), "-e", "@" + extravars_file,
            "--forks", str(max(1, forks))]
    if private_key:
        argv += ["--private-key", private_key]
    return argv + list(playbooks)


def _own_group_ended_with_caller() -> None:
    os.setpgrp()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the tree kill on timeout still holds
        pass


def run(argv: List[str], env: Dict[str, str], cwd: str, timeout: float,
        verbose: bool = False) -> PlaybookProcess:
    """Run ansible-playbook `argv` with `env` (its callback_env included) in `cwd`; wait at
    most `timeout` seconds. The events are read from the file env[EVENTS_ENV] names."""
    events_path = env[EVENTS_ENV]
    stderr_path = os.path.join(cwd, "ansible-playbook.stderr")
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(["/bin/sh", "-c", GROUP_SHELL, "fleet-ansible-run", *argv],
                                env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=None if verbose else subprocess.DEVNULL,
                                stderr=stderr, preexec_fn=_own_group_ended_with_caller)
        try:
            rc: Optional[int] = proc.wait(timeout=timeout)
            status = "successful" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            status, rc = "timeout", None
            _end(proc)
    return PlaybookProcess(status, rc, read_events(events_path), _tail(stderr_path))


def _end(proc: Any) -> None:
    """SIGTERM to the run's process tree, SIGKILL after KILL_GRACE to what is left of it. The
    tree is looked at again every POLL seconds of the grace and once after it: a worker forked,
    or a task's command started, after the first look (a loaded machine: a run timed out while
    ansible-playbook was still starting its worker) is reached too. Processes are checked by
    start time: an orphan has another parent by then, and a reused pid is left alone."""
    tree = {pid: _start_time(pid) for pid in [proc.pid] + descendants(proc.pid)}
    _signal(tree, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(POLL)
        _grow(tree)
    _grow(tree)
    _signal(tree, signal.SIGKILL)
    proc.wait()
    # SIGKILL is sent, not done: a killed process exits when it is next scheduled, which on a
    # loaded machine came after the caller looked (a task's command found still running)
    deadline = time.monotonic() + GONE_WAIT
    while any(_running(pid, started) for pid, started in tree.items()) and \
            time.monotonic() < deadline:
        time.sleep(POLL / 5)


def _grow(tree: Dict[int, Optional[bytes]]) -> None:
    """Add the living descendants of every process seen so far."""
    for pid in descendants(*tree):
        if pid not in tree:
            tree[pid] = _start_time(pid)


def _signal(tree: Dict[int, Optional[bytes]], sig: int) -> None:
    for pid, started in tree.items():
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _running(pid: int, started: Optional[bytes]) -> bool:
    """The process seen at `started` has not exited (a zombie has)."""
    fields = _stat_fields(pid)
    return (started is not None and len(fields) > 19 and fields[19] == started
            and fields[0] not in (b"Z", b"X"))


def _stat_fields(pid: int) -> List[bytes]:
    """The fields of /proc/<pid>/stat after `pid (comm)` (comm may hold spaces); [] when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2:].split()


def _start_time(pid: int) -> Optional[bytes]:
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else None  # starttime, field 22 of stat


def descendants(*pids: int) -> List[int]:
    """The pids of the children of `pids`, their children and so on (from /proc; [] elsewhere)."""
    parents: Dict[int, List[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if len(fields) > 1:
                parents.setdefault(int(fields[1]), []).append(int(name))
    found: List[int] = []
    todo = list(pids)
    seen = set(pids)
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def read_events(path: str) -> List[Dict[str, Any]]:
    """The events of a run (a line cut by a kill mid-write is left out)."""
    events: List[Dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
    except OSError:
        pass
    return events


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - STDERR_TAIL))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
