"""fleet-lab guest UDP receiver: reads port 9999 at a limited rate.

The rate (packets/s) comes from the kernel command line (fleet.rate=N, set by the VM backend from
the BIOS settings in effect, see fleet_lab/vm/drop_model.py). The socket has a small receive buffer
(fleet.rcvbuf=BYTES), so when packets arrive faster than the receiver reads them the guest kernel
drops them and counts real drops: /proc/net/snmp Udp InErrors and RcvbufErrors.
Counters go to /run/fleet/udp.json once a second.
"""
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


def cmdline_value(name, default):
    try:
        with open("/proc/cmdline") as handle:
            words = handle.read().split()
    except OSError:
        return default
    value = default
    for word in words:
        if word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def write_stats(stats):
    tmp = STATS + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(stats, handle)
    os.replace(tmp, STATS)


def main():
    rate = max(1, int(cmdline_value("fleet.rate", "4000")))
    rcvbuf = int(cmdline_value("fleet.rcvbuf", "32768"))
    os.makedirs(os.path.dirname(STATS), exist_ok=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind(("0.0.0.0", PORT))
    sock.setblocking(False)
    stats = {"port": PORT, "rate_pps": rate, "rcvbuf": sock.getsockopt(socket.SOL_SOCKET,
             socket.SO_RCVBUF), "received": 0, "bytes": 0, "started": time.time()}
    write_stats(stats)
    tick = min(MAX_TICK, max(MIN_TICK, DATAGRAMS_PER_TICK / rate))
    burst = max(1.0, rate * tick * 2)
    credit = 0.0
    last = time.monotonic()
    next_stats = last + 1.0
    while True:
        now = time.monotonic()
        credit = min(burst, credit + (now - last) * rate)
        last = now
        got = 0
        while got < int(credit):
            try:
                data = sock.recv(65535)
            except BlockingIOError:
                break
            got += 1
            stats["bytes"] += len(data)
        credit -= got
        stats["received"] += got
        if now >= next_stats:
            stats["time"] = time.time()
            write_stats(stats)
            next_stats = now + 1.0
        if got == 0 and credit >= 1:
            select.select([sock], [], [], 0.5)  # idle: wait for traffic, do not spin
        else:
            time.sleep(tick)


if __name__ == "__main__":
    main()
