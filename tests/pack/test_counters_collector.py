"""The host collector against fake trees (--sysroot), shipped alone, and on this machine."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import locations
import pytest

from fleet_rollout.counters import collector
from fleet_rollout.counters.deltas import window_from_snapshots
from fleet_rollout.counters.metric import DEFAULT_METRIC, metric_from_dict
from fleet_rollout.counters.parsers import CounterFormatError

ROOT = locations.ROOT
COLLECTOR = ROOT / "actions" / "lib" / "fleet_rollout" / "counters" / "collector.py"
FIXTURES = locations.FIXTURES / "counters"

SOFTNET_LINE = "{processed:08x} {dropped:08x} {squeeze:08x} 00000000 00000000 00000000 " \
               "00000000 00000000 00000000 00000000 00000000 00000000 {cpu:08x}\n"


def build_tree(root: Path, boot_id: str = "8d1a6c4e-0000-4000-8000-00000000aaaa",
               nics: Optional[Dict[str, Dict[str, int]]] = None,
               ethtool: Optional[Dict[str, str]] = None,
               softnet: Optional[Dict[int, tuple]] = None, udp_rcvbuf: int = 100) -> Path:
    """Write a fake server tree (paths of docs/CONVENTIONS.md)."""
    nics = nics if nics is not None else {
        "eth0": {"rx_packets": 1_000_000, "rx_dropped": 10, "rx_missed_errors": 5,
                 "rx_fifo_errors": 0, "tx_packets": 900_000},
        "eth1": {"rx_packets": 500_000, "rx_dropped": 2, "rx_missed_errors": 0,
                 "rx_fifo_errors": 1, "tx_packets": 400_000},
        "lo": {"rx_packets": 777, "rx_dropped": 0, "rx_missed_errors": 0, "rx_fifo_errors": 0},
        "veth12ab": {"rx_packets": 55, "rx_dropped": 3, "rx_missed_errors": 0,
                     "rx_fifo_errors": 0},
    }
    kernel = root / "proc" / "sys" / "kernel"
    (kernel / "random").mkdir(parents=True, exist_ok=True)
    (kernel / "random" / "boot_id").write_text(boot_id + "\n")
    (kernel / "hostname").write_text("web-001\n")
    (kernel / "osrelease").write_text("6.1.0-18-amd64\n")
    (root / "proc" / "uptime").write_text("3600.52 7000.10\n")
    for nic, stats in nics.items():
        directory = root / "sys" / "class" / "net" / nic / "statistics"
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in stats.items():
            (directory / name).write_text(f"{value}\n")
    sim = root / "run" / "fleet-sim" / "ethtool-S"
    sim.mkdir(parents=True, exist_ok=True)
    for nic, text in (ethtool if ethtool is not None else {
        "eth0": (FIXTURES / "ethtool" / "mlx5.txt").read_text(),
        "eth1": (FIXTURES / "ethtool" / "ixgbe.txt").read_text(),
    }).items():
        (sim / nic).write_text(text)
    softnet = softnet if softnet is not None else {0: (1000, 1, 5), 1: (2000, 0, 7)}
    (root / "proc" / "net").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "net" / "softnet_stat").write_text("".join(
        SOFTNET_LINE.format(processed=p, dropped=d, squeeze=s, cpu=cpu)
        for cpu, (p, d, s) in sorted(softnet.items())
    ))
    snmp = (FIXTURES / "snmp" / "linux-6.1").read_text().replace(
        "Udp: 2189 0 22211 10 22211 0 0 0 0", f"Udp: 2189 0 {udp_rcvbuf} 10 {udp_rcvbuf} 0 0 0 0")
    (root / "proc" / "net" / "snmp").write_text(snmp)
    return root


def test_collect_reads_every_source(tmp_path: Path) -> None:
    doc = collector.collect(sysroot=str(build_tree(tmp_path)), clock=lambda: 1714557600.0)
    assert doc["schema"] == "fleet_rollout.counters/1"
    assert doc["boot_id"] == "8d1a6c4e-0000-4000-8000-00000000aaaa"
    assert doc["host"] == "web-001" and doc["kernel"] == "6.1.0-18-amd64"
    assert doc["time"] == 1714557600.0 and doc["uptime_seconds"] == 3600.52
    assert sorted(doc["interfaces"]) == ["eth0", "eth1", "lo", "veth12ab"]
    assert doc["interfaces"]["eth0"]["statistics"]["rx_missed_errors"] == 5
    assert doc["interfaces"]["eth0"]["ethtool"]["rx_discards_phy"] == 58591
    assert doc["interfaces"]["eth1"]["ethtool"]["rx_no_buffer_count"] == 5120
    assert doc["interfaces"]["lo"]["ethtool"] is None  # no ethtool file for lo in the tree
    assert [row["dropped"] for row in doc["softnet"]] == [1, 0]
    assert doc["snmp"]["Udp"]["RcvbufErrors"] == 100
    assert doc["snmp6"] is None and doc["errors"] == []
    json.dumps(doc)  # plain JSON


def test_collect_interface_filters_and_no_ethtool(tmp_path: Path) -> None:
    root = build_tree(tmp_path)
    doc = collector.collect(sysroot=str(root), include=["eth*"], exclude=["eth1"], ethtool=False)
    assert list(doc["interfaces"]) == ["eth0"]
    assert doc["interfaces"]["eth0"]["ethtool"] is None


def test_collect_records_broken_sources_and_goes_on(tmp_path: Path) -> None:
    root = build_tree(tmp_path)
    (root / "proc" / "net" / "snmp").unlink()
    (root / "sys" / "class" / "net" / "eth0" / "statistics" / "rx_dropped").write_text("x\n")
    (root / "run" / "fleet-sim" / "ethtool-S" / "eth1").write_text("garbage\n")
    doc = collector.collect(sysroot=str(root))
    assert doc["snmp"] is None
    assert any("snmp: missing" in e for e in doc["errors"])
    assert any("rx_dropped" in e and "non-negative integer" in e for e in doc["errors"])
    assert any("ethtool -S eth1" in e for e in doc["errors"])
    assert "rx_dropped" not in doc["interfaces"]["eth0"]["statistics"]
    assert doc["interfaces"]["eth1"]["ethtool"] is None


def test_collect_without_boot_id_fails_clearly(tmp_path: Path) -> None:
    root = build_tree(tmp_path)
    (root / "proc" / "sys" / "kernel" / "random" / "boot_id").unlink()
    with pytest.raises(CounterFormatError, match="boot_id"):
        collector.collect(sysroot=str(root))


def _python38() -> str:
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    candidates += ["/usr/bin/python3.8", "/usr/local/bin/python3.8"]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def test_collector_runs_alone_with_only_the_standard_library(tmp_path: Path) -> None:
    """Ship collector.py alone (as Ansible will) and run it isolated: -I -S, no site-packages,
    no fleet_rollout on the path, on the oldest Python the pack supports."""
    shipped = tmp_path / "ship" / "collector.py"
    shipped.parent.mkdir()
    shutil.copy(COLLECTOR, shipped)
    root = build_tree(tmp_path / "tree")
    proc = subprocess.run(
        [_python38(), "-I", "-S", str(shipped), "--sysroot", str(root), "--host", "h1"],
        capture_output=True, text=True, cwd=str(shipped.parent), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["host"] == "h1" and doc["interfaces"]["eth0"]["ethtool"]["rx_discards_phy"] == 58591
    # and its errors are clear there too
    (root / "proc" / "sys" / "kernel" / "random" / "boot_id").unlink()
    proc = subprocess.run([_python38(), "-I", "-S", str(shipped), "--sysroot", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot read boot_id" in proc.stderr
    proc = subprocess.run([_python38(), "-I", "-S", str(shipped), "--sysroot",
                           str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a directory" in proc.stderr


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_a_window_samples_a_step_apart_from_its_first_snapshot(tmp_path: Path) -> None:
    """start_window claims the window and writes its state; run_window (the sampler) takes the
    other samples one step apart from the first's time, each written as it is taken, a failed
    one recorded and the window going on; read_window prints it once done, or after its
    wait what was taken so far."""
    clock = FakeClock(1000.0)
    directory = str(tmp_path / "samples")
    state = collector.start_window("r-1.b0.pre", 5.0, 3, {"time": 1000.2}, directory, 1000.2)
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    stored = json.loads((tmp_path / "samples" / "r-1.b0.pre.json").read_text())
    assert stored["done"] is False and stored["snapshots"] == [] and stored["t0"] == 1000.2
    partial = collector.read_window("r-1.b0.pre", directory, 0.35, clock, clock.sleep)
    assert partial["done"] is False and clock.slept == [0.1, 0.1, 0.1, 0.05]
    taken = iter([{"time": 1005.2}, OSError("disk gone"), {"time": 1015.2}])

    def take() -> dict:
        item = next(taken)
        if isinstance(item, Exception):
            raise item
        return item
    clock.slept.clear()
    collector.run_window(state, take, directory, clock, clock.sleep)
    assert clock.slept == pytest.approx([4.85, 5.0, 5.0])  # due 1005.2, 1010.2, 1015.2
    doc = collector.read_window("r-1.b0.pre", directory, 0.0, clock, clock.sleep)
    assert doc["done"] is True and doc["snapshots"] == [{"time": 1005.2}, None, {"time": 1015.2}]
    assert doc["errors"] == {"2": "OSError: disk gone"}
    # the clock jumps back: a sample is never more than two steps late
    clock.now = 500.0
    clock.slept.clear()
    state = collector.start_window("r-1.b0.post", 5.0, 1, {"time": 1000.0}, directory, 500.0)
    collector.run_window(state, lambda: {"time": 505.0}, directory, clock, clock.sleep)
    assert clock.slept == [10.0]
    with pytest.raises(collector.WindowError, match="no samples on this host"):
        collector.read_window("r-2.b0.pre", directory, 0.0, clock, clock.sleep)
    # anchored at the window's start on the controller: a host reached within half a step of
    # it samples at anchor + k * every (its steps end with every other host's); one reached
    # later (or whose clock is off) a step apart from its own first snapshot
    for first, due in ((2002.4, [2005.0, 2010.0]), (1998.0, [2005.0, 2010.0]),
                       (2002.6, [2007.6, 2012.6])):
        clock.now = first
        state = collector.start_window("r-3.b1.post", 5.0, 2, {"time": first}, directory,
                                       first, anchor=2000.0)
        seen: list = []
        collector.run_window(state, lambda seen=seen: seen.append(clock.now) or
                             {"time": clock.now}, directory, clock, clock.sleep)
        assert seen == pytest.approx(due), first


def test_a_window_whose_first_snapshot_is_due_later_is_all_sampled_there(tmp_path: Path
                                                                           ) -> None:
    """--first-at (the post window, started as the soak begins): the start writes the window's
    claim and no snapshot; the sampler takes the first at the anchor (written at once, t0 its
    time), then the others a step apart from the anchor. A first snapshot that fails ends the
    window (no step can be measured from it), the read says why; one taken late (a loaded
    host) gives whole steps from its own time; a taken-over window takes no first snapshot;
    an anchor in the past or too far ahead is refused."""
    clock = FakeClock(1000.0)
    directory = str(tmp_path / "samples")
    state = collector.start_window("r-1.b0.post", 5.0, 2, None, directory, 1000.0, 1020.0)
    stored = json.loads((tmp_path / "samples" / "r-1.b0.post.json").read_text())
    assert stored["deferred"] is True and stored["first"] is None and stored["t0"] is None
    assert stored["anchor"] == 1020.0 and stored["token"] == state["token"]
    seen: list = []

    def take() -> dict:
        seen.append(clock.now)
        if len(seen) == 2:  # the first was written as soon as it was taken
            assert json.loads((tmp_path / "samples" / "r-1.b0.post.json").read_text())[
                "first"] == {"time": 1020.0}
        return {"time": clock.now}
    collector.run_window(state, take, directory, clock, clock.sleep)
    assert seen == pytest.approx([1020.0, 1025.0, 1030.0])
    doc = collector.read_window("r-1.b0.post", directory, 0.0, clock, clock.sleep)
    assert doc["done"] is True and doc["first"] == {"time": 1020.0} and doc["t0"] == 1020.0
    assert doc["snapshots"] == [{"time": 1025.0}, {"time": 1030.0}] and doc["errors"] == {}
    # the first snapshot fails: the window ends there
    clock.now = 2000.0
    state = collector.start_window("r-1.b1.post", 5.0, 2, None, directory, 2000.0, 2010.0)

    def broken() -> dict:
        raise OSError("ethtool gone")
    collector.run_window(state, broken, directory, clock, clock.sleep)
    doc = collector.read_window("r-1.b1.post", directory, 0.0, clock, clock.sleep)
    assert doc["done"] is True and doc["first"] is None and doc["snapshots"] == []
    assert doc["errors"] == {"0": "OSError: ethtool gone"} and clock.now == 2010.0
    # taken 3 s late (more than half a step): whole steps from its own time
    clock.now = 3000.0
    state = collector.start_window("r-1.b2.post", 5.0, 1, None, directory, 3000.0, 3010.0)
    seen.clear()
    collector.run_window(state, lambda: seen.append(clock.now + 3.0) or {"time": seen[-1]},
                         directory, clock, clock.sleep)
    doc = collector.read_window("r-1.b2.post", directory, 0.0, clock, clock.sleep)
    assert doc["t0"] == 3013.0 and doc["anchor"] == 3013.0
    # started again before its first snapshot: the earlier sampler takes none
    old = collector.start_window("w", 5.0, 1, None, directory, 3000.0, 3010.0)
    collector.start_window("w", 5.0, 1, None, directory, 3000.0, 3011.0)
    seen.clear()
    clock.now = 3000.0
    collector.run_window(old, lambda: seen.append(1) or {"time": 0}, directory, clock,
                         clock.sleep)
    assert seen == []
    for anchor in (2999.0, 3000.0 + 2 * 86400 + 1):
        with pytest.raises(collector.WindowError, match="--first-at"):
            collector.start_window("w2", 5.0, 1, None, directory, 3000.0, anchor)


def test_a_window_started_again_stops_the_earlier_sampler(tmp_path: Path) -> None:
    """A second start of a window (an action retried) takes it over: the earlier sampler stops
    at its next sample and its samples are never read as the new window's."""
    clock = FakeClock(1000.0)
    directory = str(tmp_path / "samples")
    old = collector.start_window("w", 5.0, 3, {"time": 1000.0}, directory, 1000.0)
    new = collector.start_window("w", 5.0, 3, {"time": 1001.0}, directory, 1001.0)
    took = []
    collector.run_window(old, lambda: took.append(1) or {"time": 0}, directory, clock,
                         clock.sleep)
    assert took == [] and len(clock.slept) == 1  # waited for its first sample, then stopped
    doc = collector.read_window("w", directory, 0.0, clock, clock.sleep)
    assert doc["t0"] == 1001.0 and doc["token"] == new["token"] != old["token"]


