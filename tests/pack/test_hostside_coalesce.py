"""Identical host-side runs of concurrent processes gathered into one Ansible run
(fleet_rollout.hostside.coalesce), and the BMC-first wait for a rebooting host (osgate,
HostRun._wait_os). Real Ansible against sim hosts (local connection, sysroot trees); each test its
own temp dirs. No timing assertions beyond "not longer than the configured window"."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, List

import locations
import pytest
import yaml
from hostside_support import LabHostSide
from process_support import command_lines

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout import hoststeps
from fleet_rollout.errors import ConfigError, HostError
from fleet_rollout.hostside import coalesce, osgate
from fleet_rollout.hostside.ansible_run import HostResult
from fleet_rollout.hostside.coalesce import Coalescer
from fleet_rollout.hostside.playbook_steps import HostSide
from fleet_rollout.redfish.power import BootMarker

HOSTS = ["sim-001", "sim-002", "sim-003"]
ROOT = str(locations.ROOT)


@pytest.fixture()
def lab(tmp_path, monkeypatch):
    backend = SimBackend(str(tmp_path / "hosts"))
    for name in HOSTS:
        backend.power_on(boot_config(name, "early", "disabled"))
    hosts: Dict[str, Any] = {
        name: {"fleet_sysroot": backend.sysroot(name)} for name in HOSTS}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": {
        "grp": {"hosts": {"sim-003": {}}}}}}))
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("FLEET_ROLLOUT_ANSIBLE_LOG", str(log))
    return SimpleNamespace(backend=backend, inventory=str(inventory), tmp=tmp_path, log=log,
                           root=str(tmp_path / "state" / "ansible"),
                           cache=str(tmp_path / "cache"))


def _side(lab: Any, window: float, expected: int) -> HostSide:
    side = LabHostSide(lab.inventory, forks=5, cache_dir=lab.cache)
    side.coalesce = Coalescer(lab.root, window, expected)
    return side


def _runs(lab: Any) -> List[Dict[str, Any]]:
    if not lab.log.exists():
        return []
    return [json.loads(line) for line in lab.log.read_text().splitlines()]


def _concurrently(calls: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}

    def one(key: str, call: Any) -> None:
        try:
            out[key] = call()
        except Exception as err:  # the test looks at it
            out[key] = err

    threads = [threading.Thread(target=one, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return out


def _boot_id(lab: Any, host: str) -> str:
    with open(os.path.join(lab.backend.sysroot(host), "proc/sys/kernel/random/boot_id")) as f:
        return f.read().strip()


def test_gathered_run_gives_each_host_its_own_result(lab):
    out = _concurrently({h: (lambda h=h: _side(lab, 20, 3).health([h])) for h in HOSTS})
    for host in HOSTS:
        result = out[host]
        assert set(result) == {host}, result
        assert result[host].ok, result[host]
        assert result[host].result["boot_id"] == _boot_id(lab, host)
    runs = _runs(lab)
    assert len(runs) == 1 and sorted(runs[0]["hosts"]) == HOSTS, runs  # one ansible-playbook
    assert not os.listdir(os.path.join(lab.root, os.listdir(lab.root)[0], "runs"))  # cleaned


def test_a_hung_host_neither_holds_nor_fails_the_others_in_its_run(lab):
    """sim-002's health read never returns (its boot_id is a FIFO nobody writes: the read
    blocks, as on a hung file system): the shared run's other hosts get their results at their
    own pace (strategy free), and the run ends at its limit with an error for sim-002 instead of
    holding every step of the batch."""
    boot_id = os.path.join(lab.backend.sysroot("sim-002"), "proc/sys/kernel/random/boot_id")
    os.unlink(boot_id)
    os.mkfifo(boot_id)

    def side() -> HostSide:
        s = _side(lab, 20, 2)
        s.timeout = 15  # the run's limit (a rollout uses ansible_run.run_limit)
        return s

    try:
        out = _concurrently({h: (lambda h=h: side().health([h]))
                             for h in ("sim-001", "sim-002")})
    finally:  # a writer that opens and closes the FIFO ends the blocked read
        os.close(os.open(boot_id, os.O_RDWR))
    assert out["sim-001"]["sim-001"].ok, out
    assert out["sim-001"]["sim-001"].result["boot_id"] == _boot_id(lab, "sim-001")
    hung = out["sim-002"]["sim-002"]
    assert not hung.ok and "timeout" in (hung.error or ""), hung  # ended by the run's limit
    runs = _runs(lab)
    assert len(runs) == 1 and sorted(runs[0]["hosts"]) == ["sim-001", "sim-002"], runs


def test_a_run_without_a_timeout_gets_the_step_limit():
    from fleet_rollout.hostside.ansible_run import RunSpec, run_limit
    from fleet_rollout.timeouts import ANSIBLE

    assert run_limit(RunSpec("p", "i", {}, forks=20), 1) == ANSIBLE
    assert run_limit(RunSpec("p", "i", {}, forks=20), 45) == 3 * ANSIBLE  # three waves of 20
    drain = RunSpec("p", "i", {"fleet_drain_timeout": 600.0}, forks=20)
    assert run_limit(drain, 10) == ANSIBLE + 600


def test_a_failing_host_or_refused_request_does_not_fail_the_others(lab):
    tcp = os.path.join(lab.backend.sysroot("sim-002"), "proc/net/tcp")
    with open(tcp, "a") as handle:  # one ESTABLISHED connection on :8080: its drain times out
        handle.write("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
                     "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")
    calls = {h: (lambda h=h: _side(lab, 20, 4).drain([h], timeout=1)) for h in
             ["sim-001", "sim-002", "nosuchhost"]}
    calls["grp"] = lambda: _side(lab, 20, 4).drain(["grp"], timeout=1)  # a group: refused
    out = _concurrently(calls)
    assert out["sim-001"]["sim-001"].ok and out["sim-001"]["sim-001"].changed
    bad = out["sim-002"]["sim-002"]
    assert not bad.ok and "still 1 established connections" in bad.error
    assert bad.failed_task == "Drain with the maintenance flag"
    assert "not in inventory" in out["nosuchhost"]["nosuchhost"].error
    assert isinstance(out["grp"], ConfigError) and "group" in str(out["grp"])
    assert not os.path.exists(os.path.join(lab.backend.sysroot("sim-003"),
                                           "etc/fleet/maintenance"))  # the group never ran
    assert len(_runs(lab)) == 1


def test_a_single_host_batch_does_not_wait(lab):
    side = _side(lab, 30, 1)
    start = time.monotonic()
    result = side.health(["sim-001"])["sim-001"]
    assert result.ok
    assert time.monotonic() - start < 30  # never the window
    runs = _runs(lab)
    assert len(runs) == 1 and runs[0]["pid"] == os.getpid()  # ran here, no run process


def test_unknown_batch_size_waits_at_most_the_window(lab):
    side = _side(lab, 0.5, 0)
    start = time.monotonic()
    assert side.health(["sim-001"])["sim-001"].ok
    assert time.monotonic() - start < 60


SCRIPT = """
import json, sys
from fleet_rollout.hostside import coalesce
from fleet_rollout.hostside.coalesce import Coalescer
from hostside_support import LabHostSide
inventory, cache, root, window, expected, op, host = sys.argv[1:8]
side = LabHostSide(inventory, forks=5, cache_dir=cache)
side.coalesce = Coalescer(root, float(window), int(expected))
if op == "drain":
    out = side.drain([host], timeout=float(sys.argv[8]))
