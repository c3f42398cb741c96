"""Benchmark of the `vm` lab backend (QEMU guests), run by hand or from `make bench-lab`.

Prints: the guest image build time (cold: when the cache is empty, or always with --cold, which
builds into a fresh temporary cache), the time to bring up N VMs at once until SSH answers on all
of them (N = 1, 3, 6 by default) and how much of the first one's falls before its kernel runs
(firmware, GRUB reading the kernel and initrd from the disk: its wait until SSH answered less
the guest's uptime when its /init started sshd), the time of a power_off + power_on (new BIOS
settings) until SSH answers again, and what one guest costs its QEMU process in host CPU: its
boot (until SSH answers), idle (no traffic), and per health check (the lab's load balancer asks
every 2 s).

    .venv/bin/python bench/bench_lab_vm.py [--sizes 1,3,6] [--cold] [--json]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from cpu_account import process_cpu_seconds

from fleet_lab import traffic
from fleet_lab.hosts import boot_config
from fleet_lab.vm.backend import SSHD_STARTED, VmBackend, last_boot, running_vms
from fleet_lab.vm.image import default_cache_dir, ensure_image


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def uptime_at_sshd(lab: VmBackend, host: str) -> float:
    """The guest's uptime when its /init started sshd (its console line `fleet-lab: [UP] ...
    sshd started`, of the last power-on)."""
    text = last_boot(lab.console_log(host).read_text(errors="replace"))
    match = re.search(r"fleet-lab: \[([\d.]+)\][^\n]*" + SSHD_STARTED, text)
    if match is None:
        raise RuntimeError(f"{host}: no '{SSHD_STARTED}' line on its console")
    return float(match.group(1))


def bring_up(image: Any, cache: Path, count: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lab-vm-") as state:
        with VmBackend(Path(state), cache_dir=cache, image=image) as lab:
            hosts = [f"bench-{i}" for i in range(count)]
            start = time.monotonic()
            for host in hosts:
                lab.power_on(boot_config(host, "home", "disabled"))
            per_host = lab.wait_up(hosts, timeout=600)
            all_up = time.monotonic() - start
            start = time.monotonic()
            for host in hosts:
                lab.ssh(host, "true")
            ssh_each = (time.monotonic() - start) / count
            first = min(per_host, key=per_host.get)
            before_kernel = per_host[first] - uptime_at_sshd(lab, first)
            return {"vms": count, "all_up_s": round(all_up, 1),
                    "first_up_s": per_host[first], "ssh_command_s": round(ssh_each, 2),
                    "first_before_kernel_s": round(before_kernel, 1), "accel": lab.accel}


def power_cycle(image: Any, cache: Path) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lab-vm-") as state:
        with VmBackend(Path(state), cache_dir=cache, image=image) as lab:
            lab.power_on(boot_config("bench-r", "home", "disabled"))
            lab.wait_up(["bench-r"], timeout=600)
            start = time.monotonic()
            lab.power_off("bench-r")
            off = time.monotonic() - start
            lab.power_on(boot_config("bench-r", "home", "enabled"))
            lab.wait_up(["bench-r"], timeout=600)
            return {"power_off_s": round(off, 2),
                    "off_on_until_ssh_s": round(time.monotonic() - start, 1)}


def guest_cpu(image: Any, cache: Path, requests: int = 100) -> Dict[str, Any]:
    """One guest's QEMU process: CPU-s until SSH answers, cores while idle (20 s, 10 s after
    that), CPU-ms per health check beyond idle (`requests` at 10 a second)."""
    with tempfile.TemporaryDirectory(prefix="bench-lab-vm-") as state:
        with VmBackend(Path(state), cache_dir=cache, image=image) as lab:
            lab.power_on(boot_config("bench-c", "home", "disabled"))
            lab.wait_up(["bench-c"], timeout=600)
            pid = running_vms(lab.state_dir)["bench-c"]
            boot = process_cpu_seconds(pid)
            time.sleep(10)  # the services' start is over
            cpu, start = process_cpu_seconds(pid), time.monotonic()
            time.sleep(20)
            idle = (process_cpu_seconds(pid) - cpu) / (time.monotonic() - start)
            port = lab.ports("bench-c").health
            cpu, start = process_cpu_seconds(pid), time.monotonic()
            answered = 0
            for _ in range(requests):
                answered += traffic.health_ok(port, timeout=5.0) is True
                time.sleep(0.1)
            spent = process_cpu_seconds(pid) - cpu - idle * (time.monotonic() - start)
            return {"boot_cpu_s": round(boot, 1), "idle_cores": round(idle, 4),
                    "health_check_cpu_ms": round(1000.0 * spent / requests, 1),
                    "health_checks": requests, "health_checks_answered": answered}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,3,6", help="VM counts to bring up (default 1,3,6)")
    parser.add_argument("--cold", action="store_true",
                        help="build the image into a fresh temporary cache (about a minute)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    tmp_cache = Path(tempfile.mkdtemp(prefix="bench-lab-cache-")) if args.cold else None
    cache = tmp_cache or default_cache_dir()
    try:
        image = ensure_image(cache, progress=log)
        build = {"cold_build_s": image.built_seconds, "image": image.image_id,
                 "initrd_mb": round(image.initrd.stat().st_size / 1e6, 1)}
        if image.built_seconds is None:
            manifests = sorted(cache.glob("base-*/manifest.json"))
            if manifests:
                build["last_base_build_s"] = json.loads(manifests[0].read_text()).get("seconds")
        results: Dict[str, Any] = {"image": build, "bring_up": [], "power_cycle": None,
                                   "guest_cpu": None}
        for count in sizes:
            log(f"bringing up {count} VM(s)...")
            results["bring_up"].append(bring_up(image, cache, count))
        log("power cycle...")
        results["power_cycle"] = power_cycle(image, cache)
        log("one guest's CPU...")
        results["guest_cpu"] = guest_cpu(image, cache)
    finally:
        if tmp_cache is not None:
            shutil.rmtree(tmp_cache, ignore_errors=True)

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    cold = build["cold_build_s"]
    print(f"image {build['image']}  initrd {build['initrd_mb']} MB  build: "
          + (f"{cold} s (cold)" if cold is not None
             else f"cached (base built in {build.get('last_base_build_s')} s)"))
    print()
    print(f"{'VMs':>4} {'accel':>6} {'first up s':>11} {'before kernel s':>16} "
          f"{'all up s':>9} {'ssh cmd s':>10}")
    for row in results["bring_up"]:
        print(f"{row['vms']:>4} {row['accel']:>6} {row['first_up_s']:>11} "
              f"{row['first_before_kernel_s']:>16} {row['all_up_s']:>9} "
              f"{row['ssh_command_s']:>10}")
    cycle = results["power_cycle"]
    print()
    print(f"power_off: {cycle['power_off_s']} s; power_off + power_on until SSH answers: "
          f"{cycle['off_on_until_ssh_s']} s")
    cost = results["guest_cpu"]
    print(f"one guest's QEMU: boot until SSH {cost['boot_cpu_s']} CPU-s, idle "
          f"{cost['idle_cores']} cores, {cost['health_check_cpu_ms']} CPU-ms per health check "
          f"({cost['health_checks_answered']}/{cost['health_checks']} answered)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