def test_a_window_refuses_bad_ids_steps_and_a_directory_others_can_write(tmp_path: Path) -> None:
    directory = str(tmp_path / "samples")
    for window in ("../x", "a/b", "", ".hidden", "x" * 129, "a b"):
        with pytest.raises(collector.WindowError, match="window id"):
            collector.start_window(window, 5.0, 2, {"time": 1.0}, directory, 1.0)
    with pytest.raises(collector.WindowError, match="--every"):
        collector.start_window("w", 0.0, 2, {"time": 1.0}, directory, 1.0)
    with pytest.raises(collector.WindowError, match="--samples"):
        collector.start_window("w", 5.0, 1001, {"time": 1.0}, directory, 1.0)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(collector.WindowError, match="refused"):
        collector.start_window("w", 5.0, 2, {"time": 1.0}, str(shared), 1.0)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(collector.WindowError, match="refused"):
        collector.start_window("w", 5.0, 2, {"time": 1.0}, str(tmp_path / "link"), 1.0)
    # and a week-old window's files go when the next window starts
    import time

    collector.start_window("old", 5.0, 1, {"time": 1.0}, directory, time.time())
    week_ago = time.time() - 8 * 86400
    for name in ("old.json", "old.owner"):
        os.utime(os.path.join(directory, name), (week_ago, week_ago))
    collector.start_window("new", 5.0, 1, {"time": 1.0}, directory, time.time())
    assert sorted(os.listdir(directory)) == ["new.json", "new.owner"]


