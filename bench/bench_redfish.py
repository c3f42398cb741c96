#!/usr/bin/env python3
"""make bench-redfish: Redfish cost per host and one apply across many simulated BMCs at once.

1. Requests per host for snapshot+stage+commit+reset+verify, per vendor personality: the
   client's count of what it put on the wire, checked against what each simulated BMC served.
2. The same against OpenStack's sushy-tools emulator (basic auth, no sessions; a raw attribute
   change and its restore, one reset confirmed by the host-side stand-in), checked against the
   emulator's own access log.
3. One apply across N BMCs at once (default 500 and 2,000) with a simulated reboot time T:
   wall time over a TRUE lower bound, and requests per host per personality. The lower bound is
   what no client can beat: the reboot phases the simulated BMCs go through until they report
   POST finished (fleet_lab.bmcsim.bmc_state.Timing: shutdown + off + POST, or half of POST for
   iLO's PostState InPostDiscoveryComplete), plus the client's own unavoidable waits (the
   Retry-After a task-returning PATCH asks for). The client is told the reboot time to expect
   (Timeouts.reboot), as an operator would configure it. The simulator runs in its own process
   (as a real BMC fleet would), the clients in a thread pool here; on a small machine the fleet
   runs are CPU-bound (TLS and JSON on both sides), which the wall time shows.
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

import requests
from cpu_account import process_cpu_seconds

from fleet_lab.bmcsim.bmc_state import Timing
from fleet_lab.bmcsim.vendors import VENDOR_KEYS, sample_desired, vendor
from fleet_rollout.redfish import attribute_registry as rf_registry
from fleet_rollout.redfish.client import BmcEndpoint
from fleet_rollout.redfish.operations import Timeouts, apply_bios, restore_bios
from fleet_runtime.paths import REPO_ROOT as ROOT

PASSWORD = "bench-password"
TASK_RETRY_AFTER = 1.0  # seconds: the Retry-After of the simulator's PATCH task monitor (http.py)


def lower_bound(vendor_key: str, reboot: float) -> float:
    """Seconds from the first request to POST finished as this simulated BMC reports it, plus
    the waits the BMC asks the client for: nothing can finish an apply sooner."""
    spec = vendor(vendor_key)
    t = Timing(reboot)
    post = t.post / 2 if spec.post_state in ("hp", "hpe") else t.post  # when "done" shows
    waits = TASK_RETRY_AFTER if spec.patch_returns_task else 0.0
    return t.shutdown + t.off + post + waits


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
    while True:
        try:
            with open(manifest) as handle:
                doc = json.load(handle)
            if len(doc.get("bmcs") or []) == count:
                return proc, doc
        except (OSError, ValueError):
            pass  # not there yet, or still being written
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            proc.wait(10)
            raise RuntimeError("bmc-sim did not start: " + proc.stderr.read().decode()[-2000:])
        time.sleep(0.2)


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


def _os_running(bmc: Dict[str, Any], ca: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = requests.get(f"{bmc['url']}/_sim/state", verify=ca, timeout=30).json()
        if doc["boot_state"] == "OSRunning":
            return
        time.sleep(0.1)


def per_personality(reboot: float) -> List[Dict[str, Any]]:
    """One apply, then one restore, per personality; each from a cold registry cache (a fresh
    process, as an st2 action runs)."""
    rows = []
    timeouts = Timeouts(graceful=60, force=60, boot=120, poll=0.5, reboot=reboot)
    with tempfile.TemporaryDirectory() as tmp:
        proc, manifest = start_sim(len(VENDOR_KEYS), VENDOR_KEYS, reboot, tmp)
        try:
            for bmc in manifest["bmcs"]:
                ep = BmcEndpoint(bmc["host"], bmc["url"], "admin", PASSWORD,
                                 ca_bundle=manifest["ca"])
                rf_registry._CACHE.clear()
                _served(bmc, manifest["ca"], reset=True)
                started = time.monotonic()
                report = apply_bios(ep, sample_desired(bmc["vendor"]), timeouts)
                row = _row(bmc["vendor"], report["requests"], _served(bmc, manifest["ca"]),
                           time.monotonic() - started)
                row["bound"] = round(lower_bound(bmc["vendor"], reboot), 2)
                _os_running(bmc, manifest["ca"])
                rf_registry._CACHE.clear()
                _served(bmc, manifest["ca"], reset=True)
                restored = restore_bios(ep, report["snapshot"], timeouts)
                row["restore"] = sum(restored["requests"].values())
                row["restore_server"] = _served(bmc, manifest["ca"])
                row["match"] = row["match"] and row["restore"] == row["restore_server"]
                rows.append(row)
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
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, hosts * 8 + 256)), hard))
    rf_registry._CACHE.clear()  # one registry fetch per model, then shared (one process)
    with tempfile.TemporaryDirectory() as tmp:
        proc, manifest = start_sim(hosts, VENDOR_KEYS, reboot, tmp)
        try:
            # generous timeouts: on a small machine the run is CPU-bound, and a timeout would
            # measure the machine, not the client
            timeouts = Timeouts(graceful=max(60.0, reboot * 10), force=max(60.0, reboot * 10),
                                boot=max(300.0, reboot * 30), poll=poll, reboot=reboot)

            def one(bmc: Dict[str, Any]) -> Dict[str, Any]:
                ep = BmcEndpoint(bmc["host"], bmc["url"], "admin", PASSWORD,
                                 ca_bundle=manifest["ca"], timeout=120, get_retries=6)
                t0 = time.monotonic()
                try:
                    report = apply_bios(ep, sample_desired(bmc["vendor"]), timeouts)
                    return {"ok": True, "seconds": time.monotonic() - t0,
                            "vendor": bmc["vendor"], "resets": report["reset"]["sent"],
                            "requests": sum(report["requests"].values())}
                except Exception as err:  # the bench reports failures, it does not stop
                    return {"ok": False, "seconds": time.monotonic() - t0, "error": str(err),
                            "vendor": bmc["vendor"]}

            cpu0 = process_cpu_seconds(os.getpid()), process_cpu_seconds(proc.pid)
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=hosts) as pool:
                results = list(pool.map(one, manifest["bmcs"]))
            wall = time.monotonic() - started
            cpu = (process_cpu_seconds(os.getpid()) - cpu0[0],
                   process_cpu_seconds(proc.pid) - cpu0[1])
        finally:
            proc.terminate()
            proc.wait(10)
    ok = [r for r in results if r["ok"]]
    errors = sorted({r["error"][:120] for r in results if not r["ok"]})
    vendors = sorted({b["vendor"] for b in manifest["bmcs"]})
    bound = max(lower_bound(v, reboot) for v in vendors)
    per_vendor: Dict[str, Dict[str, Any]] = {}
    for key in vendors:
        counts = [r["requests"] for r in ok if r["vendor"] == key]
        if counts:
            per_vendor[key] = {"hosts": len(counts), "mean": round(sum(counts) / len(counts), 2),
                               "max": max(counts)}
    return {"hosts": hosts, "reboot_seconds": reboot, "poll_seconds": poll,
            "wall_seconds": round(wall, 2), "lower_bound_seconds": round(bound, 2),
            "wall_over_bound": round(wall / bound, 3),
            "wall_over_reboot": round(wall / reboot, 3),
            "ok": len(ok), "failed": len(results) - len(ok), "errors": errors[:5],
            "one_reset_each": all(r["resets"] == ["GracefulRestart"] for r in ok),
            "requests_total": sum(r.get("requests", 0) for r in ok),
            "requests_per_host": per_vendor,
            "slowest_host_seconds": round(max(r["seconds"] for r in results), 2),
            "client_cpu_seconds": round(cpu[0], 1), "sim_cpu_seconds": round(cpu[1], 1),
            "cpus": os.cpu_count()}


BUDGET = 20  # requests per host for one apply (tests/pack/test_redfish_request_budget.py)


def _print_fleet(fleet: Dict[str, Any]) -> None:
    print(f"One apply across {fleet['hosts']} BMCs at once (reboot {fleet['reboot_seconds']}s, "
          f"poll {fleet['poll_seconds']}s, expected reboot told to the client):")
    print(f"  wall {fleet['wall_seconds']}s  lower bound {fleet['lower_bound_seconds']}s  "
          f"wall/bound {fleet['wall_over_bound']}  wall/reboot {fleet['wall_over_reboot']}  "
          f"ok {fleet['ok']}  failed {fleet['failed']}  one reset each "
          f"{fleet['one_reset_each']}  slowest host {fleet['slowest_host_seconds']}s")
    per = "  ".join(f"{k} {v['mean']:g} (max {v['max']})"
                    for k, v in fleet["requests_per_host"].items())
    print(f"  requests per host: {per}; total {fleet['requests_total']}")
    print(f"  CPU during the run: client {fleet['client_cpu_seconds']}s, simulator "
          f"{fleet['sim_cpu_seconds']}s on {fleet['cpus']} CPUs (wall above the bound is this "
          "machine's CPU, TLS and JSON on both sides, not waiting)")
    for err in fleet["errors"]:
        print(f"  error: {err}")


def record_results(rows: List[Dict[str, Any]], sushy: Dict[str, Any],
                   fleets: List[Dict[str, Any]]) -> None:
    """This run's figures in bench/RESULTS.md (results.py): requests per host per personality
    (and sushy-tools), and per fleet size the wall time against its lower bound."""
    import results as bench_results

    figures: List[Any] = []
    for r in rows + ([sushy] if "error" not in sushy else []):
        figures.append((f"requests per host, one apply, {r['vendor']}", r["server"], "requests"))
        if "restore" in r:
            figures.append((f"requests per host, one restore, {r['vendor']}", r["restore"],
                            "requests"))
    for fleet in fleets:
        at = f"{fleet['hosts']} BMCs at once, reboot {fleet['reboot_seconds']:g} s"
        figures += [(f"{at}: wall", fleet["wall_seconds"], "s"),
                    (f"{at}: wall / lower bound", fleet["wall_over_bound"], ""),
                    (f"{at}: failed", fleet["failed"], "hosts"),
                    (f"{at}: client CPU", fleet["client_cpu_seconds"], "CPU-s")]
    bench_results.record("bench-redfish", figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="500,2000",
                        help="fleet sizes, comma-separated (default 500,2000)")
    parser.add_argument("--reboot-seconds", type=float, default=4.0)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-fleet", action="store_true",
                        help="only the per-host request counts")
    parser.add_argument("--skip-sushy", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in str(args.hosts).split(",") if x.strip()]
    rows = per_personality(reboot=2.0)
    sushy = {"vendor": "sushy-tools", "error": "skipped"} if args.skip_sushy else against_sushy()
    fleets = [] if args.skip_fleet else [fleet_apply(n, args.reboot_seconds, args.poll)
                                         for n in sizes]
    sushy_ok = "error" in sushy or (sushy.get("match", False) and sushy.get("same_sequence",
                                                                            False))
    counted_ok = all(r["match"] for r in rows) and sushy_ok
    within = all(r["server"] <= BUDGET for r in rows)
    failed = sum(f["failed"] for f in fleets)
    status = 0 if failed == 0 and counted_ok and within else 1
    record_results(rows, sushy, fleets)
    if args.json:
        print(json.dumps({"per_personality": rows, "sushy_tools": sushy, "fleets": fleets},
                         indent=1))
        return status
    print("Requests per host: snapshot + stage + commit + reset + verify (one apply_bios "
          "session, login and logout included, cold registry cache); 'server' = what the BMC "
          f"served; budget {BUDGET}")
    print(f"{'vendor':<13}{'GET':>5}{'PATCH':>7}{'POST':>6}{'DELETE':>8}{'total':>7}"
          f"{'server':>8}{'restore':>9}{'secs':>7}{'bound':>7}")
    for r in rows + ([sushy] if "error" not in sushy else []):
        print(f"{r['vendor']:<13}{r['GET']:>5}{r['PATCH']:>7}{r['POST']:>6}{r['DELETE']:>8}"
              f"{r['total']:>7}{r['server']:>8}{r.get('restore', '-'):>9}{r['seconds']:>7}"
              f"{r.get('bound', '-'):>7}{'' if r['match'] else '  MISMATCH'}"
              f"{'  OVER BUDGET' if r['server'] > BUDGET and 'bound' in r else ''}")
    if "error" in sushy:
        print(f"sushy-tools: not run ({sushy['error']})")
    else:
        print(f"  sushy-tools: basic auth, raw change + restore, resets sent {sushy['resets']}; "
              f"server = its access log lines, same method/path sequence: "
              f"{sushy['same_sequence']}")
    for fleet in fleets:
        print()
        _print_fleet(fleet)
    return status


if __name__ == "__main__":
    sys.exit(main())
