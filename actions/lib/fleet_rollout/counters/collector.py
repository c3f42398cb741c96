#!/usr/bin/env python3
"""Host-side NIC drop counter collector: prints one JSON document (a counter snapshot).

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
import argparse
import fnmatch
import json
import os
import re
import socket
import subprocess
import sys
import time
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


# --------------------------------------------------------------------------------------------
# Parsers: pure functions of text.
# --------------------------------------------------------------------------------------------

def parse_counter_value(text: str, source: str = "counter") -> int:
    """One sysfs counter file (``/sys/class/net/IFACE/statistics/NAME``): a decimal integer."""
    value = text.strip()
    if not re.fullmatch(r"\d+", value):
        raise CounterFormatError(f"{source}: expected a non-negative integer, got {value[:40]!r}")
    return int(value)


def parse_ethtool_stats(text: str, source: str = "ethtool -S") -> Dict[str, int]:
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


def parse_softnet_stat(text: str, source: str = "/proc/net/softnet_stat") -> List[Dict[str, int]]:
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


def parse_snmp(text: str, source: str = "/proc/net/snmp") -> Dict[str, Dict[str, int]]:
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


def parse_snmp6(text: str, source: str = "/proc/net/snmp6") -> Dict[str, int]:
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


def _ethtool_text(iface: str, sysroot: Optional[str], timeout: float) -> Optional[str]:
    """Text of ``ethtool -S IFACE``; None when the interface has no driver statistics."""
    if sysroot is not None:
        path = os.path.join(sysroot, "run", "fleet-sim", "ethtool-S", iface)
        return _read(path) if os.path.isfile(path) else None
    proc = subprocess.run(  # noqa: UP022 (capture_output needs 3.7; target hosts may have 3.6)
        ["ethtool", "-S", iface], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, timeout=timeout, check=False,
    )
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        if "no stats available" in message or "Operation not supported" in message:
            return None
        raise CounterFormatError(f"ethtool -S {iface}: exit {proc.returncode}: {message[:200]}")
    return proc.stdout


def _wanted(iface: str, include: List[str], exclude: List[str]) -> bool:
    if not any(fnmatch.fnmatchcase(iface, pattern) for pattern in include):
        return False
    return not any(fnmatch.fnmatchcase(iface, pattern) for pattern in exclude)


def collect(
    sysroot: Optional[str] = None,
    include: Optional[List[str]] = None,
    exclude: Optional[List[str]] = None,
    ethtool: bool = True,
    ethtool_timeout: float = 5.0,
    host: Optional[str] = None,
    clock=time.time,
) -> Dict[str, Any]:
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
            except subprocess.TimeoutExpired:
                errors.append(f"ethtool -S {iface}: timed out after {ethtool_timeout:g} s")
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
    (a host whose clock is behind does not hold the collection); not at all when it is past.
    Returns the seconds slept."""
    left = min(at - clock(), max(0.0, limit))
    if left > 0:
        sleep(left)
        return left
    return 0.0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="collector.py",
        description="Print one JSON snapshot of this host's NIC drop counters.",
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
    parser.add_argument("--at", type=float, default=None, metavar="EPOCH",
                        help="take the snapshot at this time (seconds since the epoch, this "
                             "host's clock; at once when it is past): a collection started "
                             "early samples every host at the same moment")
    parser.add_argument("--max-wait", type=float, default=10.0, metavar="SECONDS",
                        help="wait at most this long for --at (default 10)")
    args = parser.parse_args(argv)
    if args.sysroot is not None and not os.path.isdir(args.sysroot):
        print(f"collector: --sysroot {args.sysroot}: not a directory", file=sys.stderr)
        return 2
    if args.at is not None:
        wait_until(args.at, args.max_wait)
    try:
        document = collect(
            sysroot=args.sysroot, include=args.interfaces, exclude=args.exclude,
            ethtool=not args.no_ethtool, host=args.host,
        )
    except CounterFormatError as exc:
        print(f"collector: {exc}", file=sys.stderr)
        return 1
    json.dump(document, sys.stdout, indent=args.indent, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