def test_the_window_command_leaves_a_sampler_and_returns(tmp_path: Path) -> None:
    """The command line, as the counters playbook runs it (-I -S, the source alone): --window
    prints the first snapshot and returns while its sampler goes on in a session of its own,
    holding none of the command's pipes; --read prints the samples once taken; a bad option
    is refused before anything is sampled."""
    root = build_tree(tmp_path / "tree")
    base = [sys.executable, "-I", "-S", str(COLLECTOR), "--sysroot", str(root), "--host", "h1"]
    proc = subprocess.run(base + ["--window", "r-1.b3.post", "--every", "1", "--samples", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    assert first["host"] == "h1" and first["interfaces"]["eth0"]["statistics"]["rx_dropped"] == 10
    state = json.loads((root / "var/tmp/fleet-rollout/r-1.b3.post.json").read_text())
    assert state["done"] is False and state["t0"] == first["time"]
    proc = subprocess.run(base + ["--read", "r-1.b3.post", "--max-wait", "10"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["done"] is True and [s["host"] for s in doc["snapshots"]] == ["h1", "h1"]
    assert doc["snapshots"][1]["time"] - doc["t0"] == pytest.approx(2.0, abs=0.5)
    # --first-at ahead: the claim now, every sample (the first too) by the sampler
    import time

    at = time.time() + 1.0
    proc = subprocess.run(base + ["--window", "r-1.b4.post", "--every", "1", "--samples", "1",
                                  "--first-at", f"{at:.3f}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    claim = json.loads(proc.stdout)
    assert claim["deferred"] is True and claim["anchor"] == pytest.approx(at, abs=0.001)
    assert "interfaces" not in claim and time.time() < at  # returned before the first is due
    proc = subprocess.run(base + ["--read", "r-1.b4.post", "--max-wait", "10"],
                          capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    assert doc["done"] is True and doc["token"] == claim["token"]
    assert doc["first"]["host"] == "h1" and doc["first"]["time"] == pytest.approx(at, abs=0.5)
    assert doc["snapshots"][0]["time"] - doc["first"]["time"] == pytest.approx(1.0, abs=0.5)
    for name in ("r-1.b4.post.json", "r-1.b4.post.owner"):
        os.unlink(root / "var/tmp/fleet-rollout" / name)
    for bad, said in ((["--window", "w"], "--window needs --every and --samples"),
                      (["--first-at", "1"], "--first-at goes with --window"),
                      (["--window", "w", "--every", "1", "--samples", "1", "--anchor", "1",
                        "--first-at", "1"], "--first-at goes with --window"),
                      (["--window", "../w", "--every", "1", "--samples", "1"], "window id"),
                      (["--read", "nope", "--max-wait", "0"], "no samples on this host")):
        proc = subprocess.run(base + bad, capture_output=True, text=True, timeout=60)
        assert proc.returncode in (1, 2) and said in proc.stderr, (bad, proc.stderr)
    assert sorted(os.listdir(root / "var/tmp/fleet-rollout")) == ["r-1.b3.post.json",
                                                                  "r-1.b3.post.owner"]


def test_the_collector_imports_only_what_a_snapshot_needs(tmp_path: Path) -> None:
    """Every host starts the collector at each window's start: a snapshot of a sim tree loads
    neither typing, subprocess nor socket (ethtool and the hostname fallback import theirs)."""
    root = build_tree(tmp_path / "tree")
    proc = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c",
                           COLLECTOR.read_text(), "--sysroot", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["host"] == "web-001"
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:")}
    assert "json" in loaded and not loaded & {"typing", "subprocess", "socket"}, loaded


def test_collector_on_this_machine() -> None:
    """The real /sys and /proc of the machine running the tests (no sysroot)."""
    doc = collector.collect(ethtool=False)
    with open("/proc/sys/kernel/random/boot_id") as handle:
        assert doc["boot_id"] == handle.read().strip()
    assert "lo" in doc["interfaces"]
    assert doc["interfaces"]["lo"]["statistics"]["rx_packets"] >= 0
    assert doc["softnet"] and all("dropped" in row for row in doc["softnet"])
    assert "RcvbufErrors" in doc["snmp"]["Udp"]


def test_collector_runs_ethtool_on_this_machine() -> None:
    """Runs the real `ethtool -S` for interfaces with a device; errors, if any, are recorded."""
    if shutil.which("ethtool") is None:
        pytest.fail("ethtool is not installed (system-packages.txt lists it)")
    doc = collector.collect()
    for iface, entry in doc["interfaces"].items():
        assert entry["ethtool"] is None or all(isinstance(v, int)
                                               for v in entry["ethtool"].values()), iface
    assert all(isinstance(e, str) for e in doc["errors"])


# --- snapshots -> window deltas (reboot, wrap, reset) on collected trees ------------------------

def _snap(root: Path, when: float, **kwargs) -> dict:
    build_tree(root, **kwargs)
    return collector.collect(sysroot=str(root), clock=lambda: when)


def test_window_from_collected_snapshots(tmp_path: Path) -> None:
    start = _snap(tmp_path / "a", 1000.0)
    end = _snap(tmp_path / "b", 4600.0, nics={
        "eth0": {"rx_packets": 1_300_000, "rx_dropped": 15, "rx_missed_errors": 9,
                 "rx_fifo_errors": 0},
        "eth1": {"rx_packets": 600_000, "rx_dropped": 2, "rx_missed_errors": 0,
                 "rx_fifo_errors": 1},
        "lo": {"rx_packets": 999_999, "rx_dropped": 50, "rx_missed_errors": 0,
               "rx_fifo_errors": 0},
        "veth12ab": {"rx_packets": 0, "rx_dropped": 0, "rx_missed_errors": 0,
                     "rx_fifo_errors": 0},
    }, softnet={0: (1500, 4, 5), 1: (2500, 0, 9)}, udp_rcvbuf=130)
    counts = window_from_snapshots(start, end, DEFAULT_METRIC, expected_seconds=3600)
    assert counts.usable and counts.coverage == 1.0 and counts.seconds == 3600
    # eth0 +5 dropped +4 missed, softnet +3, udp +30; lo and veth excluded (veth even went down)
    assert counts.drops == 5 + 4 + 3 + 30
    assert counts.packets == 300_000 + 100_000
    assert counts.detail["softnet:dropped"] == 3


def test_window_softnet_wrap_on_one_cpu(tmp_path: Path) -> None:
    start = _snap(tmp_path / "a", 0.0, softnet={0: (10, 2**32 - 6, 1), 1: (10, 7, 1)})
    end = _snap(tmp_path / "b", 60.0, softnet={0: (20, 4, 1), 1: (20, 9, 1)})
    metric = metric_from_dict({"drops": ["softnet:dropped"], "packets": ["softnet:processed"]})
    counts = window_from_snapshots(start, end, metric)
    assert counts.drops == 10 + 2 and counts.wraps == 1 and counts.packets == 20


def test_window_with_reboot_is_unusable(tmp_path: Path) -> None:
    start = _snap(tmp_path / "a", 0.0)
    end = _snap(tmp_path / "b", 60.0, boot_id="8d1a6c4e-0000-4000-8000-00000000bbbb")
    counts = window_from_snapshots(start, end, DEFAULT_METRIC)
    assert not counts.usable and "reboot" in counts.problem


def test_window_with_counter_reset_is_unusable(tmp_path: Path) -> None:
    start = _snap(tmp_path / "a", 0.0)
    end = _snap(tmp_path / "b", 60.0, nics={
        "eth0": {"rx_packets": 20, "rx_dropped": 0, "rx_missed_errors": 0, "rx_fifo_errors": 0},
        "eth1": {"rx_packets": 600_000, "rx_dropped": 2, "rx_missed_errors": 0,
                 "rx_fifo_errors": 1},
    })
    counts = window_from_snapshots(start, end, DEFAULT_METRIC)
    assert not counts.usable
    assert "counter reset without reboot" in counts.problem and "eth0" in counts.problem
