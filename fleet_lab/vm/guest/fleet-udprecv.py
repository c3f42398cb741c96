"""fleet-lab guest UDP receiver: reads port 9999 at a limited rate.

The rate (packets/s) comes from the firmware (fleet.rate=N in the fw_cfg file the VM backend sets
from the BIOS settings in effect, see fleet_lab/vm/drop_model.py and qemu.py FW_CFG_NAME). The
socket has a small receive buffer (fleet.rcvbuf=BYTES, from there too), so when packets arrive
faster than the receiver reads them the guest kernel drops them and counts real drops:
/proc/net/snmp Udp InErrors and RcvbufErrors.
Counters go to /run/fleet/udp.json once a second.

The rate is a rate over wall-clock time. A busy host stalls a TCG guest (or this process) now and
then; what arrived meanwhile waits in the socket buffer, and the next read takes what the stall
owed, up to MAX_CATCH_UP seconds of the rate. Capacity that found nothing waiting is not kept,
so an idle receiver does not save up reads for later. Without this the receiver kept the rate
only while it ran: in a CI run that loaded both host cores, Home Snoop canaries (400 packets/s
against 350 offered) read 260 packets/s and dropped 26%, where the model says none.

Options (for tests on the host; the guest runs it without any): --bind ADDR, --port N,
--stats PATH, --rate N, --rcvbuf BYTES.
"""
import argparse
import json
import os
import select
import socket
import time

PORT = 9999
STATS = "/run/fleet/udp.json"
# Seconds between reading bursts: long enough that a TCG guest does not spend its CPU waking up
# (every wakeup costs it dearly: 250 a second took a quarter of a host core per guest; 40 a
# second, with the lab's sender bursting every 20 ms, 12.8% at the demo's 350 packets/s; 10, and
# bursts every 100 ms, 5.5%), short enough that what arrives between two reads (about 40
# datagrams at the model rate) fits the socket buffer (about 85 of the lab's datagrams), so drops
# come only from the rate, not from the burst size.
MAX_TICK, MIN_TICK, DATAGRAMS_PER_TICK = 0.1, 0.004, 40.0
# The longest stall whose reads are made up afterwards (the demo's socket buffer holds 1.6 s of
# its traffic; a longer stall overflows it anyway).
MAX_CATCH_UP = 2.0


# The lab's BIOS settings as QEMU passes them (fw_cfg, qemu_fw_cfg module loaded by /init).
FIRMWARE = "/sys/firmware/qemu_fw_cfg/by_name/opt/org.fleet-lab/boot/raw"


def firmware_value(name, default):
    try:
        with open(FIRMWARE) as handle:
            words = handle.read().split()
    except OSError:
        return default
    value = default
    for word in words:
        if word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def write_stats(stats, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(json.dumps(stats))  # dumps: the C encoder (dump runs the Python one)
    os.replace(tmp, path)


class Budget:
    """How many datagrams the receiver may read now: `rate` per second of wall-clock time since
    the last read, at most MAX_CATCH_UP seconds' worth; unused when nothing was waiting, it
    shrinks back to `spare` (two ticks' worth)."""

    def __init__(self, rate, tick, now):
        self.rate = rate
        self.spare = max(1.0, rate * tick * 2)
        self.most = max(self.spare, rate * MAX_CATCH_UP)
        self.credit = 0.0
        self.last = now

    def allowed(self, now):
        self.credit = min(self.most, self.credit + (now - self.last) * self.rate)
        self.last = now
        return int(self.credit)

    def spent(self, got, drained):
        """`got` datagrams were read; `drained`: the socket had no more."""
        self.credit -= got
        if drained:
            self.credit = min(self.credit, self.spare)

    def restart(self, now):
        """The receiver waited for traffic: that time is not capacity owed."""
        self.last = now


def read_up_to(sock, limit):
    """Read at most `limit` datagrams; (count, bytes, drained)."""
    got = size = 0
    while got < limit:
        try:
            data = sock.recv(65535)
        except BlockingIOError:
            return got, size, True
        got += 1
        size += len(data)
    return got, size, False


def serve(sock, rate, stats_path):
    stats = {"port": sock.getsockname()[1], "rate_pps": rate,
             "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), "received": 0,
             "bytes": 0, "started": time.time()}
    write_stats(stats, stats_path)
    tick = min(MAX_TICK, max(MIN_TICK, DATAGRAMS_PER_TICK / rate))
    budget = Budget(rate, tick, time.monotonic())
    next_stats = time.monotonic() + 1.0
    while True:
        now = time.monotonic()
        got, size, drained = read_up_to(sock, budget.allowed(now))
        budget.spent(got, drained)
        stats["received"] += got
        stats["bytes"] += size
        if now >= next_stats:
            stats["time"] = time.time()
            write_stats(stats, stats_path)
            next_stats = now + 1.0
        if got == 0 and drained:
            select.select([sock], [], [], 0.5)  # idle: wait for traffic, do not spin
            budget.restart(time.monotonic())
        else:
            time.sleep(tick)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--stats", default=STATS)
    parser.add_argument("--rate", type=int, default=None)
    parser.add_argument("--rcvbuf", type=int, default=None)
    args = parser.parse_args(argv)
    rate = max(1, args.rate or int(firmware_value("fleet.rate", "4000")))
    rcvbuf = args.rcvbuf or int(firmware_value("fleet.rcvbuf", "32768"))
    os.makedirs(os.path.dirname(args.stats) or ".", exist_ok=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((args.bind, args.port))
    sock.setblocking(False)
    serve(sock, rate, args.stats)


if __name__ == "__main__":
    main()
