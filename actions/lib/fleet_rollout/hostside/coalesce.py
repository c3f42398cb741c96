"""Concurrent identical host-side runs of different processes, gathered into one Ansible run.

Each host step is a process of its own (StackStorm's python runner, or the embedded runtime):
the hosts of a batch draining at about the same time would each start ansible-playbook (about
0.5 CPU-s of startup per run). Requests with the same RunSpec (playbook, inventory, extravars,
SSH settings) meet in files under a directory of the pack's state dir and share one run. All of
it is the pack's library: it works the same under StackStorm and the embedded runtime.

    <root>/<spec key>/pending/<id>.json    a waiting request: its hosts; flock()ed by its
                                           process for as long as it lives (an unlocked one is
                                           stale: its process died, it is dropped)
    <root>/<spec key>/gather.lock          flock: the one gatherer of this spec at a time
    <root>/<spec key>/asked/<batch>/<host> a host of that batch asked for this run (only the
                                           playbooks a host runs once per batch:
                                           ONCE_PER_BATCH); removed an hour after the last
    <root>/<spec key>/runs/<run>/          a gathered run: req-<id>.json (claimed requests),
                                           spec.json, hosts.json (all its hosts), run.lock
                                           (held by the run's process for as long as it runs),
                                           result.json, runner.log

A request's process writes its request and takes gather.lock if it is free. The gatherer waits
up to the gather window (not at all when the request's batch has one host; closed early once the
batch's host count is pending, or once others' requests came and then none for `quiet` seconds:
the steps of a batch ask in bursts, as the shared run before them ends, or, for a run a host
makes once per batch, once every host of the batch has asked for it), claims the pending
requests (a rename: a request is in one run only; a request naming a host already claimed
waits for the next run), and starts the run in a process of its own session (`python -m
fleet_rollout.hostside.coalesce RUNDIR`): killing one step's process (timeout, cancel) never
kills the run of the others; a request that is still pending when its process dies is dropped,
one that was claimed is run (like st2's cancel, the host-side operation may complete). A
gatherer with nobody else's request runs its own here, as without coalescing. Every request's
process waits for run.lock (a shared flock: no polling) and reads its hosts' results from
result.json; a run process that died leaves no result: its hosts get an error result, as an
Ansible run that failed before reaching them.

Order per host: a claimed run goes on after its requester is killed, so a request first waits
for every gathered run (of any spec) that has one of its hosts and is still running: a restore's
undrain never runs before, or alongside, the drain of a cancelled step that was already gathered.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import ConfigError
from fleet_rollout.hostside.ansible_run import (
    HostResult,
    RunSpec,
    inherited_env,
    run_requests,
    run_spec,
)
from fleet_rollout.paths import LIB_DIR

DEFAULT_WINDOW = 1.0  # seconds (pack config ansible_gather_window)
DEFAULT_QUIET = 0.25  # seconds (pack config ansible_gather_quiet)
POLL = 0.02  # seconds between looks while a request waits to be gathered
MAX_HOSTS = 500  # hosts per gathered run
# the playbooks a host of a batch runs once (the verify's probe, the undrain): once every host
# of the batch has asked for such a run, none is coming, and a gatherer waits no longer (a
# playbook a host runs again and again, like the wait step's health looks, keeps its window)
ONCE_PER_BATCH = ("probe.yml", "undrain.yml")
STALE_RUN = 3600.0  # seconds: a finished run directory nobody collected is removed after this


def _write_json(path: str, doc: Any) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(doc, handle)
    os.rename(tmp, path)


def _read_json(path: str) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _try_lock(path: str, create: bool = True) -> Optional[int]:
    """An fd holding an exclusive flock on `path`, or None (held elsewhere, or missing)."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "9p",
                       "afs", "lustre", "gpfs")


