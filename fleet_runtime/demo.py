"""`make demo`: the lab (6 VM servers in 2 sites) and two staged rollouts through the embedded
runtime, answering the approvals the way an SRE would in chat.

1. home-snoop (lab windows) in 3 batches: approvals asked and answered, verification per host,
   canary verdicts (with 6 servers the judge has too few hosts for statistics: it says
   INCONCLUSIVE and the demo's SRE proceeds).
2. lab-bad: the canary's receiver slows down, its drop rate crosses the judge's ceiling, the batch
   FAILs and every changed host is rolled back automatically.
3. The HTML reports and the audit trail.

Environment: DEMO_HOSTS (6), DEMO_BACKEND (vm; sim for a quick run), DEMO_KEEP_LAB=1 keeps the lab
running afterwards, FLEET_ROLLOUT_HOME (default .lab/demo/runtime: like the lab, a fresh one each
run, so an engine never resumes a rollout of an earlier demo on the new servers).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from fleet_lab import lab
from fleet_runtime.datastore import Datastore
from fleet_runtime.home import RuntimeHome
from fleet_runtime.store import Store

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = os.path.join(REPO, ".lab", "demo")
HOME = os.environ.get("FLEET_ROLLOUT_HOME") or os.path.join(STATE, "runtime")


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLEET_ROLLOUT_HOME=HOME, FLEET_ROLLOUT_USER="sre-alice")
    return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def run_json(*args: str) -> Dict[str, Any]:
    out = cli(*args, "--json")
    if not out.stdout.strip().startswith(("{", "[")):
        raise SystemExit(f"demo: {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


class Watch:
    """Follows the rollouts from the runtime's database, in this process (a CLI process per
    poll would cost the lab's CPUs more than the rollout does): the chat transcript as it grows,
    every host step as it finishes, the question waiting for an answer."""

    def __init__(self) -> None:
        home = RuntimeHome(HOME)
        self.store = Store(str(home.db_path))
        self.kv = Datastore(str(home.db_path), home.key_path)
        self.chat_path = os.path.join(HOME, "chat.jsonl")
        self.chat_seen = len(self._chat_lines())
        self.steps_seen = set(self._steps())
        self.tasks_seen: set = set()

    def _chat_lines(self) -> List[str]:
        try:
            with open(self.chat_path) as handle:
                return handle.readlines()
        except OSError:
            return []

    def _steps(self) -> Dict[Tuple[str, str, str, float], Dict[str, Any]]:
        found = {}
        for item in self.kv.list("fleet_rollout."):
            rollout, sep, host = item["name"][len("fleet_rollout."):].partition(".host.")
            if not sep:
                continue
            for step, done in (json.loads(item["value"]).get("steps") or {}).items():
                found[(rollout, host, step, float(done.get("at") or 0))] = done
        return found

    def show(self) -> None:
        lines = self._chat_lines()
        for line in lines[self.chat_seen:]:
            msg = json.loads(line)
            text = str(msg.get("message", "")).strip().replace("\n", "\n        ")
            print(f"  [chat #{msg.get('channel')}] {text}", flush=True)
        self.chat_seen = len(lines)
        steps = self._steps()
        for key in sorted(set(steps) - self.steps_seen, key=lambda k: k[3]):
            done = steps[key]
            _rollout, host, step, at = key
            outcome = "ok" if done.get("ok") else "FAILED: " + str(
                (done.get("detail") or {}).get("error", ""))[:160]
            print(f"    {time.strftime('%H:%M:%S', time.localtime(at))}  {host:<10} "
                  f"{step:<9} {outcome} ({float(done.get('seconds') or 0):.0f} s)", flush=True)
            self.steps_seen.add(key)

    def show_tasks(self, root_id: str) -> None:
        """The workflow's own tasks (counter windows, judging, rollback) as they finish."""
        quiet = ("fleet_rollout.host_step", "chatops.post_message", "core.ask")
        for task in self.store.find_executions("root_id=? AND end_ts IS NOT NULL", (root_id,),
                                               order="end_ts, rowid"):
            if task["id"] in self.tasks_seen or task["id"] == root_id:
                continue
            self.tasks_seen.add(task["id"])
            if task["action"] in quiet:
                continue
            seconds = float(task["end_ts"]) - float(task["start_ts"] or task["end_ts"])
            print(f"    {time.strftime('%H:%M:%S', time.localtime(float(task['end_ts'])))}  "
                  f"{task['action'].split('.', 1)[-1]:<20} {task['status']} ({seconds:.0f} s)",
                  flush=True)

    def status(self, execution_id: str) -> Dict[str, Any]:
        record = self.store.get_execution(execution_id)
        if record is None:
            raise SystemExit(f"demo: execution {execution_id} not found")
        return record

    def pending_inquiry(self) -> Optional[Dict[str, Any]]:
        rows = self.store.find_executions("runner='inquirer' AND status='pending'")
        return rows[0] if rows else None


