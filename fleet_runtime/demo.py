"""`make demo`: the lab (6 VM servers in 2 sites) and two staged rollouts through the embedded
runtime, answering the approvals the way an SRE would in chat.

1. home-snoop (lab windows) in 3 batches: approvals asked and answered, verification per host,
   canary verdicts (with 6 servers the judge has too few hosts for statistics: it says
   INCONCLUSIVE and the demo's SRE proceeds).
2. lab-bad: the canary's receiver slows down, its drop rate crosses the judge's ceiling, the batch
   FAILs and every changed host is rolled back automatically.
3. The HTML reports and the audit trail.

Environment: DEMO_HOSTS (6), DEMO_BACKEND (vm; sim for a quick run), DEMO_KEEP_LAB=1 keeps the lab
running afterwards, FLEET_ROLLOUT_HOME (default .lab/runtime).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from fleet_lab import lab

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = os.path.join(REPO, ".lab", "demo")
HOME = os.environ.get("FLEET_ROLLOUT_HOME") or os.path.join(REPO, ".lab", "runtime")


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


class Chat:
    """Shows the chat transcript (what the rules and workflows posted) as it grows."""

    def __init__(self) -> None:
        self.path = os.path.join(HOME, "chat.jsonl")
        self.seen = self._count()

    def _count(self) -> int:
        try:
            with open(self.path) as handle:
                return sum(1 for _ in handle)
        except OSError:
            return 0

    def show(self) -> None:
        try:
            with open(self.path) as handle:
                lines = handle.readlines()
        except OSError:
            return
        for line in lines[self.seen:]:
            msg = json.loads(line)
            text = str(msg.get("message", "")).strip().replace("\n", "\n        ")
            print(f"  [chat #{msg.get('channel')}] {text}")
        self.seen = len(lines)


def pending_inquiry() -> Optional[Dict[str, Any]]:
    items = run_json("inquiry", "list")
    return items[0] if items else None


def drive(execution_id: str, chat: Chat, answer: Any) -> Dict[str, Any]:
    """Answer each question of the rollout until its workflow ends."""
    while True:
        chat.show()
        doc = run_json("execution", "get", execution_id)
        if doc["status"] not in ("paused", "pausing", "running", "requested", "scheduled",
                                 "resuming"):
            return doc
        inquiry = pending_inquiry()
        if inquiry is None:
            time.sleep(2)
            continue
        response = answer(inquiry)
        print(f"  [sre-alice] answers inquiry {inquiry['id']}: {json.dumps(response)}")
        print(f"      (fleet-rollout inquiry respond {inquiry['id']} -r "
              f"'{json.dumps(response)}'; in chat: rollout approve <rollout id>)")
        out = cli("inquiry", "respond", inquiry["id"], "-r", json.dumps(response), "--no-wait")
        if out.returncode != 0:
            raise SystemExit(f"demo: respond failed:\n{out.stderr[-2000:]}")


def sre(inquiry: Dict[str, Any]) -> Dict[str, Any]:
    props = (inquiry.get("schema") or {}).get("properties") or {}
    if "approved" in props:
        return {"approved": True, "by": "sre-alice"}
    return {"choice": "proceed", "by": "sre-alice"}


def status_table(rollout_id: str) -> str:
    doc = run_json("run", "fleet_rollout.status", f"rollout_id={rollout_id}")
    result = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    inner = result.get("result") if isinstance(result.get("result"), dict) else {}
    return str(inner.get("table", ""))


def start(profile: str, chat: Chat) -> Dict[str, Any]:
    out = cli("run", "-a", "fleet_rollout.rollout", f"profile={profile}", "--json")
    if not out.stdout.strip().startswith("{"):
        raise SystemExit(f"demo: rollout did not start:\n{out.stderr[-3000:]}")
    doc = json.loads(out.stdout)
    return drive(doc["id"], chat, sre)


def main() -> int:
    hosts = int(os.environ.get("DEMO_HOSTS", "6"))
    backend = os.environ.get("DEMO_BACKEND", "vm")
    started = time.monotonic()
    os.environ["FLEET_ROLLOUT_HOME"] = HOME
    os.makedirs(HOME, exist_ok=True)
    lab.down(STATE, progress=lambda _m: None)
    shutil.rmtree(STATE, ignore_errors=True)  # a fresh lab: BIOS defaults, empty disks
    say(f"lab up: {hosts} {backend} servers in 2 sites, one simulated Dell iDRAC 8 BMC each")
    # rates and traffic at 15% of the lab's model: the same drop fractions for far less CPU
    # (TCG guests pay for every packet)
    config = lab.LabConfig(hosts=hosts, backend=backend, vendors=["dell-idrac8"], sites=2,
                           hosts_per_rack=1, rate_scale=0.15)
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
        chat = Chat()
        reports: List[str] = []

        say("rollout 1: home-snoop (Early Snoop -> Home Snoop), approvals in chat")
        doc = start("lab-home-snoop", chat)
        result = (doc.get("result") or {}).get("output") or {}
        rollout_id = result.get("rollout_id", "?")
        print(f"\n  workflow {doc['status']}; rollout {rollout_id}: {result.get('status')}")
        print("\n" + status_table(rollout_id))
        reports.append(os.path.join(STATE, "rollouts", rollout_id, "report.html"))

        say("rollout 2: lab-bad (a change that slows packet processing): the canary must FAIL "
            "and roll back by itself")
        doc = start("lab-bad", chat)
        result = (doc.get("result") or {}).get("output") or {}
        bad_id = result.get("rollout_id", "?")
        print(f"\n  workflow {doc['status']}; rollout {bad_id}: {result.get('status')} "
              f"(last verdict {result.get('last_verdict')})")
        print("\n" + status_table(bad_id))
        chat.show()
        reports.append(os.path.join(STATE, "rollouts", bad_id, "report.html"))

        say("after both rollouts")
        print(cli("lab", "status", "--state-dir", STATE).stdout)
        for path in reports:
            print(f"  report: {path}")
            audit = os.path.join(os.path.dirname(path), "audit.jsonl")
            if os.path.exists(audit):
                with open(audit) as handle:
                    print(f"  audit:  {audit} ({sum(1 for _ in handle)} entries)")
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
