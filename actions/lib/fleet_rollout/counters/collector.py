#!/usr/bin/env python3
"""Host-side NIC drop counter collector: prints one JSON document (a counter snapshot); or
starts a counter window sampled on the host (--window: the first snapshot printed, a sampler
left running for the others) and prints its samples later (--read).

This file is deliberately self-contained and uses the Python standard library only, so the very
same code runs in three places:

* on a target server, shipped alone (e.g. by an Ansible ``script`` task) and run as
  ``python3 collector.py``;
* inside the pack, imported as ``fleet_rollout.counters.collector`` (the text parsers are
  re-exported by ``fleet_rollout.counters.parsers``);
* in tests and on ``sim`` hosts against a fake tree: ``python3 collector.py --sysroot DIR``,
  where ``ethtool -S IFACE`` output is read from ``DIR/run/fleet-sim/ethtool-S/IFACE``.

What it reads (all counters, no interpretation beyond parsing):
  /sys/class/net/IFACE/statistics/*     per-interface kernel counters (64 bit)
  ethtool -S IFACE                      driver counters (names differ by driver)
  /proc/net/softnet_stat                per-CPU backlog counters (hex, 32 bit, wrap)
  /proc/net/snmp, /proc/net/snmp6       Udp RcvbufErrors, InErrors, ...
  /proc/sys/kernel/random/boot_id       identifies the boot, so deltas can see a reboot

Runs on Python 3.6+ (target hosts; hence no ``from __future__ import annotations`` here) and
3.8-3.11 (the pack).
"""
import fnmatch
import json
import os
import re
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations are strings: a host's run imports no typing (nor argparse,
    # subprocess, socket unless it needs them): the collector starts on every host and sample
    from typing import Any, Dict, List, Optional

try:  # inside the pack the library's own error type is used
    from fleet_rollout.errors import HostError as _ErrorBase
except ImportError:  # shipped alone to a target host: standard library only
    _ErrorBase = Exception  # type: ignore[misc,assignment]

SCHEMA = "fleet_rollout.counters/1"

# Column names of /proc/net/softnet_stat by position. Kernels print 9 (< 2.6.35), 10 (received_rps),
# 11 (flow_limit_count, 3.11), 13 (backlog_len and the CPU id, 5.10) or 15 (input/process queue
# lengths, 6.5) hex columns; columns 3-7 were fastroute and are always 0, cpu_collision is 0 on
# kernels since 4.x. Offline CPUs are skipped, so without the cpu column the line number is not
# the CPU id.
SOFTNET_COLUMNS = (
    "processed", "dropped", "time_squeeze", None, None, None, None, None, "cpu_collision",
    "received_rps", "flow_limit_count", "backlog_len", "cpu", "input_qlen", "process_qlen",
)  # None: always-zero columns, parsed but not reported
# Columns that are counters (the others are gauges or ids and must not be differenced).
SOFTNET_COUNTERS = ("processed", "dropped", "time_squeeze", "cpu_collision", "received_rps",
                    "flow_limit_count")
SOFTNET_WIDTH_BITS = 32

_ETHTOOL_LINE = re.compile(r"^\s*(\S(?:.*\S)?)\s*:\s+(-?\d+)\s*$")
_SNMP6_LINE = re.compile(r"^(\S+)\s+(-?\d+)\s*$")


class CounterFormatError(_ErrorBase):  # type: ignore[misc,valid-type]
    """Text that should be a counter file is not in the format the kernel or ethtool writes."""


class EthtoolTimeout(Exception):
    """ethtool -S did not answer in time."""


# --------------------------------------------------------------------------------------------
# Parsers: pure functions of text.
# --------------------------------------------------------------------------------------------

def parse_counter_value(text: str, source: str = "counter") -> int:
    """One sysfs counter file (``/sys/class/net/IFACE/statistics/NAME``): a decimal integer."""
    value = text.strip()
    if not re.fullmatch(r"\d+", value):
        raise CounterFormatError(f"{source}: expected a non-negative integer, got {value[:40]!r}")
    return int(value)


