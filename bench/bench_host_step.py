"""One host step (the `health` hostside operation on a sim host) with a 20,000-host inventory vs
a 10-host one: each Ansible run gets an inventory of only its hosts (resolved host variables,
cached per inventory), so the two should cost the same. Also prints the one-time resolution
cost (parse + resolve + store) for the 20,000 hosts.

    .venv/bin/python bench/bench_host_step.py [--hosts 20000] [--small 10] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List, Tuple

import yaml

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout import hostvars
from fleet_rollout.connection import Connection
from fleet_rollout.hostside.playbook_steps import HostSide

LAB = Connection(allow_local=True)  # a lab's pack config: its sim host runs locally

SIM = "sim-001"


def write_inventory(path: str, sysroot: str, total: int) -> str:
    """`total` hosts: the sim host (local connection) and total-1 others, as a YAML inventory
    with group vars, in racks of 40."""
    racks: dict = {}
    for index in range(total - 1):
        rack = racks.setdefault(f"rack{index // 40:04d}",
                                {"hosts": {}, "vars": {"rack": index // 40}})
        rack["hosts"][f"far-{index:05d}"] = {
            "ansible_host": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
            "bmc_address": f"https://10.200.{index // 256 % 256}.{index % 256}"}
    racks["sim"] = {"hosts": {SIM: {"fleet_sysroot": sysroot}}}
    doc = {"all": {"vars": {"ansible_user": "root", "site": "bench"}, "children": racks}}
    with open(path, "w") as handle:
        yaml.safe_dump(doc, handle)
    return path


def step(side: HostSide) -> float:
    start = time.perf_counter()
    result = side.health([SIM])[SIM]
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"health failed: {result}")
    return elapsed


def measure(hosts: int = 20000, small: int = 10, repeat: int = 3,
            say: Any = print) -> Dict[str, Any]:
    """The health step with a `hosts`-host inventory against a `small`-host one (median of
    `repeat` interleaved runs each), and the one-time resolution of the big inventory."""
    with tempfile.TemporaryDirectory(prefix="bench-host-step-") as tmp:
        backend = SimBackend(os.path.join(tmp, "hosts"))
        backend.power_on(boot_config(SIM, "early", "disabled"))
        cache = os.path.join(tmp, "cache")
        big = write_inventory(os.path.join(tmp, "big.yml"), backend.sysroot(SIM), hosts)
        little = write_inventory(os.path.join(tmp, "small.yml"), backend.sysroot(SIM), small)
        say(f"inventory: {hosts} hosts, {os.path.getsize(big) / 1e6:.1f} MB YAML")

        start = time.perf_counter()
        hostvars.ensure(big, cache)
        resolve = time.perf_counter() - start
        hostvars.ensure(little, cache)
        say(f"one-time resolution ({hosts} hosts: parse, resolve, store): {resolve:.2f} s")

        start = time.perf_counter()
        hostvars.lookup(big, [SIM], cache)
        lookup_ms = (time.perf_counter() - start) * 1000
        say(f"cached lookup of one host (fingerprint + one row): {lookup_ms:.1f} ms")

        big_side = HostSide(big, forks=1, cache_dir=cache, connection=LAB)
        small_side = HostSide(little, forks=1, cache_dir=cache, connection=LAB)
        step(small_side)  # warm-up: imports, ssh/ansible caches
        big_times, small_times = [], []
        for _ in range(repeat):  # interleaved: a busy machine slows both alike
            big_times.append(step(big_side))
            small_times.append(step(small_side))
    big_t, small_t = statistics.median(big_times), statistics.median(small_times)
    say(f"health step, {hosts}-host inventory: {big_t:.2f} s "
        f"(runs {', '.join(f'{t:.2f}' for t in big_times)})")
    say(f"health step, {small}-host inventory: {small_t:.2f} s "
        f"(runs {', '.join(f'{t:.2f}' for t in small_times)})")
    ratio = big_t / small_t
    say(f"ratio {hosts}/{small}: {ratio:.2f} (target <= 1.2): "
        f"{'OK' if ratio <= 1.2 else 'ABOVE TARGET'}")
    return {"hosts": hosts, "small": small, "resolve_seconds": round(resolve, 2),
            "lookup_ms": round(lookup_ms, 1), "big_seconds": round(big_t, 2),
            "small_seconds": round(small_t, 2), "ratio": round(ratio, 2)}


def step_figures(out: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """A measure's figures for bench/RESULTS.md (results.py)."""
    return [(f"health step, {out['hosts']}-host inventory", out["big_seconds"], "s"),
            (f"health step, {out['small']}-host inventory", out["small_seconds"], "s"),
            (f"health step, ratio {out['hosts']} / {out['small']} hosts", out["ratio"], ""),
            (f"resolving {out['hosts']} hosts once", out["resolve_seconds"], "s"),
            ("cached lookup of one host", out["lookup_ms"], "ms")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = measure(args.hosts, args.small, args.repeat)
    import results as bench_results

    bench_results.record("bench-host-step", step_figures(out))


if __name__ == "__main__":
    main()
