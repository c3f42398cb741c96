#!/usr/bin/env python3
"""make bench-lab: the lab's costs.

- VM backend (bench_lab_vm.py): time to bring up N VMs, Redfish-free power cycle until SSH.
- One Redfish reset of a lab VM until SSH answers (BMC simulator -> QEMU restart -> sshd).
- Ansible time per task (health playbook) on VMs and on sim hosts.
- sim backend with 2,000 hosts: time to bring up and the daemon's memory (RSS).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import yaml

from fleet_lab import lab
from fleet_rollout.redfish.client import BmcEndpoint, RedfishSession
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.power import reset
from fleet_runtime.paths import REPO_ROOT as ROOT


def _rss_mb(pid: int) -> float:
    total = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            total = int(line.split()[1])
    return round(total / 1024, 1)


def sim_scale(hosts: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as state:
        inventory = os.path.join(state, "inventory.yml")
        started = time.monotonic()
        lab.up(lab.LabConfig(hosts=hosts, backend="sim", vendors=["generic", "dell-idrac8"]),
               state, inventory, progress=lambda _m: None, timeout=1800)
        up = time.monotonic() - started
        pid = lab.daemon_pid(state)
        rss = _rss_mb(pid) if pid else None
        side = lab.host_side(state, inventory)
        side.forks = 20
        sample = [f"lab-{i + 1:03d}" for i in range(min(hosts, 50))]
        t0 = time.monotonic()
        results = side.health(sample)
        ansible = time.monotonic() - t0
        lab.down(state, progress=lambda _m: None)
    return {"hosts": hosts, "up_seconds": round(up, 1), "daemon_rss_mb": rss,
            "ansible_health_hosts": len(sample),
            "ansible_health_seconds": round(ansible, 2),
            "ansible_ok": sum(1 for r in results.values() if r.ok)}


def vm_reset(hosts: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as state:
        inventory = os.path.join(state, "inventory.yml")
        started = time.monotonic()
        manifest = lab.up(lab.LabConfig(hosts=hosts, backend="vm", vendors=["generic"]),
                          state, inventory, progress=lambda _m: None, timeout=1800)
        up = time.monotonic() - started
        try:
            config = yaml.safe_load(open(lab.paths(state)["pack_config"]))
            host = manifest["hosts"][0]
            side = lab.host_side(state, inventory)
            t0 = time.monotonic()
            side.health([host["name"]])
            per_task = time.monotonic() - t0
            ep = BmcEndpoint(host["name"], host["bmc_url"], "admin",
                             config["credentials"]["lab"]["password"],
                             ca_bundle=config["ca_bundle"])
            t0 = time.monotonic()
            with RedfishSession(ep) as session:
                ctx = discover(session)
                reset(session, ctx, graceful_timeout=60, poll=0.5)
            boot_before = None
            while True:
                entry = side.health([host["name"]])[host["name"]]
                if entry.ok and entry.result["uptime_s"] < time.monotonic() - t0 + 5:
                    break
                boot_before = entry.error
                if time.monotonic() - t0 > 300:
                    raise RuntimeError(f"VM not back: {boot_before}")
                time.sleep(1)
            reset_to_ssh = time.monotonic() - t0
        finally:
            lab.down(state, progress=lambda _m: None)
    return {"vms": hosts, "up_seconds": round(up, 1),
            "redfish_reset_to_ssh_seconds": round(reset_to_ssh, 1),
            "ansible_seconds_per_task": round(per_task, 2)}


def lab_figures(out: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """The figures of a run for bench/RESULTS.md (results.py)."""
    figures: List[Tuple[str, Any, str]] = []
    vm = out.get("vm")
    if vm:
        figures += [(f"VM lab: {vm['vms']} VMs up (lab up, BMCs included)", vm["up_seconds"],
                     "s"),
                    ("VM: one Redfish reset until the guest's SSH answers",
                     vm["redfish_reset_to_ssh_seconds"], "s"),
                    ("VM: Ansible, one task on one VM", vm["ansible_seconds_per_task"], "s")]
    boot = out.get("vm_boot") or {}
    for row in boot.get("bring_up") or []:
        figures += [(f"VM boot, {row['vms']} at once: first up (GRUB boot, until SSH)",
                     row["first_up_s"], "s"),
                    (f"VM boot, {row['vms']} at once: firmware and GRUB before the kernel",
                     row["first_before_kernel_s"], "s"),
                    (f"VM boot, {row['vms']} at once: all up", row["all_up_s"], "s")]
    cycle = boot.get("power_cycle") or {}
    if cycle:
        figures.append(("VM power off + on until SSH answers", cycle["off_on_until_ssh_s"], "s"))
    cost = boot.get("guest_cpu") or {}
    if cost:
        figures += [("VM: one guest's QEMU CPU, boot until SSH", cost["boot_cpu_s"], "CPU-s"),
                    ("VM: one idle guest", cost["idle_cores"], "cores")]
    if boot.get("image"):
        figures.append(("VM guest initrd", boot["image"]["initrd_mb"], "MB"))
    sim = out["sim"]
    figures += [(f"sim lab: {sim['hosts']} hosts up", sim["up_seconds"], "s"),
                (f"sim lab: {sim['hosts']} hosts, daemon RSS", sim["daemon_rss_mb"], "MB"),
                (f"sim lab: Ansible health on {sim['ansible_health_hosts']} hosts",
                 sim["ansible_health_seconds"], "s")]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sim-hosts", type=int, default=2000)
    parser.add_argument("--vms", type=int, default=3)
    parser.add_argument("--skip-vm", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: Dict[str, Any] = {}
    if not args.skip_vm:
        out["vm"] = vm_reset(args.vms)
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_lab_vm.py"),
                               "--json", "--sizes", "1,3,6"], capture_output=True, text=True)
        try:
            out["vm_boot"] = json.loads(proc.stdout)
        except ValueError:
            out["vm_boot"] = {"error": proc.stderr[-500:]}
    out["sim"] = sim_scale(args.sim_hosts)
    import results as bench_results

    bench_results.record("bench-lab", lab_figures(out))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    rows: List[str] = []
    if "vm" in out:
        v = out["vm"]
        rows.append(f"VM lab: {v['vms']} VMs up in {v['up_seconds']} s (lab up, incl. BMCs)")
        rows.append(f"  one Redfish reset until the guest's SSH answers: "
                    f"{v['redfish_reset_to_ssh_seconds']} s")
        rows.append(f"  Ansible, one task (health) on one VM: {v['ansible_seconds_per_task']} s")
        boot = dict(out.get("vm_boot") or {})
        cost = boot.pop("guest_cpu", None)
        rows.append(f"  VM boot bench: {json.dumps(boot)[:400]}")
        if cost:
            rows.append(f"  one guest's QEMU: boot until SSH {cost['boot_cpu_s']} CPU-s, idle "
                        f"{cost['idle_cores']} cores, {cost['health_check_cpu_ms']} CPU-ms per "
                        "health check")
    s = out["sim"]
    rows.append(f"sim lab: {s['hosts']} hosts up in {s['up_seconds']} s, daemon RSS "
                f"{s['daemon_rss_mb']} MB")
    rows.append(f"  Ansible health on {s['ansible_health_hosts']} sim hosts: "
                f"{s['ansible_health_seconds']} s ({s['ansible_ok']} ok)")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
