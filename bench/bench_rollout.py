#!/usr/bin/env python3
"""make bench-rollout: what a rollout costs beyond the reboots themselves.

1. A rollout of N sim hosts (default 200) with a simulated reboot time T through the embedded
   runtime: total time / critical-path lower bound, where the bound is the sum over batches of
   the slowest host's reboot+verify plus the soak and counter windows (what no orchestration can
   avoid). Also the largest workflow context persisted (bytes).
2. Planning for 20,000 inventory hosts (inventory read with ansible-core, plan built).
3. Judging a batch with 20,000 hosts (4,000 canary, 16,000 control).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

from fleet_rollout.inventory import load_fleet
from fleet_rollout.judge import Policy, judge, judge_input_from_dict
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile, pre_windows
from fleet_rollout.store import MemoryStore, RolloutState
from fleet_runtime.paths import REPO_ROOT as ROOT


def _runtime_store(directory: str) -> Any:
    """The embedded runtime's datastore (SQLite, what actions get as action_service)."""
    from pathlib import Path

    from fleet_rollout.store import Store
    from fleet_runtime.datastore import Datastore

    class RuntimeStore(Store):
        def __init__(self) -> None:
            self.ds = Datastore(os.path.join(directory, "kv.sqlite"),
                                Path(directory) / "kv.key")

        def get(self, key: str) -> Any:
            return self.ds.get(key)

        def set(self, key: str, value: str) -> None:
            self.ds.set(key, value)

        def delete(self, key: str) -> None:
            self.ds.delete(key)

        def list(self, prefix: str) -> Dict[str, str]:
            return {d["name"]: d["value"] for d in self.ds.list(prefix)}

    return RuntimeStore()


_COLD = """
import os, sys, time
from fleet_rollout.inventory import load_fleet
t0 = time.monotonic()
load_fleet(sys.argv[1], "all", cache_hostvars=True, cache_dir=sys.argv[2])
print(time.monotonic() - t0)
"""


def plan_scale(hosts: int) -> Dict[str, Any]:
    """Planning `hosts` hosts: the inventory read cold (Ansible parse + storing the host-variable
    cache) and warm (from the cache), build_plan, save_plan (split keys, into the runtime's
    datastore; a file store too), the stored plan's bytes and its largest value, and what one
    host step reads of it."""
    from fleet_rollout.store import FileStore, RolloutState

    with tempfile.TemporaryDirectory() as tmp:
        groups: Dict[str, Any] = {}
        for i in range(hosts):
            site = f"site_{i % 4}"
            groups.setdefault(site, {"hosts": {}})["hosts"][f"web-{i:05d}"] = {
                "bmc_address": f"https://10.{i // 65536}.{(i // 256) % 256}.{i % 256}",
                "site": site, "rack": f"r{(i // 40) % 50}", "hardware_model": "R630"}
        path = os.path.join(tmp, "inventory.yml")
        with open(path, "w") as handle:
            yaml.safe_dump({"all": {"children": groups}}, handle)
        cache = os.path.join(tmp, "cache")
        # cold (Ansible parse, cache stored) in a process of its own, as a plan action is: its
        # parse leaves a heap of Ansible objects that would slow this process's GC afterwards
        cold = subprocess.run([sys.executable, "-c", _COLD, path, cache], check=True,
                              capture_output=True, text=True, cwd=ROOT)
        cold_seconds = float(cold.stdout.strip().splitlines()[-1])
        t1 = time.monotonic()
        everyone, targets = load_fleet(path, "all", cache_hostvars=True, cache_dir=cache)
        t2 = time.monotonic()
        profile = load_profile("home-snoop")
        profile.data["batches"].update({"max_batch": 1000, "max_unavailable_per_site": 250,
                                        "max_unavailable_per_rack": 5})
        compliance = {h.name: {"compliant": False} for h in targets}
        plan = build_plan(profile, path, "all", targets, everyone, compliance)
        t3 = time.monotonic()
        store = _runtime_store(tmp)
        state = RolloutState(store, plan["rollout_id"])
        state.save_plan(plan)
        t4 = time.monotonic()
        RolloutState(FileStore(os.path.join(tmp, "files")), plan["rollout_id"]).save_plan(plan)
        file_save = time.monotonic() - t4
        values = store.list("")
        one_doc = json.dumps(plan, sort_keys=True)
        host = plan["batches"][-1]["hosts"][-1]
        t5 = time.monotonic()
        for _ in range(20):  # a host step before the split: the whole plan, parsed
            json.loads(one_doc)["hosts"][host]
        t6 = time.monotonic()
        for _ in range(20):  # now: the head, the host's bucket, its batch's hosts
            view = RolloutState(store, plan["rollout_id"]).plan_view()
            view["hosts"].get(host)
            batch = view.batch_of(host)
            len(view["batches"][batch]["hosts"])
        t7 = time.monotonic()
        assert state.plan() == json.loads(one_doc)
    return {"hosts": hosts, "inventory_cold_seconds": round(cold_seconds, 2),
            "inventory_warm_seconds": round(t2 - t1, 3),
            "build_plan_seconds": round(t3 - t2, 3), "save_plan_seconds": round(t4 - t3, 3),
            "save_plan_filestore_seconds": round(file_save, 3),
            "warm_total_seconds": round(t4 - t1, 3),
            "batches": len(plan["batches"]), "plan_keys": len(values),
            "plan_bytes": sum(len(v) for v in values.values()),
            "largest_value_bytes": max(len(v) for v in values.values()),
            "one_document_bytes": len(one_doc),
            "host_step_read_ms_before": round((t6 - t5) / 20 * 1000, 2),
            "host_step_read_ms_after": round((t7 - t6) / 20 * 1000, 2)}