def parse_ethtool_stats(text: str, source: str = "ethtool -S") -> "Dict[str, int]":
    """``ethtool -S IFACE`` output -> {stat name: value}.

    The first line is ``NIC statistics:``; then one ``name: value`` per line. Names keep the
    driver's spelling (ixgbe ``rx_queue_0_packets``, i40e ``port.rx_dropped`` and
    ``rx-0.packets``, bnx2x ``[0]: rx_bytes``). A name printed twice keeps its first value.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CounterFormatError(f"{source}: empty output")
    header = lines[0].strip()
    if header != "NIC statistics:":
        raise CounterFormatError(
            f"{source}: not ethtool -S output (first line {header[:60]!r}, "
            "expected 'NIC statistics:')"
        )
    stats: Dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        match = _ETHTOOL_LINE.match(line)
        if match is None:
            raise CounterFormatError(f"{source}: line {number} is not 'name: value': {line!r}")
        name, value = match.group(1), int(match.group(2))
        stats.setdefault(name, value)
    return stats


def parse_softnet_stat(text: str, source: str = "/proc/net/softnet_stat") -> "List[Dict[str, int]]":
    """/proc/net/softnet_stat -> one dict per online CPU, named columns, ints.

    Every row carries ``cpu`` (the CPU id from column 13 where the kernel prints it, else the row
    number) and ``columns`` (how many the kernel printed). Unknown extra columns of future kernels
    are kept as ``colN``.
    """
    rows: List[Dict[str, int]] = []
    width: Optional[int] = None
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 9:
            raise CounterFormatError(
                f"{source}: line {number} has {len(fields)} columns, at least 9 expected"
            )
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise CounterFormatError(
                f"{source}: line {number} has {len(fields)} columns, earlier lines {width}"
            )
        row: Dict[str, int] = {}
        for index, field in enumerate(fields):
            try:
                value = int(field, 16)
            except ValueError:
                raise CounterFormatError(
                    f"{source}: line {number} column {index + 1} is not hex: {field!r}"
                ) from None
            if value >= 1 << SOFTNET_WIDTH_BITS:
                raise CounterFormatError(
                    f"{source}: line {number} column {index + 1} exceeds 32 bits: {field!r}"
                )
            name = SOFTNET_COLUMNS[index] if index < len(SOFTNET_COLUMNS) else f"col{index}"
            if name is not None:
                row[name] = value
        if "cpu" not in row:
            row["cpu"] = len(rows)
        row["columns"] = len(fields)
        rows.append(row)
    if not rows:
        raise CounterFormatError(f"{source}: no CPU lines")
    cpus = [row["cpu"] for row in rows]
    if len(set(cpus)) != len(cpus):
        raise CounterFormatError(f"{source}: a CPU id appears twice")
    return rows


def parse_snmp(text: str, source: str = "/proc/net/snmp") -> "Dict[str, Dict[str, int]]":
    """/proc/net/snmp (pairs of header and value lines per protocol) -> {proto: {field: int}}.

    Field sets differ by kernel (Udp gained InCsumErrors in 3.10, IgnoredMulti in 3.19 and
    MemErrors in 5.x); whatever the header names is returned. Values may be negative
    (Tcp MaxConn -1).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CounterFormatError(f"{source}: empty")
    if len(lines) % 2:
        raise CounterFormatError(f"{source}: odd number of lines; header/value pairs expected")
    result: Dict[str, Dict[str, int]] = {}
    for index in range(0, len(lines), 2):
        header, values = lines[index].split(), lines[index + 1].split()
        if not header or not header[0].endswith(":") or values[:1] != header[:1]:
            raise CounterFormatError(
                f"{source}: lines {index + 1}-{index + 2} are not a header/value pair: "
                f"{lines[index][:40]!r} / {lines[index + 1][:40]!r}"
            )
        proto = header[0][:-1]
        if len(header) != len(values):
            raise CounterFormatError(
                f"{source}: {proto} has {len(header) - 1} names but {len(values) - 1} values"
            )
        fields: Dict[str, int] = {}
        for name, value in zip(header[1:], values[1:]):
            try:
                fields[name] = int(value)
            except ValueError:
                raise CounterFormatError(
                    f"{source}: {proto} {name} is not an integer: {value!r}"
                ) from None
        result[proto] = fields
    return result


def parse_snmp6(text: str, source: str = "/proc/net/snmp6") -> "Dict[str, int]":
    """/proc/net/snmp6 (``Name   value`` per line) -> {name: int}."""
    result: Dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _SNMP6_LINE.match(line.strip())
        if match is None:
            raise CounterFormatError(f"{source}: line {number} is not 'name value': {line!r}")
        result[match.group(1)] = int(match.group(2))
    return result


# --------------------------------------------------------------------------------------------
# Collection.
# --------------------------------------------------------------------------------------------