else:
    out = side.health([host])
print(json.dumps({h: r.to_dict() for h, r in out.items()}))
"""


def _start(lab: Any, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "actions", "lib"), ROOT, os.path.join(ROOT, "tests"),
         os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", SCRIPT, lab.inventory, lab.cache, lab.root,
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def _wait_for(predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _run_dirs(lab: Any) -> List[str]:
    found = []
    if os.path.isdir(lab.root):
        for key in os.listdir(lab.root):
            runs = os.path.join(lab.root, key, "runs")
            try:
                found.extend(os.path.join(runs, d) for d in os.listdir(runs))
            except FileNotFoundError:
                pass  # the key's directory is made before its runs/
    return found


def _run_process(rundir: str) -> bool:
    """The gathered run's own process (coalesce.run_gathered) is running."""
    return any(rundir in argv for _pid, argv in command_lines())


def _pending(lab: Any) -> int:
    count = 0
    if os.path.isdir(lab.root):
        for key in os.listdir(lab.root):
            try:
                count += len([e for e in os.listdir(os.path.join(lab.root, key, "pending"))
                              if e.endswith(".json") and not e.startswith(".")])
            except FileNotFoundError:
                pass  # the key's directory is made before its pending/
    return count


def test_a_killed_step_does_not_kill_the_others_run(lab):
    """Every process of a gathered run is killed as the runtime kills a timed-out step (its
    process group) but one: the run goes on, the survivor gets its result."""
    tcp = os.path.join(lab.backend.sysroot("sim-001"), "proc/net/tcp")
    with open(tcp, "a") as handle:  # sim-001's drain takes its whole 4 s timeout
        handle.write("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
                     "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")
    procs = {h: _start(lab, "20", "3", "drain", h, "4") for h in HOSTS}
    _wait_for(lambda: any(os.path.exists(os.path.join(d, "run.lock")) and
                          any(e.startswith("req-") for e in os.listdir(d)) and _run_process(d)
                          for d in _run_dirs(lab)))
    for host in ("sim-001", "sim-002"):  # the gatherer is among them or not: either way
        os.killpg(procs[host].pid, signal.SIGKILL)
        procs[host].wait(10)
    out, err = procs["sim-003"].communicate(timeout=300)
    assert procs["sim-003"].returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])["sim-003"]
    assert result["ok"] and result["changed"], result
    runs = _runs(lab)
    assert len(runs) == 1 and sorted(runs[0]["hosts"]) == HOSTS  # the others' drains ran too
    for host in ("sim-002", "sim-003"):
        assert os.path.exists(os.path.join(lab.backend.sysroot(host), "etc/fleet/maintenance"))