def on_local_filesystem(path: str, mounts: str = "/proc/mounts") -> bool:
    """Whether `path` lies on a local file system (the longest mount point that holds it, from
    `mounts`). Gathering relies on rename and flock being seen at once by every process, which a
    network file system's caches do not promise: there each step runs its own Ansible."""
    try:
        with open(mounts) as handle:
            table = [line.split() for line in handle]
    except OSError:
        return True  # no mount table (not Linux): assume local, as flock elsewhere does
    real = os.path.realpath(path)
    best, fstype = "", ""
    for fields in table:
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return not (fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse."))


class Coalescer:
    """Gathers this process's host-side runs with identical ones of other processes.

    root: a private directory (the pack's state dir/ansible); window: seconds a gatherer waits
    for other requests; expected: hosts of the caller's batch (1: no wait at all; 0: unknown,
    the whole window); quiet: once another request came, the gather closes after this many
    seconds without a new one (0: it waits the window or the whole batch); batch: the name
    and the hosts of the caller's batch (a run of ONCE_PER_BATCH is gathered only until every
    one of them asked for it: the batch's last host does not wait the window for nobody; a
    host asking again, as a restore after the step or a rollback does, is gathered as any)."""

    def __init__(self, root: str, window: float = DEFAULT_WINDOW, expected: int = 0,
                 quiet: float = 0.0, batch: Optional[Tuple[str, List[str]]] = None) -> None:
        self.root = root
        self.window = max(0.0, float(window))
        self.expected = max(0, int(expected))
        self.quiet = max(0.0, float(quiet))
        self.batch = batch
        self._batch_hosts = frozenset(batch[1]) if batch else frozenset()
        self._started: List[subprocess.Popen] = []  # run processes to reap once collected

    def run(self, spec: RunSpec, names: List[str]) -> Dict[str, HostResult]:
        keydir = os.path.join(self.root, spec.key())
        pending = os.path.join(keydir, "pending")
        os.makedirs(pending, mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(keydir, "runs"), mode=0o700, exist_ok=True)
        self._after_runs_of(names)
        rid = uuid.uuid4().hex
        mine = os.path.join(pending, f"{rid}.json")
        # the batch rule for a first ask only (a retry, or a restore after the step, asks
        # again: gathered as any run)
        asked = self._asked_dir(spec, keydir)
        if asked is not None and not self._mark_asked(asked, names):
            asked = None
        fd = self._request(pending, rid, names)
        try:
            while True:
                if os.path.exists(mine):
                    gate = _try_lock(os.path.join(keydir, "gather.lock"))
                    if gate is None:
                        time.sleep(POLL)
                        continue
                    try:
                        if not os.path.exists(mine):
                            continue  # claimed meanwhile
                        alone = self._gather(spec, keydir, rid, names, asked)
                    finally:
                        os.close(gate)  # releases the gather lock
                    if alone:
                        return run_spec(spec, names)
                    continue
                rundir = self._claimed_in(keydir, rid)
                if rundir is None:
                    raise ConfigError(f"ansible request {rid} vanished from {keydir} (removed "
                                      "by hand?)")
                try:
                    return self._collect(rundir, rid, names)
                finally:
                    self._reap()
        finally:
            try:
                os.unlink(mine)  # withdrawn (still pending when its process stops waiting)
            except FileNotFoundError:
                pass
            os.close(fd)

    # ------------------------------------------------------------------ request
    def _after_runs_of(self, names: List[str]) -> None:
        """Wait until no gathered run with one of `names` is running (run.lock held)."""
        wanted = set(names)
        try:
            keys = os.listdir(self.root)
        except FileNotFoundError:
            return
        for key in keys:
            runs = os.path.join(self.root, key, "runs")
            try:
                entries = os.listdir(runs)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                rundir = os.path.join(runs, entry)
                hosts = _read_json(os.path.join(rundir, "hosts.json"))
                if not isinstance(hosts, list) or not wanted & {str(h) for h in hosts}:
                    continue
                if os.path.exists(os.path.join(rundir, "result.json")):
                    continue  # done
                try:
                    fd = os.open(os.path.join(rundir, "run.lock"), os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)  # until that run is done (or died)
                finally:
                    os.close(fd)

    def _asked_dir(self, spec: RunSpec, keydir: str) -> Optional[str]:
        """Where the hosts of the caller's batch that asked for this run are marked (None:
        not a run a host makes once per batch, or no batch known)."""
        if self.batch is None or os.path.basename(spec.playbook) not in ONCE_PER_BATCH:
            return None
        return os.path.join(keydir, "asked", self.batch[0])

    @staticmethod
    def _mark_asked(asked: str, names: List[str]) -> bool:
        """Mark `names` as having asked; True when none of them had asked before."""
        os.makedirs(asked, mode=0o700, exist_ok=True)
        first = True
        for name in names:
            try:
                os.close(os.open(os.path.join(asked, name), os.O_WRONLY | os.O_CREAT |
                                 os.O_EXCL, 0o600))
            except FileExistsError:
                first = False
        return first

    def _all_asked(self, asked: Optional[str]) -> bool:
        """Every host of the caller's batch has asked for this run (pending, or run before)."""
        if asked is None or self.batch is None:
            return False
        try:
            return self._batch_hosts <= set(os.listdir(asked))
        except FileNotFoundError:
            return False

    @staticmethod
    def _request(pending: str, rid: str, names: List[str]) -> int:
        """The request file, locked before it appears (so it is never taken for stale)."""
        tmp = os.path.join(pending, f".{rid}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"hosts": names, "created": time.time(),
                                 "pid": os.getpid()}).encode())
        os.rename(tmp, os.path.join(pending, f"{rid}.json"))
        return fd

    @staticmethod
    def _live(pending: str) -> List[Tuple[str, Dict[str, Any]]]:
        """The pending requests whose processes live, oldest first; stale ones removed."""
        found = []
        for entry in os.listdir(pending):
            if not entry.endswith(".json") or entry.startswith("."):
                continue
            path = os.path.join(pending, entry)
            fd = _try_lock(path, create=False)
            if fd is not None:  # nobody holds it: its process is gone
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                os.close(fd)
                continue
            doc = _read_json(path)
            if isinstance(doc, dict) and isinstance(doc.get("hosts"), list):
                found.append((entry[:-len(".json")], doc))
        found.sort(key=lambda item: float(item[1].get("created") or 0))
        return found

    # ------------------------------------------------------------------ gatherer
    def _gather(self, spec: RunSpec, keydir: str, rid: str, names: List[str],
                asked: Optional[str] = None) -> bool:
        """Holding gather.lock: wait for the window (or until every host of the batch has
        asked, `asked`: the batch's marks), claim the pending requests, start their run.
        True: nobody else's request came, this process runs its own."""
        pending = os.path.join(keydir, "pending")
        window = 0.0 if self.expected == 1 else self.window
        deadline = time.monotonic() + window
        seen, since = 1, time.monotonic()  # requests pending (this one), since when
        while time.monotonic() < deadline:
            if self._all_asked(asked):
                break  # the batch's last asked: nobody else of it is coming
            waiting = sum(1 for e in os.listdir(pending) if e.endswith(".json") and
                          not e.startswith("."))  # a request has 1 host or more
            if self.expected and waiting >= self.expected and \
                    len(self._live(pending)) >= self.expected:
                break  # (a request left by a killed step is not counted: it is not coming)
            now = time.monotonic()
            if waiting != seen:
                seen, since = waiting, now
            elif self.quiet and waiting > 1 and now - since >= self.quiet:
                break  # a burst came and ended: the batch's later ones make the next run
            time.sleep(min(POLL * 2.5, max(0.0, deadline - time.monotonic())))
        chosen: List[str] = [rid]
        taken = set(names)
        for other, doc in self._live(pending):
            hosts = [str(h) for h in doc["hosts"]]
            if other == rid or taken & set(hosts) or len(taken) + len(hosts) > MAX_HOSTS:
                continue  # a host already in this run: its request waits for the next one
            chosen.append(other)
            taken.update(hosts)
        self._sweep(os.path.join(keydir, "runs"))
        self._sweep_asked(os.path.join(keydir, "asked"))
        if len(chosen) == 1:
            os.unlink(os.path.join(pending, f"{rid}.json"))
            return True
        self._start(spec, keydir, chosen)
        return False

    def _start(self, spec: RunSpec, keydir: str, chosen: List[str]) -> None:
        rundir = os.path.join(keydir, "runs", f"{time.time():.6f}-{uuid.uuid4().hex[:8]}")
        os.mkdir(rundir, 0o700)
        lock = os.open(os.path.join(rundir, "run.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # before any request is in: waiters block on it
            _write_json(os.path.join(rundir, "spec.json"), asdict(spec))
            hosts: List[str] = []
            for rid in chosen:
                doc = _read_json(os.path.join(keydir, "pending", f"{rid}.json"))
                if isinstance(doc, dict) and isinstance(doc.get("hosts"), list):
                    hosts.extend(str(h) for h in doc["hosts"])
            _write_json(os.path.join(rundir, "hosts.json"), hosts)
            for rid in chosen:
                try:
                    os.rename(os.path.join(keydir, "pending", f"{rid}.json"),
                              os.path.join(rundir, f"req-{rid}.json"))
                except FileNotFoundError:
                    pass  # withdrawn
            env = inherited_env()
            env["PYTHONPATH"] = os.pathsep.join(p for p in (LIB_DIR, env.get("PYTHONPATH"))
                                                if p)
            with open(os.path.join(rundir, "runner.log"), "wb") as log:
                try:
                    self._started.append(subprocess.Popen(
                        [sys.executable, "-m", "fleet_rollout.hostside.coalesce", rundir],
                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        pass_fds=(lock,), start_new_session=True, env=env, cwd=rundir))
                except OSError as err:
                    _write_json(os.path.join(rundir, "result.json"),
                                {"error": f"cannot start the ansible run process: {err}"})
        finally:
            os.close(lock)  # the run process holds the lock from here on

    # ------------------------------------------------------------------ results
    @staticmethod
    def _claimed_in(keydir: str, rid: str) -> Optional[str]:
        runs = os.path.join(keydir, "runs")
        for entry in sorted(os.listdir(runs), reverse=True):
            if os.path.exists(os.path.join(runs, entry, f"req-{rid}.json")):
                return os.path.join(runs, entry)
        return None

    @staticmethod
    def _collect(rundir: str, rid: str, names: List[str]) -> Dict[str, HostResult]:
        try:
            fd = os.open(os.path.join(rundir, "run.lock"), os.O_RDONLY)
        except FileNotFoundError:  # the run directory was removed under us (by hand)
            fd = -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # until the run process is done (or died)
            finally:
                os.close(fd)
        doc = _read_json(os.path.join(rundir, "result.json"))
        _leave(rundir, rid)
        if not isinstance(doc, dict):
            return {h: HostResult(h, error="ansible run ended without a result (its process "
                                  "died)") for h in names}
        if doc.get("error"):
            return {h: HostResult(h, error=f"ansible run failed: {doc['error']}")
                    for h in names}
        refused = (doc.get("refused") or {}).get(rid)
        if refused:
            raise ConfigError(str(refused))
        mine = (doc.get("results") or {}).get(rid) or {}
        return {h: HostResult(**mine[h]) if isinstance(mine.get(h), dict) else
                HostResult(h, error="no result for this host in the gathered ansible run")
                for h in names}

    def _reap(self) -> None:
        """Wait for the run processes this one started (done once their lock is free)."""
        for proc in self._started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        self._started = [p for p in self._started if p.returncode is None]

    @staticmethod
    def _sweep(runs: str) -> None:
        """Run directories left by requests whose processes died before collecting."""
        now = time.time()
        for entry in os.listdir(runs):
            path = os.path.join(runs, entry)
            try:
                if now - os.stat(path).st_mtime < STALE_RUN:
                    continue
            except OSError:
                continue
            fd = _try_lock(os.path.join(path, "run.lock"), create=False)
            if fd is not None:  # not running
                os.close(fd)
                shutil.rmtree(path, ignore_errors=True)


    @staticmethod
    def _sweep_asked(root: str) -> None:
        """The marks of batches nobody asked for in STALE_RUN seconds."""
        try:
            entries = os.listdir(root)
        except FileNotFoundError:
            return
        now = time.time()
        for entry in entries:
            path = os.path.join(root, entry)
            try:
                if now - os.stat(path).st_mtime >= STALE_RUN:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue


def _leave(rundir: str, rid: str) -> None:
    """A collected request leaves its run; the last one out removes the run directory. Two
    requests leaving at once may both find themselves last: the second finds it gone."""
    try:
        os.unlink(os.path.join(rundir, f"req-{rid}.json"))
    except FileNotFoundError:
        pass
    try:
        left = any(e.startswith("req-") for e in os.listdir(rundir))
    except FileNotFoundError:
        return  # removed by another request that left at the same moment
    if not left:
        shutil.rmtree(rundir, ignore_errors=True)


def run_gathered(rundir: str) -> None:
    """The run process: one Ansible run for the claimed requests of `rundir`, result.json."""
    try:
        spec = RunSpec.from_dict(_read_json(os.path.join(rundir, "spec.json")))
        requests: Dict[str, List[str]] = {}
        for entry in sorted(os.listdir(rundir)):
            if entry.startswith("req-") and entry.endswith(".json"):
                doc = _read_json(os.path.join(rundir, entry))
                if isinstance(doc, dict):
                    requests[entry[len("req-"):-len(".json")]] = [str(h) for h in doc["hosts"]]
        outcome = run_requests(spec, requests)
        result: Dict[str, Any] = {"results": {}, "refused": {}}
        for rid, value in outcome.items():
            if isinstance(value, Exception):
                result["refused"][rid] = str(value)
            else:
                result["results"][rid] = {h: r.to_dict() for h, r in value.items()}
    except Exception as err:  # every waiter gets it as its hosts' error
        result = {"error": f"{type(err).__name__}: {err}"}
    _write_json(os.path.join(rundir, "result.json"), result)


if __name__ == "__main__":
    run_gathered(sys.argv[1])