def judge_scale(canary: int, control: int) -> Dict[str, Any]:
    rng = random.Random(7)
    hosts: Dict[str, Any] = {}
    names = {"canary": [f"c{i}" for i in range(canary)],
             "control": [f"k{i}" for i in range(control)]}
    for name in names["canary"] + names["control"]:
        base = rng.lognormvariate(-9, 1)
        packets = rng.randint(2_000_000, 5_000_000)
        hosts[name] = {"pre": {"drops": int(packets * base), "packets": packets},
                       "post": {"drops": int(packets * base * rng.uniform(0.8, 1.2)),
                                "packets": packets}}
    doc = {"schema_version": 1, "canary": names["canary"], "control": names["control"],
           "hosts": hosts}
    t0 = time.monotonic()
    inp = judge_input_from_dict(doc)
    t1 = time.monotonic()
    verdict = judge(inp, Policy())
    t2 = time.monotonic()
    return {"canary": canary, "control": control, "seconds": round(t2 - t0, 2),
            "parse_seconds": round(t1 - t0, 2), "judge_seconds": round(t2 - t1, 2),
            "verdict": verdict.verdict}


@dataclass
class RolloutBench:
    """One sim rollout through the embedded runtime (bench-rollout's defaults; bench-fleet sets
    its own)."""
    hosts: int = 200
    reboot: float = 10.0  # the sim's reboot seconds (POST + OS boot as the BMC reports it)
    canary: int = 10
    growth: int = 2
    max_batch: int = 80
    per_site: Any = 40  # a count, or a share of a site's servers ("5%")
    per_rack: Any = 10
    parallel: int = 40  # batches.parallel: hosts in flight
    manual_batches: Optional[int] = None  # approval.manual_batches (None: no approval at all)
    pre_windows: int = 3  # canary.pre_windows
    forks: int = 0  # the pack config's ansible_forks (0: its default)
    window: float = 10.0
    soak: float = 5.0
    sites: int = 4
    hosts_per_rack: int = 10
    vendors: List[str] = field(default_factory=lambda: ["generic"])
    probe_budget_ms: int = 300
    workers: int = 0  # the runtime's action workers; 0: parallel + 16 (every host in flight)
    rate_scale: float = 1.0  # the lab's traffic (sim counters) scale
    keep_db: str = ""  # a path: the run's runtime database is copied there (for a closer look)
    runners: int = 1  # the runtime's action runner processes, each with its own state_dir


