#!/usr/bin/env python3
"""make bench-redfish: Redfish cost per host and one apply across many simulated BMCs at once.

1. Requests per host for snapshot+stage+commit+reset+verify, per vendor personality.
2. One apply across N BMCs at once (default 500) with a simulated reboot time T: wall time / T
   (aim: under 1.2). The simulator runs in its own process (as a real BMC fleet would), the
   clients in a thread pool here.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "actions", "lib"))
sys.path.insert(0, ROOT)

from fleet_lab.bmcsim.vendors import VENDOR_KEYS, sample_desired  # noqa: E402
from fleet_rollout.redfish.client import BmcEndpoint  # noqa: E402
from fleet_rollout.redfish.operations import Timeouts, apply_bios  # noqa: E402

PASSWORD = "bench-password"


def _free_port_block(count: int) -> int:
    for base in range(21000, 60000 - count, count + 7):
        try:
            for port in (base, base + count - 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def start_sim(count: int, vendors: List[str], reboot: float, state_dir: str) -> Any:
    base = _free_port_block(count)
    cmd = [sys.executable, "-m", "fleet_runtime.cli", "bmc-sim", "--count", str(count),
           "--base-port", str(base), "--vendor", ",".join(vendors), "--reboot-seconds",
           str(reboot), "--state-dir", state_dir, "--password", PASSWORD]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    manifest = os.path.join(state_dir, "bmcs.json")
    deadline = time.time() + 120
    while not os.path.exists(manifest):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("bmc-sim did not start: " + proc.stderr.read().decode()[-2000:])
        time.sleep(0.2)
    with open(manifest) as handle:
        return proc, json.load(handle)


def per_personality(reboot: float) -> List[Dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, manifest = start_sim(len(VENDOR_KEYS), VENDOR_KEYS, reboot, tmp)
        try:
            for bmc in manifest["bmcs"]:
                ep = BmcEndpoint(bmc["host"], bmc["url"], "admin", PASSWORD,
                                 ca_bundle=manifest["ca"])
                started = time.monotonic()
                report = apply_bios(ep, sample_desired(bmc["vendor"]),
                                    Timeouts(graceful=60, force=60, boot=120, poll=1.0))
                req = report["requests"]
                rows.append({"vendor": bmc["vendor"], "GET": req.get("GET", 0),
                             "PATCH": req.get("PATCH", 0), "POST": req.get("POST", 0),
                             "DELETE": req.get("DELETE", 0), "total": sum(req.values()),
                             "seconds": round(time.monotonic() - started, 2)})
        finally:
            proc.terminate()
            proc.wait(10)
    return rows


def fleet_apply(hosts: int, reboot: float, poll: float) -> Dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, hosts * 4 + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        proc, manifest = start_sim(hosts, VENDOR_KEYS, reboot, tmp)
        try:
            def one(bmc: Dict[str, Any]) -> Dict[str, Any]:
                ep = BmcEndpoint(bmc["host"], bmc["url"], "admin", PASSWORD,
                                 ca_bundle=manifest["ca"], timeout=60, get_retries=6)
                t0 = time.monotonic()
                try:
                    report = apply_bios(ep, sample_desired(bmc["vendor"]),
                                        Timeouts(graceful=reboot * 3, force=reboot * 2,
                                                 boot=reboot * 5, poll=poll))
                    return {"ok": True, "seconds": time.monotonic() - t0,
                            "requests": sum(report["requests"].values())}
                except Exception as err:  # the bench reports failures, it does not stop
                    return {"ok": False, "seconds": time.monotonic() - t0, "error": str(err)}

            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=hosts) as pool:
                results = list(pool.map(one, manifest["bmcs"]))
            wall = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(10)
    ok = [r for r in results if r["ok"]]
    errors = sorted({r["error"][:120] for r in results if not r["ok"]})
    return {"hosts": hosts, "reboot_seconds": reboot, "poll_seconds": poll,
            "wall_seconds": round(wall, 2), "wall_over_reboot": round(wall / reboot, 3),
            "ok": len(ok), "failed": len(results) - len(ok), "errors": errors[:5],
            "requests_total": sum(r.get("requests", 0) for r in ok),
            "slowest_host_seconds": round(max(r["seconds"] for r in results), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--reboot-seconds", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = per_personality(reboot=2.0)
    fleet = fleet_apply(args.hosts, args.reboot_seconds, args.poll)
    if args.json:
        print(json.dumps({"per_personality": rows, "fleet": fleet}, indent=1))
        return 0 if fleet["failed"] == 0 else 1
    print("Requests per host: snapshot + stage + commit + reset + verify (one session)")
    print(f"{'vendor':<13}{'GET':>5}{'PATCH':>7}{'POST':>6}{'DELETE':>8}{'total':>7}{'secs':>7}")
    for r in rows:
        print(f"{r['vendor']:<13}{r['GET']:>5}{r['PATCH']:>7}{r['POST']:>6}{r['DELETE']:>8}"
              f"{r['total']:>7}{r['seconds']:>7}")
    print()
    print(f"One apply across {fleet['hosts']} BMCs at once (reboot {fleet['reboot_seconds']}s, "
          f"poll {fleet['poll_seconds']}s):")
    print(f"  wall {fleet['wall_seconds']}s  wall/reboot {fleet['wall_over_reboot']}  "
          f"(aim < 1.2)  ok {fleet['ok']}  failed {fleet['failed']}  "
          f"requests {fleet['requests_total']}  slowest host {fleet['slowest_host_seconds']}s")
    for err in fleet["errors"]:
        print(f"  error: {err}")
    return 0 if fleet["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