def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _ethtool_text(iface: str, sysroot: "Optional[str]", timeout: float) -> "Optional[str]":
    """Text of ``ethtool -S IFACE``; None when the interface has no driver statistics."""
    if sysroot is not None:
        path = os.path.join(sysroot, "run", "fleet-sim", "ethtool-S", iface)
        return _read(path) if os.path.isfile(path) else None
    import subprocess  # only for a real host's ethtool

    try:
        # capture_output and text need 3.7; target hosts may have 3.6
        proc = subprocess.run(  # noqa: UP022
            ["ethtool", "-S", iface], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=timeout, check=False,  # noqa: UP021
        )
    except subprocess.TimeoutExpired:
        raise EthtoolTimeout(f"ethtool -S {iface}: timed out after {timeout:g} s") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        if "no stats available" in message or "Operation not supported" in message:
            return None
        raise CounterFormatError(f"ethtool -S {iface}: exit {proc.returncode}: {message[:200]}")
    return proc.stdout


def _wanted(iface: str, include: "List[str]", exclude: "List[str]") -> bool:
    if not any(fnmatch.fnmatchcase(iface, pattern) for pattern in include):
        return False
    return not any(fnmatch.fnmatchcase(iface, pattern) for pattern in exclude)


def collect(
    sysroot: "Optional[str]" = None,
    include: "Optional[List[str]]" = None,
    exclude: "Optional[List[str]]" = None,
    ethtool: bool = True,
    ethtool_timeout: float = 5.0,
    host: "Optional[str]" = None,
    clock=time.time,
) -> "Dict[str, Any]":
    """Read every counter source once and return the snapshot document.

    A source that is missing or unreadable is recorded in ``errors`` and collection goes on; only
    a missing boot_id or /sys/class/net makes the snapshot useless and raises.
    """
    root = sysroot if sysroot is not None else "/"

    def path(*parts: str) -> str:
        return os.path.join(root, *parts)

    include = include or ["*"]
    exclude = exclude or []
    errors: List[str] = []
    started = clock()

    try:
        boot_id = _read(path("proc", "sys", "kernel", "random", "boot_id")).strip()
    except OSError as exc:
        raise CounterFormatError(f"cannot read boot_id: {exc.strerror}") from None
    if not boot_id:
        raise CounterFormatError("boot_id is empty")

    if host is None:
        try:
            host = _read(path("proc", "sys", "kernel", "hostname")).strip() or None
        except OSError:
            host = None
        if host is None:
            import socket

            host = socket.gethostname()

    document: Dict[str, Any] = {
        "schema": SCHEMA,
        "host": host,
        "boot_id": boot_id,
        "time": None,
        "uptime_seconds": None,
        "kernel": None,
        "interfaces": {},
        "softnet": None,
        "snmp": None,
        "snmp6": None,
        "errors": errors,
    }
    try:
        document["kernel"] = _read(path("proc", "sys", "kernel", "osrelease")).strip()
    except OSError:
        pass
    try:
        document["uptime_seconds"] = float(_read(path("proc", "uptime")).split()[0])
    except (OSError, ValueError, IndexError):
        pass

    net_dir = path("sys", "class", "net")
    try:
        ifaces = sorted(os.listdir(net_dir))
    except OSError as exc:
        raise CounterFormatError(f"cannot list {net_dir}: {exc.strerror}") from None
    for iface in ifaces:
        if not _wanted(iface, include, exclude):
            continue
        stats_dir = os.path.join(net_dir, iface, "statistics")
        entry: Dict[str, Any] = {"statistics": {}, "ethtool": None}
        try:
            names = sorted(os.listdir(stats_dir))
        except OSError as exc:
            errors.append(f"{stats_dir}: {exc.strerror}")
            names = []
        for name in names:
            file_path = os.path.join(stats_dir, name)
            try:
                entry["statistics"][name] = parse_counter_value(_read(file_path), file_path)
            except (OSError, CounterFormatError) as exc:
                errors.append(f"{file_path}: {getattr(exc, 'strerror', None) or exc}")
        # ethtool only has driver statistics for real devices (and for sim trees that say so)
        has_device = os.path.exists(os.path.join(net_dir, iface, "device"))
        if ethtool and (sysroot is not None or has_device):
            try:
                text = _ethtool_text(iface, sysroot, ethtool_timeout)
                if text is not None:
                    entry["ethtool"] = parse_ethtool_stats(text, f"ethtool -S {iface}")
            except FileNotFoundError:
                errors.append(f"ethtool -S {iface}: ethtool is not installed")
                ethtool = False
            except EthtoolTimeout as exc:
                errors.append(str(exc))
            except (OSError, CounterFormatError) as exc:
                errors.append(str(exc))
        document["interfaces"][iface] = entry

    for key, parts, parser in (
        ("softnet", ("proc", "net", "softnet_stat"), parse_softnet_stat),
        ("snmp", ("proc", "net", "snmp"), parse_snmp),
        ("snmp6", ("proc", "net", "snmp6"), parse_snmp6),
    ):
        file_path = path(*parts)
        try:
            document[key] = parser(_read(file_path), file_path)
        except FileNotFoundError:
            if key != "snmp6":  # hosts without IPv6 have no snmp6
                errors.append(f"{file_path}: missing")
        except OSError as exc:
            errors.append(f"{file_path}: {exc.strerror}")
        except CounterFormatError as exc:
            errors.append(str(exc))

    # The snapshot's time is the middle of the reading, which takes milliseconds.
    document["time"] = round((started + clock()) / 2.0, 3)
    return document