def rollout_scale(bench: RolloutBench) -> Dict[str, Any]:
    """The rollout's wall time against its critical path, the controller's CPU (the engine's
    process tree: engine, action processes, Ansible), the largest datastore value and workflow
    context, and the plan's estimate against the measured time."""
    from cpu_account import CpuAccount

    from fleet_lab import lab

    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "profiles"))
        profile = os.path.join(tmp, "profiles", "bench-home.yaml")  # the config's profiles_dir
        env = dict(os.environ, FLEET_ROLLOUT_HOME=os.path.join(tmp, "home"),
                   BENCH_PROFILE="bench-home")
        os.environ["FLEET_ROLLOUT_HOME"] = env["FLEET_ROLLOUT_HOME"]
        state = os.path.join(tmp, "lab")
        inventory = os.path.join(tmp, "inventory.yml")
        t_lab = time.monotonic()
        lab.up(lab.LabConfig(hosts=bench.hosts, backend="sim", vendors=list(bench.vendors),
                             reboot_seconds=bench.reboot, sites=bench.sites,
                             hosts_per_rack=bench.hosts_per_rack, rate_scale=bench.rate_scale),
               state, inventory, progress=lambda _m: None, timeout=3600)
        lab_seconds = time.monotonic() - t_lab
        _set_profiles_dir(env["FLEET_ROLLOUT_HOME"], os.path.dirname(profile),
                          bench.forks)
        _set_workers(env["FLEET_ROLLOUT_HOME"], bench.workers or bench.parallel + 16,
                     bench.runners)
        with open(profile, "w") as handle:
            yaml.safe_dump({
                "name": "bench-home", "bios": {"snoop_mode": "home"},
                "probe": {"budget_ms": bench.probe_budget_ms},
                # steps of at least 5 s (the profile's rule): 2 in a 10 s window
                "canary": {"window_seconds": bench.window, "soak_seconds": bench.soak,
                           "window_steps": max(1, min(4, int(bench.window // 5))),
                           "pre_windows": bench.pre_windows,
                           "policy": {"min_canary_hosts": 3, "min_control_hosts": 5}},
                "batches": {"canary_size": bench.canary, "growth": bench.growth,
                            "max_batch": bench.max_batch,
                            "max_unavailable_per_site": bench.per_site,
                            "max_unavailable_per_rack": bench.per_rack,
                            "parallel": bench.parallel},
                "approval": {"required": False} if bench.manual_batches is None else {
                    "required": True, "manual_batches": bench.manual_batches},
                "redfish": {"graceful_timeout": bench.reboot * 3, "poll": 1}}, handle)
        cpu = CpuAccount()
        try:
            host_side = _host_side_account(env["FLEET_ROLLOUT_HOME"], tmp)
            t0 = time.monotonic()
            out = _run_answering(env, preexec=cpu.preexec())
            wall = time.monotonic() - t0
            total = float(out.get("_elapsed") or wall)
            controller_cpu = cpu.seconds()
            host_cpu = host_side.seconds() if host_side else None
            rollout_id = ((out.get("result") or {}).get("output") or {}).get("rollout_id")
            plan, hosts = _stored_rollout(env["FLEET_ROLLOUT_HOME"], rollout_id)
            bound = _critical_path(plan, hosts, bench)
            context = _largest_context(env["FLEET_ROLLOUT_HOME"])
            largest_value = _largest_value(env["FLEET_ROLLOUT_HOME"])
            changed = sum(1 for h in hosts.values() if "verify" in (h.get("steps") or {}))
            phases = batch_phases(env["FLEET_ROLLOUT_HOME"])
            spans = host_spans(plan, hosts)
            if bench.keep_db:  # SQLite's backup: the write-ahead log's pages included
                source = sqlite3.connect(os.path.join(env["FLEET_ROLLOUT_HOME"], "runtime.db"))
                target = sqlite3.connect(bench.keep_db)
                try:
                    source.backup(target)
                finally:
                    target.close()
                    source.close()
            estimate = _estimate_check(plan, hosts, bench, total,
                                       controller_cpu / changed if changed else 0.0, phases)
        finally:
            cpu.close()
            if host_side:
                host_side.close()
            lab.down(state, progress=lambda _m: None)
    return {"hosts": bench.hosts, "reboot_seconds": bench.reboot, "status": out.get("status"),
            "runners": bench.runners,
            "parallel": bench.parallel, "batches": len(plan.get("batches") or []),
            "batch_sizes": [len(b["hosts"]) for b in plan.get("batches") or []],
            "lab_up_seconds": round(lab_seconds, 1),
            "total_seconds": round(total, 1),  # the rollout execution's own duration
            "wall_seconds": round(wall, 1),  # with the engine's start and stop, 2 s looks
            "critical_path_seconds": round(bound["measured"], 1),
            "ratio": round(total / bound["measured"], 2) if bound["measured"] else None,
            "pure_bound_seconds": round(bound["pure"], 1),
            "pure_ratio": round(total / bound["pure"], 2) if bound["pure"] else None,
            "hosts_changed": changed, "controller_cpu_seconds": round(controller_cpu, 1),
            "cpu_per_host": round(controller_cpu / changed, 2) if changed else None,
            "host_side_cpu_seconds": round(host_cpu, 1) if host_cpu is not None else None,
            "host_side_cpu_per_host": round(host_cpu / changed, 2)
            if host_cpu is not None and changed else None,
            "cpu_method": cpu.method, "largest_context_bytes": context,
            "largest_datastore_value_bytes": largest_value, "estimate": estimate,
            "phases": phases, "host_spans": spans}


PYTHON_WRAPPER = """#!/bin/sh
# bench: what Ansible runs "on" a sim host (its modules, the host script and what that starts,
# the probe) is the host's side: on a real fleet it runs on the server. Counted apart from the
# controller (cgroup).
echo $$ > {procs} 2>/dev/null
exec {python} "$@"
"""


def _host_side_account(home: str, tmp: str) -> Any:
    """A cpuacct group of its own for the sim hosts' side (what Ansible's local connection
    runs for a host under its Python: modules, the host script, the probe), through the pack
    config's `local_hosts_python`; None without cgroups (then the controller's figure includes
    it)."""
    from cpu_account import CpuAccount

    from fleet_rollout.connection import local_python

    account = CpuAccount("fleet-bench-hostside")
    if account.path is None:
        return None
    wrapper = os.path.join(tmp, "host-side-python")
    with open(wrapper, "w") as handle:
        handle.write(PYTHON_WRAPPER.format(procs=os.path.join(account.path, "cgroup.procs"),
                                           python=local_python()))
    os.chmod(wrapper, 0o755)
    path = os.path.join(home, "configs", "fleet_rollout.yaml")
    with open(path) as handle:
        doc = yaml.safe_load(handle)
    doc["local_hosts_python"] = wrapper
    with open(path, "w") as handle:
        yaml.safe_dump(doc, handle)
    return account


def _set_profiles_dir(home: str, directory: str, forks: int = 0) -> None:
    """Profiles are named, never paths: the bench's own lives in the pack config's
    profiles_dir (as a site's profiles would); `forks`: its ansible_forks (0: as it is)."""
    path = os.path.join(home, "configs", "fleet_rollout.yaml")
    with open(path) as handle:
        doc = yaml.safe_load(handle)
    doc["profiles_dir"] = directory
    if forks:
        doc["ansible_forks"] = int(forks)
    with open(path, "w") as handle:
        yaml.safe_dump(doc, handle)


def _set_workers(home: str, workers: int, runners: int = 1) -> None:
    """The runtime's action workers (home config.yaml `workers`): enough for every host in
    flight; and its action runner processes (`runners`, like st2actionrunners on several
    machines)."""
    path = os.path.join(home, "config.yaml")
    doc: Dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as handle:
            doc = yaml.safe_load(handle) or {}
    doc["workers"] = int(workers)
    doc["runners"] = int(runners)
    with open(path, "w") as handle:
        yaml.safe_dump(doc, handle)


def _cli(env: Dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args], env=env,
                          capture_output=True, text=True, cwd=ROOT, check=True).stdout


def _run_answering(env: Dict[str, str], preexec: Any = None) -> Dict[str, Any]:
    """Run the rollout with a background engine, as st2 would; every question it asks (an
    INCONCLUSIVE verdict: extend, proceed or roll back) is answered at once like the demo's SRE
    (proceed), so the time measured is the rollout's own."""
    from fleet_runtime.database import Store

    home = env["FLEET_ROLLOUT_HOME"]
    engine = subprocess.Popen([sys.executable, "-m", "fleet_runtime.cli", "engine", "--forever"],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, preexec_fn=preexec)
    try:
        _await_engine(home, engine)
        started = time.monotonic()
        execution = json.loads(_cli(env, "run", "-a", "fleet_rollout.rollout",
                                    f"profile={env['BENCH_PROFILE']}", "--json"))["id"]
        store = Store(os.path.join(home, "runtime.db"))
        last = started
        answered: set = set()  # a busy engine takes the answer in later than the next look
        while store.get_execution(execution)["status"] in (
                "requested", "scheduled", "running", "pausing", "paused", "resuming"):
            for inquiry in store.find_executions("runner='inquirer' AND status='pending'"):
                if inquiry["id"] in answered:
                    continue
                answered.add(inquiry["id"])
                answer = _answer((inquiry.get("result") or {}).get("schema") or {})
                try:
                    _cli(env, "inquiry", "respond", inquiry["id"], "-r", json.dumps(answer),
                         "--no-wait")
                except subprocess.CalledProcessError as err:
                    print(f"  bench: answer {answer} to {inquiry['id']} refused: "
                          f"{(err.stderr or err.stdout or '').strip()[-300:]}",
                          file=sys.stderr, flush=True)
            time.sleep(2)
            if time.monotonic() - last >= 15:
                last = time.monotonic()
                _progress(home, last - started)
        row = store.get_execution(execution) or {}
        record = json.loads(_cli(env, "execution", "get", execution, "--json"))
        # the rollout's own duration as the runtime recorded it (asked for -> ended): not the
        # engine's start and stop around it, nor this loop's 2 s looks
        if row.get("end_ts") and row.get("created_ts"):
            record["_elapsed"] = float(row["end_ts"]) - float(row["created_ts"])
        if record.get("status") != "succeeded":
            failed = store.find_executions("status IN ('failed','timeout')")
            why = [f"{r['action']}: {_failure_text(r.get('result'))}" for r in failed[:3]]
            print(f"  bench: the rollout ended {record.get('status')}: " + " | ".join(why),
                  file=sys.stderr, flush=True)
        return record
    finally:
        engine.terminate()
        engine.wait(60)


def _failure_text(result: Any) -> str:
    """The end of what a failed execution said (a traceback's last lines)."""
    if isinstance(result, dict):
        text = result.get("stderr") or result.get("error") or json.dumps(result)
    else:
        text = json.dumps(result)
    return str(text).strip()[-400:]


def _answer(schema: Dict[str, Any]) -> Dict[str, Any]:
    """What the SRE answers: approve a batch, proceed after an INCONCLUSIVE verdict."""
    props = schema.get("properties") or {}
    if "choice" in props:
        return {"choice": "proceed"}
    return {"approved": True}


def _await_engine(home: str, engine: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the background engine holds the home's lock (it writes its pid there): a `run`
    sent earlier would become the engine itself, outside the measured process tree."""
    from fleet_runtime.home import RuntimeHome

    lock = str(RuntimeHome(home).lock_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.poll() is not None:
            raise SystemExit(f"bench: the engine exited ({engine.returncode}) before it started")
        try:
            with open(lock) as handle:
                if handle.read().strip() == str(engine.pid):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench: the engine did not take {lock} in {timeout:.0f} s")


def _progress(home: str, elapsed: float) -> None:
    """One line on stderr: hosts per status so far (the rollout takes minutes)."""
    try:
        db = sqlite3.connect(os.path.join(home, "runtime.db"))
        rows = db.execute("SELECT value FROM kv WHERE name LIKE 'fleet_rollout.%.host.%'")
        counts: Dict[str, int] = {}
        for (value,) in rows:
            status = json.loads(value).get("status", "?")
            counts[status] = counts.get(status, 0) + 1
    except sqlite3.Error:
        return
    print(f"  [{elapsed:5.0f} s] hosts: " + (", ".join(f"{n} {k}" for k, n in
                                                   sorted(counts.items())) or "none yet"),
          file=sys.stderr, flush=True)


def _stored_rollout(home: str, rollout_id: Any) -> Tuple[Dict[str, Any],
                                                        Dict[str, Dict[str, Any]]]:
    """The rollout's plan (stored per batch and host) and every host's state."""
    if not rollout_id:
        return {}, {}
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    prefix = f"fleet_rollout.{rollout_id}."
    rows = db.execute("SELECT name, value FROM kv WHERE name LIKE ?", (prefix + "%",)).fetchall()
    store = MemoryStore()
    hosts: Dict[str, Dict[str, Any]] = {}
    for name, value in rows:
        store.set(name, value)
        if name.startswith(prefix + "host."):
            hosts[name[len(prefix + "host."):]] = json.loads(value)
    return RolloutState(store, rollout_id).plan(), hosts


def _critical_path(plan: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                   bench: RolloutBench) -> Dict[str, float]:
    """Per batch, waves (ceil(hosts / parallel)) x the slowest host's time from reset to
    verified (its probe step done), plus the soak and the counter windows: the post window and
    the pre window, `canary.pre_windows` windows long (measured: what the hosts took); and the
    same with each host's part being only the sim's reboot plus the probe budget (pure: what no
    controller can avoid, however fast)."""
    windows = 1 + pre_windows((plan.get("profile") or {}).get("canary") or {})
    measured = pure = 0.0
    for batch in plan.get("batches") or []:
        slowest = 0.0
        for host in batch["hosts"]:
            steps = (hosts.get(host) or {}).get("steps", {})
            if "reboot" in steps and "probe" in steps:
                slowest = max(slowest, steps["probe"]["at"] - steps["reboot"]["started"])
        waves = -(-len(batch["hosts"]) // bench.parallel)  # `parallel` hosts at a time
        fixed = bench.soak + windows * bench.window
        measured += waves * slowest + fixed
        pure += waves * (bench.reboot + bench.probe_budget_ms / 1000.0) + fixed
    return {"measured": measured, "pure": pure}


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def fitted_assumptions(hosts: Dict[str, Dict[str, Any]], cpu_per_host: float) -> Any:
    """The estimate's Assumptions as this run measured them (medians over the hosts' recorded
    steps): an Ansible run = the undrain step (the wave's one playbook run), a BMC session =
    the verify step (the BIOS read back), the drain = the drain step beyond its run, the
    reboot = the reboot and wait steps beyond their two BMC sessions (the reboot step waits
    for the shutdown), an action's start = the gap before each step after the first, and the
    controller's CPU per host.
    No approval wait (the bench approves nothing)."""
    from fleet_rollout.estimate import Assumptions
    from fleet_rollout.states import HOST_STEPS

    spans: Dict[str, List[float]] = {}
    gaps: List[float] = []
    reboots: List[float] = []
    for record in hosts.values():
        steps = sorted(((name, s) for name, s in (record.get("steps") or {}).items()
                        if "started" in s and "at" in s), key=lambda item: item[1]["started"])
        for name, step in steps:
            spans.setdefault(name, []).append(step["at"] - step["started"])
        gaps += [max(0.0, b["started"] - a["at"]) for (_n, a), (m, b) in zip(steps, steps[1:])
                 if m in HOST_STEPS]
        took = dict((name, step["at"] - step["started"]) for name, step in steps)
        if "reboot" in took and "wait" in took:
            reboots.append(took["reboot"] + took["wait"])
    run = _median(spans.get("undrain", []))
    bmc = _median(spans.get("verify", []))
    return Assumptions(approval_response=0.0, bmc_session=round(bmc, 2),
                       ansible_run=round(run, 2),
                       drain=round(max(0.0, _median(spans.get("drain", [])) - run), 2),
                       reboot=round(max(0.0, _median(reboots) - 2 * bmc), 2),
                       action_start=round(_median(gaps), 2),
                       controller_cpu_per_host=round(cpu_per_host, 2))


def _estimate_check(plan: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                    bench: RolloutBench, total: float, cpu_per_host: float,
                    phases: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The plan's estimate (fleet_rollout.estimate) against the measured time: with the sim's
    own reboot and drain times and the default assumptions for the rest (a real fleet's BMC
    sessions, Ansible runs and st2 action starts); with every assumption fitted to this run
    (checks the model: batches, waves, windows, the controller bound); and with each host's
    time set to the measured median host change (checks the batch model alone)."""
    from dataclasses import asdict

    from fleet_rollout.estimate import Assumptions, estimate_plan
    from fleet_rollout.profile import DEFAULT_FORKS

    if not plan:
        return {}
    forks = bench.forks or DEFAULT_FORKS
    stated = estimate_plan(plan, Assumptions(approval_response=0.0, reboot=bench.reboot,
                                             drain=1.0), forks=forks)
    median = _median([max(s["at"] for s in h["steps"].values()) -
                      min(s["started"] for s in h["steps"].values())
                      for h in hosts.values() if h.get("steps")])
    per_host = float(stated["per_host"]) or 1.0
    t = stated["totals"]
    model = t["expected"] - t["host_work"] + t["host_work"] * median / per_host
    fitted = fitted_assumptions(hosts, cpu_per_host)
    fitted_estimate = estimate_plan(plan, fitted, forks=forks)
    fit = fitted_estimate["totals"]["expected"]
    bound = float(fitted_estimate["totals"].get("bound") or 0.0)
    # what the counter windows took beyond their length (pre: its windows; post: the soak and
    # its window), against the estimate's window runs with the fitted assumptions
    canary = plan["profile"]["canary"]
    pre_length = float(canary["window_seconds"]) * pre_windows(canary)
    post_length = float(canary["soak_seconds"]) + float(canary["window_seconds"])
    beyond = [round(p["pre"] - pre_length + p["post"] - post_length, 1) for p in phases]
    return {"estimate_seconds": t["expected"], "estimate_per_host": stated["per_host"],
            "estimate_vs_measured": round(t["expected"] / total, 2) if total else None,
            "fitted_assumptions": asdict(fitted), "fitted_seconds": fit,
            "fitted_vs_measured": round(fit / total, 2) if total else None,
            # the capacity bound (every batch as large as the limits allow, no approval), with
            # the fitted assumptions, and the measured duration against it
            "fitted_bound_seconds": bound,
            "measured_vs_bound": round(total / bound, 2) if bound else None,
            "fitted_estimate_vs_bound": round(fit / bound, 2) if bound else None,
            "measured_host_median": round(median, 1),
            "model_with_measured_host_seconds": round(model, 1),
            "model_vs_measured": round(model / total, 2) if total else None,
            "windows_beyond_length": beyond,
            "fitted_window_runs": [r["window_runs"] for r in fitted_estimate["batches"]]}


PHASES = (("lead", ("info", "announce", "approval", "auto_approved", "record_approval")),
          ("pre", ("counters_pre_start", "counters_pre_step", "counters_pre_end")),
          ("change", ("change_hosts",)),
          ("post", ("counters_post_start", "counters_post_step", "counters_post_end")),
          ("judge", ("judge", "post_verdict")))


def batch_phases(home: str) -> List[Dict[str, Any]]:
    """Where each batch's time went: per phase of rollout_batch (lead: info and approval; pre
    and post: the counter windows, their collections' own time apart; change: the hosts; judge),
    and the gap before the batch (the parent's step from the last batch to this one)."""
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    batches = db.execute("SELECT id, start_ts, end_ts FROM executions WHERE action = "
                         "'fleet_rollout.rollout_batch' ORDER BY start_ts").fetchall()
    out: List[Dict[str, Any]] = []
    previous_end = None
    for ex_id, start, end in batches:
        children = db.execute("SELECT task_id, action, start_ts, end_ts FROM executions WHERE "
                              "parent_id = ? AND start_ts IS NOT NULL", (ex_id,)).fetchall()
        row: Dict[str, Any] = {"seconds": round((end or start) - start, 1),
                               "gap_before": round(start - previous_end, 1)
                               if previous_end else None}
        for phase, tasks in PHASES:
            spans = [(s, e or s) for task, _a, s, e in children if task in tasks]
            row[phase] = round(max(e for _s, e in spans) - min(s for s, _e in spans), 1) \
                if spans else 0.0
        collections = [(e or s) - s for _t, action, s, e in children
                       if action == "fleet_rollout.collect_counters"]
        row["collections"] = len(collections)
        row["collecting"] = round(sum(collections), 1)
        out.append(row)
        previous_end = end
    return out


HOST_SPANS = (("before_reset", "precheck", "started", "stage", "at"),
              ("to_reboot", "stage", "at", "reboot", "started"),
              ("reset_verified", "reboot", "started", "probe", "at"),
              ("to_undrain", "probe", "at", "undrain", "started"),
              ("undrain", "undrain", "started", "undrain", "at"))


def host_spans(plan: Dict[str, Any], hosts: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Where each batch's change phase went, from the hosts' recorded steps: per span
    (before_reset: precheck started to stage done, the wave's drain and kernel settings among
    them; to_reboot: the next action's start; reset_verified: the critical path's part, reset to
    probed; to_undrain; undrain) its median and largest seconds over the batch."""
    out: List[Dict[str, Any]] = []
    for batch in plan.get("batches") or []:
        row: Dict[str, Any] = {}
        for name, first, first_at, last, last_at in HOST_SPANS:
            values = []
            for host in batch["hosts"]:
                steps = (hosts.get(host) or {}).get("steps") or {}
                if first in steps and last in steps:
                    values.append(steps[last][last_at] - steps[first][first_at])
            row[name] = [round(_median(values), 1), round(max(values), 1)] if values else None
        out.append(row)
    return out


def _largest_value(home: str) -> Dict[str, Any]:
    """The largest datastore value (bytes) and its key."""
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    row = db.execute("SELECT name, LENGTH(value) FROM kv ORDER BY LENGTH(value) DESC "
                     "LIMIT 1").fetchone()
    return {"key": row[0], "bytes": int(row[1])} if row else {"key": None, "bytes": 0}


def _largest_context(home: str) -> Dict[str, int]:
    """Largest workflow context and largest persisted conductor state, in bytes."""
    db = sqlite3.connect(os.path.join(home, "runtime.db"))
    context, state = db.execute(
        "SELECT MAX(LENGTH(context)), MAX(LENGTH(state)) FROM workflows").fetchone()
    return {"context": int(context or 0), "conductor_state": int(state or 0)}


def describe(r: Dict[str, Any]) -> str:
    """The rollout measure, for people."""
    e = r["estimate"]
    ctx = r["largest_context_bytes"]
    return "\n".join([
        f"rollout, {r['hosts']} sim hosts, reboot {r['reboot_seconds']} s, {r['parallel']} in "
        f"flight: {r['total_seconds']} s (the rollout execution's own duration; "
        f"{r.get('wall_seconds')} s with the engine's start and stop) in {r['batches']} batches "
        f"{r['batch_sizes']}; status {r['status']}",
        f"  critical path (slowest host reset->verified per wave + windows + soak) "
        f"{r['critical_path_seconds']} s: ratio {r['ratio']}; pure bound (sim reboot + probe "
        f"budget per wave) {r['pure_bound_seconds']} s: ratio {r['pure_ratio']}",
        f"  controller CPU {r['controller_cpu_seconds']} s for {r['hosts_changed']} changed "
        f"hosts: {r['cpu_per_host']} CPU-s per host ({r['cpu_method']}); the sim hosts' own "
        f"side (what runs on a server of a real fleet) apart: {r['host_side_cpu_seconds']} s, "
        f"{r['host_side_cpu_per_host']} CPU-s per host",
        f"  largest workflow context {ctx['context']} bytes, conductor state "
        f"{ctx['conductor_state']} bytes; largest datastore value "
        f"{r['largest_datastore_value_bytes']['bytes']} bytes "
        f"({r['largest_datastore_value_bytes']['key']})",
        f"  estimate (sim reboot, 1 s drain, default assumptions otherwise) "
        f"{e.get('estimate_seconds')} s = {e.get('estimate_vs_measured')} x measured; the "
        f"estimate's batch model with the measured median host change "
        f"({e.get('measured_host_median')} s) {e.get('model_with_measured_host_seconds')} s = "
        f"{e.get('model_vs_measured')} x measured; with every assumption fitted to this run "
        f"{e.get('fitted_seconds')} s = {e.get('fitted_vs_measured')} x measured "
        f"({json.dumps(e.get('fitted_assumptions'))})",
        f"  capacity bound with the fitted assumptions {e.get('fitted_bound_seconds')} s: "
        f"measured {e.get('measured_vs_bound')} x the bound, the fitted estimate "
        f"{e.get('fitted_estimate_vs_bound')} x the bound",
        f"  counter windows beyond their length per batch: measured "
        f"{e.get('windows_beyond_length')} s, the fitted estimate's window runs "
        f"{e.get('fitted_window_runs')} s",
        f"  (lab up {r['lab_up_seconds']} s, not counted)",
        "  per batch (s): " + "; ".join(
            f"{i + 1}: {p['seconds']} = lead {p['lead']} + pre {p['pre']} + change "
            f"{p['change']} + post {p['post']} + judge {p['judge']} ({p['collections']} "
            f"collections, {p['collecting']} s of them; gap before {p['gap_before']})"
            for i, p in enumerate(r.get("phases") or [])),
        "  per batch, the hosts' spans (median/largest s): " + "; ".join(
            f"{i + 1}: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in row.items() if v)
            for i, row in enumerate(r.get("host_spans") or []))])


def rollout_figures(label: str, r: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """A rollout measure's figures for bench/RESULTS.md (results.py)."""
    at = f"{label}, {r['hosts']} sim hosts, reboot {r['reboot_seconds']:g} s"
    if int(r.get("runners") or 1) > 1:
        at += f", {r['runners']} action runners"
    return [(f"{at}: status", r["status"], ""),
            (f"{at}: duration", r["total_seconds"], "s"),
            (f"{at}: duration / critical path", r["ratio"], ""),
            (f"{at}: duration / pure bound", r["pure_ratio"], ""),
            (f"{at}: controller CPU per changed host", r["cpu_per_host"], "CPU-s"),
            (f"{at}: sim hosts' own side per host", r["host_side_cpu_per_host"], "CPU-s"),
            (f"{at}: largest datastore value", r["largest_datastore_value_bytes"]["bytes"],
             "bytes"),
            (f"{at}: largest workflow context", r["largest_context_bytes"]["context"], "bytes"),
            (f"{at}: estimate with fitted assumptions / measured",
             r["estimate"].get("fitted_vs_measured"), "")] + ([
                (f"{at}: measured / capacity bound (fitted assumptions)",
                 r["estimate"]["measured_vs_bound"], ""),
                (f"{at}: fitted estimate / capacity bound",
                 r["estimate"]["fitted_estimate_vs_bound"], "")]
                if r["estimate"].get("measured_vs_bound") else [])


def scale_figures(plan: Dict[str, Any], judged: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """The plan and judge scale measures' figures for bench/RESULTS.md."""
    return [(f"plan, {plan['hosts']} inventory hosts, from the host-vars cache",
             plan["warm_total_seconds"], "s"),
            (f"plan, {plan['hosts']} inventory hosts, first inventory read",
             plan["inventory_cold_seconds"], "s"),
            (f"plan, {plan['hosts']} inventory hosts, largest datastore value",
             plan["largest_value_bytes"], "bytes"),
            (f"judge, {judged['canary']} canary + {judged['control']} control hosts",
             judged["seconds"], "s")]


def record_results(bench: str, out: Dict[str, Any]) -> None:
    """This run's figures in bench/RESULTS.md (results.py)."""
    import results as bench_results

    figures: List[Tuple[str, Any, str]] = []
    if "plan" in out:
        figures += scale_figures(out["plan"], out["judge"])
    for key in ("rollout", "fleet", "big_batch"):
        if key in out:
            figures += rollout_figures(key.replace("_", " "), out[key])
    if "host_step" in out:
        from bench_host_step import step_figures

        figures += step_figures(out["host_step"])
    bench_results.record(bench, bench_results.figures(figures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--reboot-seconds", type=float, default=10.0)
    parser.add_argument("--runners", type=int, default=1,
                        help="the runtime's action runner processes (own state_dir each)")
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument("--skip-scale", action="store_true",
                        help="only the rollout (not the 20,000-host plan and judge)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-db", metavar="PATH", default="",
                        help="copy the rollout's runtime database (executions, datastore) here")
    parser.add_argument("--plan-only", type=int, metavar="HOSTS", default=0,
                        help="only the plan scale measure, with this many inventory hosts")
    args = parser.parse_args()
    if args.plan_only:
        print(json.dumps(plan_scale(args.plan_only), indent=1))
        return 0
    out: Dict[str, Any] = {} if args.skip_scale else {
        "plan": plan_scale(20000), "judge": judge_scale(4000, 16000)}
    if not args.skip_rollout:
        out["rollout"] = rollout_scale(RolloutBench(hosts=args.hosts,
                                                    reboot=args.reboot_seconds,
                                                    keep_db=args.keep_db,
                                                    runners=args.runners))
    # each invocation keeps its own rows: the bench column names its options
    options = "".join(f" --{name} {value:g}" for name, value, default in (
        ("hosts", args.hosts, 200), ("reboot-seconds", args.reboot_seconds, 10.0),
        ("runners", args.runners, 1)) if not args.skip_rollout and value != default)
    record_results("bench-rollout" + options + (" --skip-rollout" if args.skip_rollout else "")
                   + (" --skip-scale" if args.skip_scale else ""), out)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    if "plan" in out:
        p, j = out["plan"], out["judge"]
        print(f"plan, {p['hosts']} inventory hosts: inventory cold {p['inventory_cold_seconds']}"
              f" s, warm {p['inventory_warm_seconds']} s; build_plan {p['build_plan_seconds']} s;"
              f" save_plan {p['save_plan_seconds']} s (warm total {p['warm_total_seconds']} s); "
              f"{p['batches']} batches; plan {p['plan_bytes']} bytes in {p['plan_keys']} keys, "
              f"largest {p['largest_value_bytes']} bytes (one document: "
              f"{p['one_document_bytes']}); host step plan read "
              f"{p['host_step_read_ms_before']} ms before, {p['host_step_read_ms_after']} ms now")
        print(f"judge, {j['canary']} canary + {j['control']} control hosts: {j['seconds']} s "
              f"({j['verdict']})")
    if "rollout" in out:
        print(describe(out["rollout"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
