"""The lab guest's UDP receiver (fleet_lab/vm/guest/fleet-udprecv.py), run on the host over
loopback: its own process (group), its own free port and stats file, stopped by PID.

A busy host stalls a TCG guest now and then. Here SIGSTOP/SIGCONT stands in for those stalls:
half of every second the receiver does not run, while the kernel keeps queueing what arrives
in its socket buffer. The receiver's rate is a rate over wall-clock time, so the stalls cost
nothing when the rate is above the traffic, and it still reads no faster than its rate when the
traffic is above it. (Before the fix, the receiver read 260 of 350 packets/s in a loaded CI run
with a 400 packets/s rate: it kept its rate only while it ran.)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

RECEIVER = Path(__file__).resolve().parents[2] / "fleet_lab/vm/guest/fleet-udprecv.py"
# 10 datagrams every 100 ms: the socket buffer (512 of these datagrams on loopback) holds 5 s of
# it, so the test's own stalls, and a loaded CI machine's delays on top of them, do not overflow
# it (at the demo's 350/s it held 1.5 s: in a CI run the stalls stretched past that and 920 of
# 2,100 datagrams were read)
PPS, SEND_TICK = 100, 0.1
PAYLOAD = b"x" * 64


def _start(tmp_path: Path, rate: int) -> tuple:
    stats = tmp_path / "udp.json"
    proc = subprocess.Popen([sys.executable, str(RECEIVER), "--bind", "127.0.0.1", "--port", "0",
                             "--stats", str(stats), "--rate", str(rate), "--rcvbuf", "212992"],
                            start_new_session=True)
    deadline = time.monotonic() + 20
    while not stats.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the receiver did not start"
        time.sleep(0.05)
    return proc, stats


def _stats(path: Path) -> dict:
    return json.loads(path.read_text())


def _stall_half_of_every_second(pid: int, done: threading.Event, stalls: list) -> None:
    """Stop the receiver for 0.5 s of every second until `done` (then continue it); `stalls`
    gets each stop's actual length (a loaded machine wakes this thread late)."""
    try:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            done.wait(0.5)
            os.kill(pid, signal.SIGCONT)
            stalls.append(time.monotonic() - stopped)
            done.wait(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)


def _send_with_stalls(proc: subprocess.Popen, port: int, seconds: float, stats: Path) -> tuple:
    """Send PPS datagrams/s for `seconds` while the receiver is stopped half of every second.
    Returns (datagrams sent, snapshots of the stats file taken about once a second, the
    stalls' actual lengths)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    done = threading.Event()
    stalls: list = []
    staller = threading.Thread(target=_stall_half_of_every_second,
                               args=(proc.pid, done, stalls))
    sent, snapshots = 0, []
    start = time.monotonic()
    next_snapshot = start + 1.0
    staller.start()
    try:
        while time.monotonic() - start < seconds:
            for _ in range(int(PPS * SEND_TICK)):
                sock.sendto(PAYLOAD, ("127.0.0.1", port))
                sent += 1
            if time.monotonic() >= next_snapshot:
                snapshots.append(_stats(stats))
                next_snapshot += 1.0
            time.sleep(max(0.0, start + (sent / PPS) - time.monotonic()))
    finally:
        done.set()
        staller.join()
        sock.close()
    return sent, snapshots, stalls


def _stop(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=10)


def _read_rate(snapshots: list) -> float:
    """Datagrams read per second between the first and the last timed stats snapshot."""
    timed = [snap for snap in snapshots if "time" in snap]  # written once a second
    first, last = timed[0], timed[-1]
    span = last["time"] - first["time"]
    assert span >= 6.0, snapshots
    return (last["received"] - first["received"]) / span


# A run counts when the machine kept to the test's stalls: none of them stretched past 1 s, and
# the receiver wrote its stats (once a second when it runs) at most 2.5 s apart. Under a loaded
# CI run (load 19 on 2 cores) one run's receiver wrote nothing for several seconds: what it owed
# then exceeded MAX_CATCH_UP, which no receiver of this design makes up.
ATTEMPTS, LONGEST_STALL, LONGEST_SILENCE = 3, 1.0, 2.5


def _disturbed(snapshots: list, stalls: list) -> str:
    """Why the machine did not give this run its conditions ('' if it did)."""
    if stalls and max(stalls) > LONGEST_STALL:
        return f"a stall lasted {max(stalls):.1f} s"
    times = sorted({snap["time"] for snap in snapshots if "time" in snap})
    gaps = [b - a for a, b in zip(times, times[1:])]
    if gaps and max(gaps) > LONGEST_SILENCE:
        return f"the receiver wrote no stats for {max(gaps):.1f} s"
    return ""


def _run(tmp_path: Path, rate: int, drain: bool) -> tuple:
    """Up to ATTEMPTS runs of 10 s (a fresh receiver each) until one is undisturbed:
    (sent, snapshots, received after the backlog is read, why earlier runs did not count)."""
    skipped = []
    for attempt in range(ATTEMPTS):
        workdir = tmp_path / f"run{attempt}"
        workdir.mkdir()
        proc, stats = _start(workdir, rate=rate)
        try:
            sent, snapshots, stalls = _send_with_stalls(proc, _stats(stats)["port"], 10.0, stats)
            deadline = time.monotonic() + (10 if drain else 0)
            while _stats(stats)["received"] < sent and time.monotonic() < deadline:
                time.sleep(0.2)  # the backlog of the last stall is read, then stats written
            received = _stats(stats)["received"]
        finally:
            _stop(proc)
        why = _disturbed(snapshots, stalls)
        if not why:
            return sent, snapshots, received, skipped
        skipped.append(why)
    raise AssertionError(f"no undisturbed run in {ATTEMPTS}: {skipped}")


def test_stalls_cost_no_packets_when_the_rate_is_above_the_traffic(tmp_path):
    # 1.15 x the traffic, as Home Snoop in the demo
    sent, snapshots, received, _ = _run(tmp_path, rate=115, drain=True)
    assert sent >= 0.9 * PPS * 10
    # the reads keep pace with the traffic through the stalls; a receiver that kept its rate
    # only while it ran reads 0.5 s x 115 + a burst of 0.2 s x 115 a second: 80 of the 100
    # (its backlog then waits in the buffer, which holds 5 s of this traffic)
    assert _read_rate(snapshots) >= 0.9 * PPS, snapshots
    assert received >= 0.97 * sent, (received, sent)  # and nothing is lost


def test_the_rate_holds_over_wall_clock_time_when_the_traffic_is_above_it(tmp_path):
    rate = 60
    _, snapshots, _, _ = _run(tmp_path, rate=rate, drain=False)
    read_rate = _read_rate(snapshots)
    # the stalls' share is read after each stall (the socket buffer is never empty); not faster
    # than the rate: the traffic's 100 would be. A receiver that kept its rate only while it ran
    # reads 0.5 s x 60 + a burst of 0.2 s x 60 a second: 42
    assert 0.85 * rate <= read_rate <= 1.15 * rate, (read_rate, snapshots)


def test_a_run_the_machine_disturbed_does_not_count():
    nominal = [{"time": t, "received": 0} for t in (1.0, 2.0, 3.1, 4.6)]
    assert _disturbed(nominal, [0.5, 0.52, 0.61]) == ""
    assert "stall lasted 1.4 s" in _disturbed(nominal, [0.5, 1.4])
    silent = nominal + [{"time": 8.0, "received": 0}]
    assert "no stats for 3.4 s" in _disturbed(silent, [0.5])