def wait_until(at: float, limit: float, clock=time.time, sleep=time.sleep) -> float:
    """Sleep until `at` (seconds since the epoch, this host's clock), at most `limit` seconds
    (a clock that jumps back never stalls a window); not at all when it is past. Returns the
    seconds slept."""
    left = min(at - clock(), max(0.0, limit))
    if left > 0:
        sleep(left)
        return left
    return 0.0


# --------------------------------------------------------------------------------------------
# A window sampled on the host: the first snapshot at once (printed, as a plain collection), the
# others by a sampler left running here, one step apart on this host's clock; a later command
# (--read) prints them. A window of n steps costs two commands on the host, not n + 1. A window
# whose first snapshot is due later (--first-at: the post window, started during the soak) has
# all its samples taken by the sampler, the first one too.
# --------------------------------------------------------------------------------------------

WINDOW_SCHEMA = "fleet_rollout.counter-window/1"
WINDOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
SAMPLES_DIR = os.path.join("var", "tmp", "fleet-rollout")  # under the sysroot; kept on reboot
MAX_SAMPLES = 1000
MAX_EVERY = 86400.0
MAX_FIRST_AT = 2 * MAX_EVERY  # a soak of up to a day (the profile's limit), and clock skew
KEEP_SECONDS = 7 * 86400  # window files older than this go when the next window starts
READ_POLL = 0.1  # seconds between two looks of --read at a window not complete yet


class WindowError(Exception):
    """A window's samples cannot be taken or read on this host."""


def samples_dir(sysroot: "Optional[str]") -> str:
    return os.path.join(sysroot if sysroot is not None else "/", SAMPLES_DIR)


def _window_files(directory: str, window: str) -> "Dict[str, str]":
    if not WINDOW_ID.match(window):
        raise WindowError(f"window id {window[:60]!r}: letters, digits, '.', '_', '-' "
                          "(128 at most, not starting with a sign)")
    return {"samples": os.path.join(directory, window + ".json"),
            "owner": os.path.join(directory, window + ".owner")}


