"""CPU per changed host of the Ansible part of a whole host change, N sim hosts in parallel.

The hosts are one wave, changed as the wave_change workflow does: the wave's precheck (a wave
step, one ansible-playbook run over every host) in a worker of its own; each host's prepare (the
BIOS check and snapshot) in its own worker process, all hosts at once; the wave's drain and
kernel settings (wave steps, one run per playbook) each in a worker of its own; each host's
change (stage, reboot, wait, verify) in its own worker; the wave's probe and undrain;
optionally each host's restore after them. Workers are separate
processes, as actions are on StackStorm: what they share is shared through the pack's datastore.
A sim lab (BMC simulators, sim hosts reached by real Ansible over a local connection).

Reported per host:
  ansible runs     ansible-playbook runs that included the host (from the pack's run log,
                   FLEET_ROLLOUT_ANSIBLE_LOG; a pack without it: the host-side executions)
  ansible total    CPU of every process the steps started (ansible-playbook, its workers, the
                   host-side scripts)
  host side        CPU of the host-side programs (fleet_host.py, fleet-probe): on a real fleet
                   this runs on the servers, in the sim lab it runs locally
  controller       ansible total - host side: what the controller pays for Ansible
  step python      CPU of the worker processes themselves (Redfish, pack logic; one process per
                   host here, so without the per-step interpreter start)

    .venv/bin/python bench/bench_host_change.py [--hosts 1 10 50] [--restore]
        [--lib DIR]    measure another copy of the pack (DIR = its actions/lib), e.g. a checkout
                       of the code before a change (one with wave steps)
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Tuple

from fleet_runtime.paths import REPO_ROOT as ROOT

TIMES = re.compile(r"(\d+)m([\d.]+)s")

WRAPPER = """#!/bin/sh
# bench: run the real program, then record its CPU (the shell's `times`: self, children)
{real} "$@"
rc=$?
out="{logdir}/t.$$.$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')"
{{ echo "$*"; times; }} > "$out"
exit $rc
"""


def _cpu(usage: Any) -> float:
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------- worker
def worker(spec: Dict[str, Any]) -> None:
    import fleet_rollout.probe.build as build
    from fleet_rollout import service
    from fleet_rollout.store import FileStore

    build.ensure_probe = lambda *a, **k: spec["probe"]  # the wrapped binary, built once
    store = FileStore(spec["store"])
    walls: Dict[str, float] = {}
    error = None
    try:
        for step in spec.get("steps") or []:
            start = time.monotonic()
            service.host_step(spec["config"], store, spec["rollout"], spec["host"], step,
                              "ex-bench", "alice")
            walls[step] = round(time.monotonic() - start, 2)
        if spec.get("wave"):
            start = time.monotonic()
            out = service.wave_step(spec["config"], store, spec["rollout"], spec["hosts"],
                                    spec["wave"], "ex-bench", "alice")
            walls[spec["wave"]] = round(time.monotonic() - start, 2)
            if out["failed"]:
                error = f"{spec['wave']} failed on {', '.join(out['failed'])}"
        if spec.get("restore"):
            start = time.monotonic()
            service.host_restore(spec["config"], store, spec["rollout"], spec["host"],
                                 "ex-bench", "alice", leave_drained=False)
            walls["restore"] = round(time.monotonic() - start, 2)
    except Exception as err:  # reported, the bench goes on
        error = f"{type(err).__name__}: {err}"
    print(json.dumps({"host": spec.get("host") or spec["wave"], "self": _cpu(resource.getrusage(
        resource.RUSAGE_SELF)), "children": _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)),
        "walls": walls, "error": error}))


# ---------------------------------------------------------------------------- lab
def _write_wrappers(tmp: str) -> Dict[str, str]:
    from fleet_rollout.probe.build import ensure_probe

    logdir = os.path.join(tmp, "hostside-cpu")
    os.makedirs(logdir)
    out = {"logdir": logdir}
    for name, real in (("python", sys.executable), ("probe", ensure_probe())):
        path = os.path.join(tmp, f"wrap-{name}")
        with open(path, "w") as handle:
            handle.write(WRAPPER.format(real=real, logdir=logdir))
        os.chmod(path, 0o755)
        out[name] = path
    return out


def _profile(tmp: str, hosts: int) -> str:
    import yaml

    with open(os.path.join(ROOT, "profiles", "lab-home-snoop.yaml")) as handle:
        doc = yaml.safe_load(handle)
    doc.pop("reverse_of", None)
    doc["name"] = "bench-host-change"
    doc["batches"] = {"canary_size": hosts, "growth": 1, "max_batch": hosts,
                      "max_unavailable_per_site": hosts, "max_unavailable_per_rack": hosts,
                      "parallel": hosts}
    directory = os.path.join(tmp, "profiles")
    os.makedirs(directory)
    with open(os.path.join(directory, "bench-host-change.yaml"), "w") as handle:
        yaml.safe_dump(doc, handle)
    return directory


def _hostside_cpu(logdir: str) -> Dict[str, Any]:
    """CPU and executions of the host-side programs, per sim host (by its sysroot)."""
    per_host: Dict[str, float] = {}
    runs: Dict[str, int] = {}
    for path in glob.glob(os.path.join(logdir, "t.*")):
        with open(path) as handle:
            lines = handle.read().splitlines()
        if len(lines) < 3:
            continue
        match = re.search(r"--sysroot (\S+)", lines[0])
        host = os.path.basename(match.group(1).rstrip("/")) if match else "?"
        seconds = sum(float(m) * 60 + float(s) for line in lines[1:3]
                      for m, s in TIMES.findall(line))
        per_host[host] = per_host.get(host, 0.0) + seconds
        runs[host] = runs.get(host, 0) + 1
    return {"cpu": per_host, "runs": runs}


def _ansible_log(path: str) -> Dict[str, Any]:
    runs: Dict[str, int] = {}
    total = 0
    playbooks: Dict[str, int] = {}
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        for line in handle:
            doc = json.loads(line)
            total += 1
            playbooks[doc["playbook"]] = playbooks.get(doc["playbook"], 0) + 1
            for host in doc["hosts"]:
                runs[host] = runs.get(host, 0) + 1
    return {"runs": runs, "total": total, "playbooks": playbooks}


def measure(hosts: int, lib: str, restore: bool, reboot: float) -> Dict[str, Any]:
    import yaml

    from fleet_lab import lab

    tmp = tempfile.mkdtemp(prefix="bench-host-change-")
    env = dict(os.environ, FLEET_ROLLOUT_HOME=os.path.join(tmp, "home"),
               FLEET_ROLLOUT_ANSIBLE_LOG=os.path.join(tmp, "ansible-runs.jsonl"))
    os.environ["FLEET_ROLLOUT_HOME"] = env["FLEET_ROLLOUT_HOME"]
    state = os.path.join(tmp, "lab")
    inventory = os.path.join(tmp, "inventory.yml")
    wrappers = _write_wrappers(tmp)
    lab.up(lab.LabConfig(hosts=hosts, backend="sim", sites=1, hosts_per_rack=hosts,
                         reboot_seconds=reboot, approvers=["alice"]), state, inventory,
           progress=lambda _m: None)
    try:
        with open(lab.paths(state)["pack_config"]) as handle:
            config = yaml.safe_load(handle)
        config.update(state_dir=os.path.join(tmp, "state"), profiles_dir=_profile(tmp, hosts),
                      local_hosts_python=wrappers["python"])
        from fleet_rollout import service
        from fleet_rollout.store import FileStore

        store_dir = os.path.join(tmp, "kv")
        store = FileStore(store_dir)
        plan = service.plan_rollout(config, store, "bench-host-change", "all", "bench", "alice")
        ctx = service.context(config, store, "bench")
        names: List[str] = []
        for index, batch in enumerate(ctx.plan["batches"]):
            ctx.state.update_batch(index, lambda s: s.update(
                approval={"approved": True, "by": "alice"}))
            names.extend(batch["hosts"])
        del plan
        reports: List[Dict[str, Any]] = []
        lock = threading.Lock()

        def run(spec: Dict[str, Any]) -> None:
            spec = dict(spec, config=config, store=store_dir, rollout="bench",
                        probe=wrappers["probe"])
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                                   json.dumps(spec)], capture_output=True, text=True,
                                  env=dict(env, PYTHONPATH=lib), cwd=ROOT, check=False)
            try:
                report = json.loads(proc.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                report = {"host": spec.get("host"), "self": 0.0, "children": 0.0, "walls": {},
                          "error": f"worker exit {proc.returncode}: {proc.stderr[-800:]}"}
            with lock:
                reports.append(report)

        def each_host(**spec: Any) -> None:
            threads = [threading.Thread(target=run, args=(dict(spec, host=h),)) for h in names]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        start = time.monotonic()
        run({"wave": "precheck", "hosts": names})
        each_host(steps=["snapshot"])
        run({"wave": "drain", "hosts": names})
        run({"wave": "kernel", "hosts": names})
        each_host(steps=["stage", "reboot", "wait", "verify"])
        run({"wave": "probe", "hosts": names})
        run({"wave": "undrain", "hosts": names})
        if restore:
            each_host(restore=True)
        wall = time.monotonic() - start
        side = _hostside_cpu(wrappers["logdir"])
        runlog = _ansible_log(env["FLEET_ROLLOUT_ANSIBLE_LOG"])
    finally:
        lab.down(state, progress=lambda _m: None)
    shutil.rmtree(tmp, ignore_errors=True)
    n = len(names)
    children = sum(r["children"] for r in reports)
    hostside = sum(side["cpu"].values())
    runs = runlog.get("runs") or side["runs"]
    return {
        "hosts": n, "wall": wall, "errors": [f"{r['host']}: {r['error']}" for r in reports
                                             if r["error"]],
        "runs_per_host": sum(runs.values()) / max(1, n),
        "runs_source": "run log" if runlog else "host-side executions",
        "ansible_runs_total": runlog.get("total"), "playbooks": runlog.get("playbooks"),
        "ansible_total": children / max(1, n), "hostside": hostside / max(1, n),
        "controller": (children - hostside) / max(1, n),
        "step_python": sum(r["self"] for r in reports) / max(1, n),
        "walls": {k: v for r in reports for k, v in r["walls"].items()},
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--restore", action="store_true",
                        help="also restore every host after its change (the way back)")
    parser.add_argument("--lib", default=os.path.join(ROOT, "actions", "lib"))
    parser.add_argument("--reboot-seconds", type=float, default=1.0)
    args = parser.parse_args()
    lib = os.path.abspath(args.lib)
    print(f"pack library: {lib}; restore: {args.restore}")
    print(f"{'hosts':>5} {'runs/host':>9} {'ansible':>8} {'controller':>10} {'host side':>9} "
          f"{'step py':>8} {'wall':>6}   (CPU-seconds per host)")
    figures: List[Tuple[str, Any, str]] = []
    for hosts in args.hosts:
        out = measure(hosts, lib, args.restore, args.reboot_seconds)
        print(f"{out['hosts']:>5} {out['runs_per_host']:>9.1f} {out['ansible_total']:>8.2f} "
              f"{out['controller']:>10.2f} {out['hostside']:>9.2f} {out['step_python']:>8.2f} "
              f"{out['wall']:>6.1f}   runs from {out['runs_source']}"
              + (f", {out['ansible_runs_total']} ansible runs in all" if out['ansible_runs_total']
                 else ""), flush=True)
        if out["playbooks"]:
            print(f"      playbook runs: {json.dumps(out['playbooks'], sort_keys=True)}")
        for error in out["errors"][:5]:
            print(f"      ERROR {error}")
        at = f"{hosts} hosts at once" + (", with restore" if args.restore else "")
        figures += [(f"{at}: Ansible runs per host", round(out["runs_per_host"], 1), "runs"),
                    (f"{at}: Ansible CPU per host", round(out["ansible_total"], 2), "CPU-s"),
                    (f"{at}: controller CPU per host", round(out["controller"], 2), "CPU-s"),
                    (f"{at}: host side CPU per host", round(out["hostside"], 2), "CPU-s"),
                    (f"{at}: wall", round(out["wall"], 1), "s"),
                    (f"{at}: hosts failed", len(out["errors"]), "hosts")]
    import results as bench_results

    bench_results.record("bench-host-change", figures)


if __name__ == "__main__":
    main()