def test_a_host_waits_for_the_gathered_run_its_killed_step_left(lab):
    """A cancelled step's gathered drain goes on; the restore's undrain of that host starts
    only once that run has ended (else the drain could land after the undrain and leave the
    host drained)."""
    tcp = os.path.join(lab.backend.sysroot("sim-001"), "proc/net/tcp")
    with open(tcp, "a") as handle:  # sim-001 keeps the gathered run busy for its 4 s timeout
        handle.write("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
                     "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")
    procs = {h: _start(lab, "20", "2", "drain", h, "4") for h in ("sim-001", "sim-002")}
    # gathered: the run process is up (a step killed between writing the run's hosts and
    # starting its process leaves a run that never starts: nothing drained, nothing to wait for)
    _wait_for(lambda: any(os.path.exists(os.path.join(d, "hosts.json")) and _run_process(d)
                          for d in _run_dirs(lab)))
    for proc in procs.values():  # both steps cancelled once their drains are gathered
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    undrained = _side(lab, 0, 1).undrain(["sim-002"])["sim-002"]
    assert undrained.ok, undrained
    runs = {r["playbook"]: r for r in _runs(lab)}
    assert set(runs) == {"drain.yml", "undrain.yml"}, runs
    assert sorted(runs["drain.yml"]["hosts"]) == ["sim-001", "sim-002"]
    assert runs["undrain.yml"]["started"] >= runs["drain.yml"]["at"], runs  # after, not during
    assert not os.path.exists(os.path.join(lab.backend.sysroot("sim-002"),
                                           "etc/fleet/maintenance"))  # the undrain came last


def test_a_request_withdrawn_before_the_run_is_not_run(lab):
    gatherer = _start(lab, "6", "0", "drain", "sim-001", "5")
    _wait_for(lambda: _pending(lab) >= 1)
    time.sleep(0.3)  # the first one holds the gather lock, in its window
    late = _start(lab, "6", "0", "drain", "sim-002", "5")
    _wait_for(lambda: _pending(lab) >= 2)
    os.killpg(late.pid, signal.SIGKILL)  # a cancel while still waiting to be gathered
    late.wait(10)
    out, err = gatherer.communicate(timeout=300)
    assert gatherer.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["sim-001"]["ok"]
    runs = _runs(lab)
    assert [r["hosts"] for r in runs] == [["sim-001"]], runs
    assert not os.path.exists(os.path.join(lab.backend.sysroot("sim-002"),
                                           "etc/fleet/maintenance"))
    assert _pending(lab) == 0  # the dead request was dropped