def _own_dir(directory: str) -> None:
    """Create the samples directory (0700); refuse one that another user could write."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise WindowError(f"{directory}: {exc.strerror}") from None
    import stat

    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise WindowError(f"{directory}: not a directory of this user that only it can write; "
                          "refused")


def _write_json(path: str, doc: "Dict[str, Any]") -> None:
    """Whole or not at all for a reader: a temp file renamed over the old one. Not synced: a
    window is read while its host runs (a crash loses the window anyway)."""
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(doc, handle, sort_keys=True)
    os.replace(temp, path)


def _load_json(path: str) -> "Optional[Dict[str, Any]]":
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _remove_old(directory: str, now: float) -> None:
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            if now - os.lstat(path).st_mtime > KEEP_SECONDS:
                os.unlink(path)
        except OSError:
            pass


def start_window(window: str, every: float, samples: int, first: "Optional[Dict[str, Any]]",
                 directory: str, now: float, anchor: "Optional[float]" = None
                 ) -> "Dict[str, Any]":
    """Claim the window for this launch (a later launch of the same window takes it over: the
    sampler of an earlier one stops at its next sample) and write its state: the samples to
    take after `first`, `every` seconds apart. They are due at anchor + k * every (the window's
    start on the controller: every host's steps end together) when the first snapshot is
    within half a step of the anchor, else at first + k * every (a host the start reached
    late, or whose clock is off, still gets whole steps). `first` None: the first snapshot is
    due at the anchor, later (the sampler takes it: deferred; t0 is set when it is taken)."""
    if not 0 < every <= MAX_EVERY:
        raise WindowError(f"--every {every!r}: more than 0, at most {MAX_EVERY:g} seconds")
    if not 1 <= samples <= MAX_SAMPLES:
        raise WindowError(f"--samples {samples!r}: 1 to {MAX_SAMPLES}")
    if first is None and (anchor is None or not 0 <= anchor - now <= MAX_FIRST_AT):
        raise WindowError(f"--first-at {anchor!r}: from now to {MAX_FIRST_AT:g} seconds ahead")
    files = _window_files(directory, window)
    _own_dir(directory)
    _remove_old(directory, now)
    if first is None:  # deferred: the sampler takes the first snapshot at the anchor
        token = f"{os.getpid()}-{anchor:.3f}"
        state = {"t0": None, "first": None, "deferred": True, "anchor": anchor}
    else:
        token = f"{os.getpid()}-{first['time']:.3f}"
        aligned = anchor is not None and abs(first["time"] - anchor) <= every / 2.0
        state = {"t0": first["time"], "anchor": anchor if aligned else first["time"]}
    state = dict({"schema": WINDOW_SCHEMA, "window": window, "token": token}, **state,
                 every=every, samples=samples, snapshots=[], errors={}, done=False)
    _write_json(files["owner"], {"token": token})
    _write_json(files["samples"], state)
    return state


def _owns(files: "Dict[str, str]", token: str) -> bool:
    owner = _load_json(files["owner"])
    return owner is not None and owner.get("token") == token


def run_window(state: "Dict[str, Any]", take, directory: str, clock=time.time,
               sleep=time.sleep) -> None:
    """The sampler: each sample due one step after the one before it (from the window's
    anchor), written after each; it stops when the window is done or another launch took it
    over. A failed sample is recorded (None, and its error) and the window goes on."""
    files = _window_files(directory, state["window"])
    if state.get("deferred") and state.get("first") is None and \
            not _take_first(state, take, files, clock, sleep):
        return
    for number in range(1, state["samples"] + 1):
        # at most two steps (the first is up to 1.5 from an anchored first snapshot): a clock
        # that jumps back never stalls the window
        wait_until(state["anchor"] + number * state["every"], 2 * state["every"], clock, sleep)
        if not _owns(files, state["token"]):  # taken over: no sample for a window not its own
            return
        try:
            state["snapshots"].append(take())
        except Exception as exc:  # one sample's failure is that sample's, not the window's
            state["snapshots"].append(None)
            state["errors"][str(number)] = f"{type(exc).__name__}: {exc}"[:300]
        state["done"] = number == state["samples"]
        if not _owns(files, state["token"]):  # taken over: the later start's state stays
            return
        _write_json(files["samples"], state)


def _take_first(state: "Dict[str, Any]", take, files: "Dict[str, str]", clock=time.time,
                sleep=time.sleep) -> bool:
    """A deferred window's first snapshot, at its anchor (written at once: a read sees it);
    False when the window cannot go on (taken over, or the snapshot failed: no step can be
    measured from it, the read says why)."""
    wait_until(state["anchor"], MAX_FIRST_AT, clock, sleep)
    if not _owns(files, state["token"]):
        return False
    try:
        state["first"] = take()
        state["t0"] = state["first"]["time"]
        if abs(state["t0"] - state["anchor"]) > state["every"] / 2.0:
            state["anchor"] = state["t0"]  # taken late (a loaded host): whole steps from it
    except Exception as exc:
        state["errors"]["0"] = f"{type(exc).__name__}: {exc}"[:300]
        state["done"] = True
    if _owns(files, state["token"]):
        _write_json(files["samples"], state)
    return not state["done"]


def read_window(window: str, directory: str, max_wait: float, clock=time.time,
                sleep=time.sleep) -> "Dict[str, Any]":
    """The window's state once it is done, waiting at most `max_wait` seconds; after that what
    its sampler took so far (done: false). WindowError when this host has no such window."""
    files = _window_files(directory, window)
    deadline = clock() + max(0.0, max_wait)
    while True:
        owner, doc = _load_json(files["owner"]), _load_json(files["samples"])
        current = owner is not None and doc is not None and doc.get("token") == owner.get("token")
        if current and doc.get("done"):
            return doc
        left = deadline - clock()
        if left <= 0:
            if current:
                return doc
            raise WindowError(f"window {window}: no samples on this host (never started here, "
                              "or removed)" if owner is None else
                              f"window {window}: its sampler has written nothing readable")
        sleep(min(READ_POLL, left))


def _detach() -> bool:
    """Fork the sampler off this command: its own session, stdio on /dev/null, no other file
    descriptor (an SSH session or Ansible's pipes do not wait for it). True in the sampler."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child:
        _pid, status = os.waitpid(child, 0)
        if status != 0:
            raise WindowError("could not start the window's sampler")
        return False
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 65536)
    except OSError:
        os._exit(1)
    return True


def _arguments(argv: "Optional[List[str]]") -> "Any":
    import argparse

    parser = argparse.ArgumentParser(
        prog="collector.py",
        description="Print one JSON snapshot of this host's NIC drop counters; or start a "
                    "window sampled here (--window) and print its samples later (--read).",
    )
    parser.add_argument("--sysroot", metavar="DIR",
                        help="read a fake tree under DIR instead of / (ethtool -S output from "
                             "DIR/run/fleet-sim/ethtool-S/IFACE)")
    parser.add_argument("--interfaces", metavar="GLOB", nargs="+", default=None,
                        help="only these interfaces (shell globs; default: all)")
    parser.add_argument("--exclude", metavar="GLOB", nargs="+", default=None,
                        help="skip these interfaces (shell globs)")
    parser.add_argument("--no-ethtool", action="store_true", help="do not run ethtool -S")
    parser.add_argument("--host", help="host name to report (default: the kernel's hostname)")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print the JSON")
    parser.add_argument("--window", metavar="ID",
                        help="print this snapshot as a window's first and leave a sampler "
                             "taking --samples more, --every seconds apart (state under "
                             "/var/tmp/fleet-rollout)")
    parser.add_argument("--every", type=float, metavar="SECONDS")
    parser.add_argument("--samples", type=int, metavar="N")
    parser.add_argument("--anchor", type=float, metavar="EPOCH",
                        help="the window's start on the controller: the samples are due at "
                             "ANCHOR + k * --every if this snapshot is within half a step of "
                             "it (else a step apart from this snapshot)")
    parser.add_argument("--first-at", type=float, metavar="EPOCH",
                        help="the window's first snapshot is due at EPOCH (its anchor): while "
                             "that is ahead the sampler takes it then, and this prints the "
                             "window's claim, not a snapshot")
    parser.add_argument("--read", metavar="ID",
                        help="print the window's samples (JSON), once it is done or after "
                             "--max-wait seconds")
    parser.add_argument("--max-wait", type=float, default=10.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    if args.window is not None and (args.every is None or args.samples is None):
        parser.error("--window needs --every and --samples")
    if args.window is not None and args.read is not None:
        parser.error("--window and --read: one of them")
    if args.first_at is not None and (args.window is None or args.anchor is not None):
        parser.error("--first-at goes with --window, without --anchor (it is the anchor)")
    return args


def main(argv: "Optional[List[str]]" = None) -> int:
    args = _arguments(argv)
    if args.sysroot is not None and not os.path.isdir(args.sysroot):
        print(f"collector: --sysroot {args.sysroot}: not a directory", file=sys.stderr)
        return 2

    def take() -> "Dict[str, Any]":
        return collect(sysroot=args.sysroot, include=args.interfaces, exclude=args.exclude,
                       ethtool=not args.no_ethtool, host=args.host)

    directory = samples_dir(args.sysroot)
    try:
        if args.read is not None:
            document = read_window(args.read, directory, args.max_wait)
        else:
            anchor = args.anchor if args.first_at is None else args.first_at
            deferred = args.first_at is not None and args.first_at > time.time()
            document = None if deferred else take()
            if args.window is not None:
                state = start_window(args.window, args.every, args.samples, document,
                                     directory, time.time(), anchor)
                if deferred:  # the claim: what the read is checked against
                    document = {key: state[key] for key in ("schema", "window", "token",
                                                            "anchor", "deferred")}
                if _detach():
                    try:
                        run_window(state, take, directory)
                    finally:
                        os._exit(0)
    except (CounterFormatError, WindowError) as exc:
        print(f"collector: {exc}", file=sys.stderr)
        return 1
    json.dump(document, sys.stdout, indent=args.indent, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