def drive(execution_id: str, watch: Watch, answer: Any) -> Dict[str, Any]:
    """Show progress and answer each question of the rollout until its workflow ends."""
    while True:
        watch.show()
        watch.show_tasks(execution_id)
        if watch.status(execution_id)["status"] not in (
                "paused", "pausing", "running", "requested", "scheduled", "resuming"):
            watch.show()
            return run_json("execution", "get", execution_id)
        inquiry = watch.pending_inquiry()
        if inquiry is None:
            time.sleep(2)
            continue
        time.sleep(1)  # the question's chat message is posted right after the inquiry
        watch.show()
        schema = (inquiry.get("result") or {}).get("schema") or {}
        message = answer(schema)
        print(f"  [chat #fleet-rollout] sre-alice: {message}", flush=True)
        out = cli("chat", "--user", "sre-alice", "--channel", "fleet-rollout", message)
        if out.returncode != 0 or "Refused" in out.stdout:
            raise SystemExit(f"demo: the chat answer failed:\n{out.stdout[-2000:]}"
                             f"{out.stderr[-2000:]}")


def sre(schema: Dict[str, Any]) -> str:
    """What the SRE types in chat: approve the batch, or proceed after INCONCLUSIVE."""
    props = schema.get("properties") or {}
    rollout_id = (props.get("rollout_id") or {}).get("default", "")
    return f"rollout approve {rollout_id}"


def status_table(rollout_id: str) -> str:
    doc = run_json("run", "fleet_rollout.status", f"rollout_id={rollout_id}")
    result = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    inner = result.get("result") if isinstance(result.get("result"), dict) else {}
    return str(inner.get("table", ""))


def start(profile: str, watch: Watch) -> Dict[str, Any]:
    out = cli("run", "-a", "fleet_rollout.rollout", f"profile={profile}", "--json")
    if not out.stdout.strip().startswith("{"):
        raise SystemExit(f"demo: rollout did not start:\n{out.stderr[-3000:]}")
    doc = json.loads(out.stdout)
    return drive(doc["id"], watch, sre)


def main() -> int:
    hosts = int(os.environ.get("DEMO_HOSTS", "6"))
    backend = os.environ.get("DEMO_BACKEND", "vm")
    started = time.monotonic()
    os.environ["FLEET_ROLLOUT_HOME"] = HOME
    lab.down(STATE, progress=lambda _m: None)
    shutil.rmtree(STATE, ignore_errors=True)  # a fresh lab: BIOS defaults, empty disks
    os.makedirs(HOME, exist_ok=True)
    say(f"lab up: {hosts} {backend} servers in 2 sites, one simulated Dell iDRAC 8 BMC each")
    # rates and traffic at 15% of the lab's model: the same drop fractions for far less CPU
    # (TCG guests pay for every packet)
    config = lab.LabConfig(hosts=hosts, backend=backend, vendors=["dell-idrac8"], sites=2,
                           hosts_per_rack=1, rate_scale=0.15, approvers=["sre-alice"])
    inventory = os.path.join(REPO, "inventory", "lab.yml")
    try:
        lab.up(config, STATE, inventory, progress=lambda m: print("  " + m, flush=True))
        print(cli("lab", "status", "--state-dir", STATE).stdout)
        # the runtime's engine runs in the background like st2's services; the CLI hands it
        # every request (run, inquiry respond)
        engine = subprocess.Popen([sys.executable, "-m", "fleet_runtime.cli", "engine",
                                   "--forever"], cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL,
                                  env=dict(os.environ, FLEET_ROLLOUT_HOME=HOME,
                                           FLEET_ROLLOUT_USER="sre-alice"))
        time.sleep(3)
        watch = Watch()
        reports: List[str] = []

        say("rollout 1: home-snoop (Early Snoop -> Home Snoop), approvals in chat")
        doc = start("lab-home-snoop", watch)
        result = (doc.get("result") or {}).get("output") or {}
        rollout_id = result.get("rollout_id", "?")
        print(f"\n  workflow {doc['status']}; rollout {rollout_id}: {result.get('status')}")
        print("\n" + status_table(rollout_id))
        reports.append(os.path.join(STATE, "rollouts", rollout_id, "report.html"))

        say("rollout 2: lab-bad (a change that slows packet processing): the canary must FAIL "
            "and roll back by itself")
        doc = start("lab-bad", watch)
        result = (doc.get("result") or {}).get("output") or {}
        bad_id = result.get("rollout_id", "?")
        print(f"\n  workflow {doc['status']}; rollout {bad_id}: {result.get('status')} "
              f"(last verdict {result.get('last_verdict')})")
        print("\n" + status_table(bad_id))
        watch.show()
        reports.append(os.path.join(STATE, "rollouts", bad_id, "report.html"))

        say("after both rollouts")
        print(cli("lab", "status", "--state-dir", STATE).stdout)
        for path in reports:
            print(f"  report: {path}")
            audit = os.path.join(os.path.dirname(path), "audit.jsonl")
            if os.path.exists(audit):
                with open(audit) as handle:
                    print(f"  audit:  {audit} ({sum(1 for _ in handle)} entries)")
        print(f"  runtime: FLEET_ROLLOUT_HOME={HOME} .venv/bin/fleet-rollout execution list")
        print(f"\n  demo took {time.monotonic() - started:.0f} s")
        ok = result.get("status") == "rolled_back"
        engine.terminate()
        engine.wait(30)
        return 0 if ok else 1
    finally:
        if os.environ.get("DEMO_KEEP_LAB") != "1":
            say("lab down")
            lab.down(STATE)


if __name__ == "__main__":
    sys.exit(main())
