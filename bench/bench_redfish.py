#!/usr/bin/env python3
"""make bench-redfish: Redfish cost per host and one apply across many simulated BMCs at once.

1. Requests per host for snapshot+stage+commit+reset+verify, per vendor personality: the
   client's count of what it put on the wire, checked against what each simulated BMC served.
2. The same against OpenStack's sushy-tools emulator (basic auth, no sessions; a raw attribute
   change and its restore, one reset confirmed by the host-side stand-in), checked against the
   emulator's own access log.
3. One apply across N BMCs at once (default 500) with a simulated reboot time T: wall time / T
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

import requests  # noqa: E402

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


def _served(bmc: Dict[str, Any], ca: str, reset: bool = False) -> int:
    """Requests the simulated BMC served (its own counters; the lab admin calls excluded)."""
    url = f"{bmc['url']}/_sim/" + ("counters" if reset else "state")
    resp = requests.request("DELETE" if reset else "GET", url, verify=ca, timeout=30)
    resp.raise_for_status()
    if reset:
        return 0
    counters = resp.json()["counters"]
    return sum(v for k, v in counters.items()
               if k.replace("session_", "") in ("GET", "POST", "PATCH", "DELETE", "PUT"))


def _row(name: str, req: Dict[str, int], served: int, seconds: float) -> Dict[str, Any]:
    total = sum(req.values())
    return {"vendor": name, "GET": req.get("GET", 0), "PATCH": req.get("PATCH", 0),
            "POST": req.get("POST", 0), "DELETE": req.get("DELETE", 0), "total": total,
            "server": served, "match": total == served, "seconds": round(seconds, 2)}


def per_personality(reboot: float) -> List[Dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, manifest = start_sim(len(VENDOR_KEYS), VENDOR_KEYS, reboot, tmp)
        try:
            for bmc in manifest["bmcs"]:
                ep = BmcEndpoint(bmc["host"], bmc["url"], "admin", PASSWORD,
                                 ca_bundle=manifest["ca"])
                _served(bmc, manifest["ca"], reset=True)
                started = time.monotonic()
                report = apply_bios(ep, sample_desired(bmc["vendor"]),
                                    Timeouts(graceful=60, force=60, boot=120, poll=1.0))
                rows.append(_row(bmc["vendor"], report["requests"],
                                 _served(bmc, manifest["ca"]), time.monotonic() - started))
        finally:
            proc.terminate()
            proc.wait(10)
    return rows


def against_sushy() -> Dict[str, Any]:
    """One host on OpenStack's sushy-tools emulator, counted against its access log."""
    from fleet_lab.bmcsim.sushy_lab import SushyLab, available, interop_cycle

    why = available()
    if why:
        return {"vendor": "sushy-tools", "error": why}
    with SushyLab(boot_seconds=2.0) as lab:
        ep = BmcEndpoint("sushy-1", lab.url, lab.username, lab.password, allow_http=True)
        start = len(lab.access_log())
        started = time.monotonic()
        out = interop_cycle(ep, lab, Timeouts(graceful=60, force=60, boot=120, poll=1.0))
        logged = lab.access_log()[start:]
    row = _row("sushy-tools", out["requests"], len(logged), time.monotonic() - started)
    row["same_sequence"] = [(m, p) for m, p, _ in logged] == [tuple(x) for x in out["sent"]]
    row["resets"] = out["reset"]["sent"]
    return row


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
    parser.add_argument("--skip-fleet", action="store_true",
                        help="only the per-host request counts")
    args = parser.parse_args()
    rows = per_personality(reboot=2.0)
    sushy = against_sushy()
    fleet = {"failed": 0} if args.skip_fleet else fleet_apply(args.hosts, args.reboot_seconds,
                                                               args.poll)
    counted_ok = all(r["match"] for r in rows) and sushy.get("match", False) and sushy.get(
        "same_sequence", False)
    if args.json:
        print(json.dumps({"per_personality": rows, "sushy_tools": sushy, "fleet": fleet},
                         indent=1))
        return 0 if fleet["failed"] == 0 and counted_ok else 1
    print("Requests per host: snapshot + stage + commit + reset + verify (one session); "
          "'server' = what the BMC served")
    print(f"{'vendor':<13}{'GET':>5}{'PATCH':>7}{'POST':>6}{'DELETE':>8}{'total':>7}"
          f"{'server':>8}{'secs':>7}")
    for r in rows + ([sushy] if "error" not in sushy else []):
        print(f"{r['vendor']:<13}{r['GET']:>5}{r['PATCH']:>7}{r['POST']:>6}{r['DELETE']:>8}"
              f"{r['total']:>7}{r['server']:>8}{r['seconds']:>7}"
              f"{'' if r['match'] else '  MISMATCH'}")
    if "error" in sushy:
        print(f"sushy-tools: not run ({sushy['error']})")
    else:
        print(f"  sushy-tools: basic auth, raw change + restore, resets sent {sushy['resets']}; "
              f"server = its access log lines, same method/path sequence: "
              f"{sushy['same_sequence']}")
    if args.skip_fleet:
        return 0 if counted_ok else 1
    print()
    print(f"One apply across {fleet['hosts']} BMCs at once (reboot {fleet['reboot_seconds']}s, "
          f"poll {fleet['poll_seconds']}s):")
    print(f"  wall {fleet['wall_seconds']}s  wall/reboot {fleet['wall_over_reboot']}  "
          f"(aim < 1.2)  ok {fleet['ok']}  failed {fleet['failed']}  "
          f"requests {fleet['requests_total']}  slowest host {fleet['slowest_host_seconds']}s")
    for err in fleet["errors"]:
        print(f"  error: {err}")
    return 0 if fleet["failed"] == 0 and counted_ok else 1


if __name__ == "__main__":
    sys.exit(main())