def test_a_dead_run_process_is_an_error_result_not_a_hang(lab, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the run process dies at once
    out = _concurrently({h: (lambda h=h: _side(lab, 20, 2).health([h]))
                         for h in ("sim-001", "sim-002")})
    errors = [r for r in out.values() if isinstance(r, dict) and not next(iter(r.values())).ok]
    assert errors, out  # whoever was in the gathered run: an error result, never a hang
    for result in errors:
        assert "without a result" in next(iter(result.values())).error


def test_gathering_only_on_a_local_state_dir(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\n"
                      "fs1:/export /srv/fleet nfs4 rw 0 0\n"
                      "tmpfs /srv/fleet/local tmpfs rw 0 0\n"
                      "sshfs#x /mnt/s fuse.sshfs rw 0 0\n")
    local = coalesce.on_local_filesystem
    assert local("/var/lib/fleet", str(mounts))
    assert not local("/srv/fleet/state", str(mounts))  # NFS: each step runs its own Ansible
    assert not local("/srv/fleet", str(mounts))
    assert local("/srv/fleet/local/state", str(mounts))  # the longest mount point decides
    assert not local("/mnt/s/x", str(mounts))
    assert local("/srv/fleetx", str(mounts))  # a prefix of the name is not the mount point
    assert local(str(tmp_path))  # this machine's temp dir


def test_requests_leaving_together_both_finish(tmp_path):
    """The last request out removes the run directory; two leaving at the same moment may both
    see themselves last: the second must find the directory gone, not fail its host step (a
    FileNotFoundError seen once in a 6-host rollout)."""
    rundir = tmp_path / "run"
    rundir.mkdir()
    for rid in ("a", "b"):
        (rundir / f"req-{rid}.json").write_text("{}")
    coalesce._leave(str(rundir), "a")
    assert rundir.exists() and not (rundir / "req-a.json").exists()  # b still to collect
    (rundir / "req-b.json").unlink()  # b unlinked, then a third party removed the run
    shutil.rmtree(rundir)
    coalesce._leave(str(rundir), "b")  # no FileNotFoundError
    assert not rundir.exists()


# ---------------------------------------------------------------- BMC first, then the host
def test_os_state_from_the_bmc():
    def marker(power: Any = "On", last: Any = None, post: Any = None) -> BootMarker:
        return BootMarker(power, last, None, None, post)

    assert osgate.os_state(marker("Off")) == osgate.DOWN
    assert osgate.os_state(marker(last="MemoryInitializationStarted")) == osgate.DOWN
    assert osgate.os_state(marker(post="InPost")) == osgate.DOWN
    assert osgate.os_state(marker(last="OSBootStarted")) == osgate.BOOTING
    assert osgate.os_state(marker(post="FinishedPost")) == osgate.BOOTING
    assert osgate.os_state(marker(last="OSRunning")) == osgate.UP
    assert osgate.os_state(marker()) == osgate.UNKNOWN
    assert osgate.os_state(marker(None, "None")) == osgate.UNKNOWN
    asked: List[int] = []
    assert osgate.gate_boot_id(lambda: osgate.DOWN, lambda: str(asked.append(1))) is None
    assert not asked  # no Ansible run while the BMC shows the system down
    assert osgate.gate_boot_id(lambda: osgate.UNKNOWN, lambda: "b1") == "b1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


class FakeSide:
    """health(): the host answers with `boot` from `up_at` (clock time) on."""

    def __init__(self, clock: Clock, up_at: float, boot: str = "new") -> None:
        self.clock, self.up_at, self.boot, self.calls = clock, up_at, boot, []

    def health(self, hosts: List[str]) -> Dict[str, HostResult]:
        self.calls.append(self.clock.now)
        if self.clock.now >= self.up_at:
            return {hosts[0]: HostResult(hosts[0], ok=True, result={"boot_id": self.boot},
                                         tasks=["fleet_result"])}
        return {hosts[0]: HostResult(hosts[0], unreachable=True, error="unreachable: refused")}


def _host_run(monkeypatch, clock: Clock, side: FakeSide, poll: float = 1) -> Any:
    monkeypatch.setattr(hoststeps, "time", SimpleNamespace(monotonic=clock.monotonic,
                                                           time=time.time))
    run = hoststeps.HostRun.__new__(hoststeps.HostRun)
    run.name = "h1"
    run.ctx = SimpleNamespace(profile={"redfish": {"poll": poll}}, sleep=clock.sleep,
                              hostside=side)
    return run


def test_wait_asks_the_host_only_once_the_bmc_shows_the_os(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 40)
    looks: List[float] = []

    def look() -> str:  # 30 s in POST, then the OS boots, OSRunning at +40 s
        looks.append(clock.now)
        elapsed = clock.now - 1000.0
        return osgate.DOWN if elapsed < 30 else osgate.BOOTING if elapsed < 40 else osgate.UP

    run = _host_run(monkeypatch, clock, side)
    result = run._wait_os("old", 300, look)
    assert result["boot_id"] == "new"
    assert all(t >= 1030.0 for t in side.calls)  # never while the BMC showed POST
    assert len(side.calls) <= 7, side.calls  # booting: tries spaced out; OSRunning: at once
    assert len(looks) >= 30  # the BMC is what is polled (one GET a look)


def test_wait_without_bmc_information_spaces_the_host_tries(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 120)
    run = _host_run(monkeypatch, clock, side)
    assert run._wait_os("old", 600, lambda: osgate.UNKNOWN)["boot_id"] == "new"
    assert 3 <= len(side.calls) < 30, side.calls  # was one try a second: 120


def test_wait_still_asks_a_host_its_bmc_shows_down_and_fails_at_the_deadline(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now + 10_000)
    run = _host_run(monkeypatch, clock, side)
    with pytest.raises(HostError, match="OS not back within 200s"):
        run._wait_os("old", 200, lambda: osgate.DOWN)
    # stale BMC data is not trusted for ever: every STALE_ASK, and a last try at the deadline
    assert 3 <= len(side.calls) <= 5, side.calls
    assert side.calls[-1] >= 1200.0


def test_wait_without_reboot_asks_the_host_at_once(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now, boot="same")
    run = _host_run(monkeypatch, clock, side)

    def look() -> str:
        raise AssertionError("the BMC is not needed when the host answers")

    assert run._wait_os(None, 300, look)["boot_id"] == "same"
    assert side.calls == [1000.0]


def test_wait_old_boot_id_is_not_back(monkeypatch):
    clock = Clock()
    side = FakeSide(clock, up_at=clock.now, boot="old")
    run = _host_run(monkeypatch, clock, side)
    with pytest.raises(HostError, match="boot_id still old"):
        run._wait_os("old", 100, lambda: osgate.UP)


def test_a_burst_that_ended_runs_before_the_window_and_a_later_request_makes_the_next_run(lab):
    """quiet: others' requests came and then none for `quiet` seconds: the gather closes, not
    waiting out its window (20 s here) for a batch whose size it does not know."""
    def side() -> HostSide:
        out = LabHostSide(lab.inventory, forks=5, cache_dir=lab.cache)
        out.coalesce = Coalescer(lab.root, 20, 0, quiet=0.5)
        return out

    start = time.monotonic()
    burst = _concurrently({h: (lambda h=h: side().health([h])) for h in HOSTS[:2]})
    assert all(burst[h][h].ok for h in HOSTS[:2])
    assert time.monotonic() - start < 20  # closed by the quiet, never the window
    late = _side(lab, 0.5, 0).health([HOSTS[2]])  # alone: it waits its (short) window
    assert late[HOSTS[2]].ok
    assert [sorted(r["hosts"]) for r in _runs(lab)] == [HOSTS[:2], HOSTS[2:]]


def test_quiet_never_closes_a_gather_nobody_else_joined(lab):
    """A lone request waits its window for the others (quiet counts only after one came)."""
    side = LabHostSide(lab.inventory, forks=5, cache_dir=lab.cache)
    side.coalesce = Coalescer(lab.root, 30, 0, quiet=0.2)
    out: Dict[str, Any] = {}
    first = threading.Thread(target=lambda: out.update(a=side.health([HOSTS[0]])))
    first.start()
    _wait_for(lambda: _pending(lab) >= 1)
    time.sleep(1.0)  # five times the quiet: still gathering
    other = LabHostSide(lab.inventory, forks=5, cache_dir=lab.cache)
    other.coalesce = Coalescer(lab.root, 30, 0, quiet=0.2)
    out.update(b=other.health([HOSTS[1]]))
    first.join(120)
    assert out["a"][HOSTS[0]].ok and out["b"][HOSTS[1]].ok
    assert [sorted(r["hosts"]) for r in _runs(lab)] == [HOSTS[:2]]  # one run for both


def test_the_last_host_of_a_batch_does_not_wait_for_nobody(lab):
    """A run a host makes once per batch (coalesce.ONCE_PER_BATCH: the probe, the undrain):
    once every host of the batch has asked for it, the gatherer closes at once: the batch's
    last host does not wait the window (60 s here) for a host that is not coming. A run a host
    makes again and again (the wait step's health looks) keeps its window: a later request of
    the same batch still joins it. The batch's marks go an hour after its last request."""
    batch = ("r-1.b0", list(HOSTS))

    def side(window: float, expected: int, quiet: float = 0.0) -> HostSide:
        out = LabHostSide(lab.inventory, forks=5, cache_dir=lab.cache)
        out.coalesce = Coalescer(lab.root, window, expected, quiet, batch=batch)
        return out

    first = _concurrently({h: (lambda h=h: side(60, 2).undrain([h])) for h in HOSTS[:2]})
    assert all(first[h][h].ok for h in HOSTS[:2]), first
    start = time.monotonic()
    last = side(60, 2).undrain([HOSTS[2]])  # alone, two expected: only the rule ends its wait
    assert last[HOSTS[2]].ok and time.monotonic() - start < 60
    assert [sorted(r["hosts"]) for r in _runs(lab)] == [HOSTS[:2], HOSTS[2:]]
    # health: every host of the batch asked once, and a lone look still waits for company;
    # so does an undrain asked again (a restore, a rollback)
    burst = _concurrently({h: (lambda h=h: side(60, 3).health([h])) for h in HOSTS})
    assert all(burst[h][h].ok for h in HOSTS)
    for again in ("health", "undrain"):
        out: Dict[str, Any] = {}
        lone = threading.Thread(target=lambda again=again, out=out: out.update(
            a=getattr(side(30, 0, 0.2), again)([HOSTS[0]])))
        lone.start()
        _wait_for(lambda: _pending(lab) >= 1)
        time.sleep(1.0)  # five times the quiet: still gathering
        out.update(b=getattr(side(30, 0, 0.2), again)([HOSTS[1]]))
        lone.join(120)
        assert out["a"][HOSTS[0]].ok and out["b"][HOSTS[1]].ok, again
        assert [sorted(r["hosts"]) for r in _runs(lab)][-1] == HOSTS[:2], again  # one run
    # the undrain's marks of the batch: every host; swept once an hour old
    keydirs = [os.path.join(lab.root, k) for k in os.listdir(lab.root)
               if os.path.isdir(os.path.join(lab.root, k, "asked"))]
    assert len(keydirs) == 1
    marks = os.path.join(keydirs[0], "asked", "r-1.b0")
    assert sorted(os.listdir(marks)) == HOSTS
    hour_ago = time.time() - coalesce.STALE_RUN - 1
    os.utime(marks, (hour_ago, hour_ago))
    Coalescer(lab.root, 0.1, 0, batch=("r-1.b1", ["x"]))._sweep_asked(
        os.path.join(keydirs[0], "asked"))
    assert not os.path.exists(marks)
