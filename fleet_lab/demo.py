"""`make demo`: the lab (6 VM servers and 10 sim servers beside them, in 2 sites) with ChatOps
(ngircd, errbot + err-stackstorm, the runtime's st2 API and engine) and two staged rollouts of the
VMs, started with the real st2 CLI as sre-alice, whose approvals she answers in IRC
(`!st2 rollout approve <id>` in #fleet-rollout). The sim servers (same BMC simulator, Dell
iDRAC 8, sites and racks, the lab's drop model as counter arithmetic under the same traffic
settings) are never targeted: they are the unchanged control group, 5 per site, that the canary
judge compares the changed VMs with (`targets=lab_vm`, the inventory group of the VMs).

1. home-snoop (lab windows) in 2 batches of 3 VMs: approvals asked and answered, verification
   per host, and the canary verdicts: the VMs' drops fall from about 14% to about none while the
   controls' stay: PASS by the comparison with the controls of their sites ("An improvement:
   ...x fewer drops than the controls would predict"). Should a batch still be INCONCLUSIVE, the
   judge asks a human and the demo's SRE proceeds.
2. lab-bad: the canary's receiver slows down x4; compared with the controls of its site its drops
   rise hundreds of times (with one canary, a change of 5x or more decides: "a large
   regression"), and it is above the absolute drop ceiling too (the verdict's second reason): the
   batch FAILs and every changed host is rolled back automatically.
3. The HTML reports and the audit trail.

Environment: DEMO_HOSTS (6: the target servers), DEMO_SIM_HOSTS (10: the control servers, on the
sim backend beside them), DEMO_STATE_DIR (.lab/demo), DEMO_INVENTORY (inventory/lab.yml),
DEMO_BACKEND (vm; sim for a quick run: the targets are sim servers too, and the rollouts name
them), DEMO_COUNTERS (collector: the hosts sample their own counters; prometheus: the lab also
runs a node_exporter per server and a Prometheus scraping them, and the judge reads every
window from that Prometheus), DEMO_KEEP_LAB=1 keeps the lab
and its chat running afterwards (`fleet-rollout lab status --state-dir .lab/demo` shows the IRC
server, the st2 API and the st2 CLI config files), FLEET_ROLLOUT_HOME (default .lab/demo/runtime:
like the lab, a fresh one each run, so an engine never resumes a rollout of an earlier demo on the
new servers).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from fleet_lab import lab
from fleet_lab.chatops import stack
from fleet_lab.chatops.irc_client import IrcClient, IrcLine
from fleet_runtime.database import Store
from fleet_runtime.datastore import Datastore
from fleet_runtime.home import RuntimeHome
from fleet_runtime.paths import REPO_ROOT

REPO = str(REPO_ROOT)
STATE = os.environ.get("DEMO_STATE_DIR") or os.path.join(REPO, ".lab", "demo")
HOME = os.environ.get("FLEET_ROLLOUT_HOME") or os.path.join(STATE, "runtime")
SRE = "sre-alice"  # the approver: an st2 user (the st2 CLI) and an IRC nick


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLEET_ROLLOUT_HOME=HOME, FLEET_ROLLOUT_USER=SRE)
    return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def run_json(*args: str) -> Dict[str, Any]:
    out = cli(*args, "--json")
    if not out.stdout.strip().startswith(("{", "[")):
        raise SystemExit(f"demo: {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


class Channel:
    """#fleet-rollout as the SRE sees it: a real IRC client (nick sre-alice) in the lab's
    channel, where errbot (err-stackstorm) posts what the runtime announces on route errbot."""

    def __init__(self, info: stack.ChatopsInfo, nick: str = SRE) -> None:
        self.info = info
        self.client = IrcClient(info.irc_host, info.irc_port, nick).connect()
        self.client.join(info.channel)
        self.shown = self.client.mark()

    def close(self) -> None:
        self.client.close()

    def _is_message(self, line: IrcLine) -> bool:
        return (line.command in ("PRIVMSG", "NOTICE")
                and line.target.lower() in (self.info.channel.lower(), self.client.nick.lower()))

    def show(self) -> None:
        """Print the channel's lines that arrived since the last call."""
        lines = self.client.lines[self.shown:]
        self.shown += len(lines)
        for line in lines:
            if self._is_message(line):
                print(f"  [chat {line.target}] <{line.nick or self.client.nick}> {line.plain}",
                      flush=True)

    def wait_bot(self, pattern: str, timeout: float, since: int) -> IrcLine:
        try:
            return self.client.wait_for_message(self.info.channel, from_nick=self.info.bot_nick,
                                                pattern=pattern, timeout=timeout, since=since)
        except TimeoutError as e:
            raise SystemExit(f"demo: {self.info.bot_nick} did not post /{pattern}/ in "
                             f"{self.info.channel} within {timeout:.0f} s:\n{e}") from None

    def answer(self, inquiry_id: str, command: str) -> None:
        """Wait for the bot's question about `inquiry_id`, say `command`, wait for the result."""
        self.wait_bot(re.escape(f"inquiry {inquiry_id}"), 120, since=0)
        self.show()
        mark = self.client.say(self.info.channel, f"!st2 {command}")
        reply = self.wait_bot(r"answered|Refused|not waiting|not found", 120, since=mark)
        self.show()
        if "answered" not in reply.plain:
            raise SystemExit(f"demo: the chat answer failed: {reply.plain}")


class Watch:
    """Follows the rollouts from the runtime's database, in this process (a CLI process per
    poll would cost the lab's CPUs more than the rollout does): every host step as it finishes,
    the question waiting for an answer; and the chat channel as it grows."""

    def __init__(self, channel: Channel) -> None:
        home = RuntimeHome(HOME)
        self.channel = channel
        self.store = Store(str(home.db_path))
        self.kv = Datastore(str(home.db_path), home.key_path)
        self.steps_seen = set(self._steps())
        self.tasks_seen: set = set()
        self.answered: set = set()

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
        self.channel.show()
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
        # host steps show as each host's steps (show_steps)
        quiet = ("fleet_rollout.host_step", "fleet_rollout.wave_step", "chatops.post_message",
                 "core.ask")
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
        rows = [row for row in rows if row["id"] not in self.answered]
        return rows[0] if rows else None


def drive(execution_id: str, watch: Watch, answer: Any) -> Dict[str, Any]:
    """Show progress and answer each question of the rollout in chat until its workflow ends."""
    while True:
        watch.show()
        watch.show_tasks(execution_id)
        if watch.status(execution_id)["status"] not in (
                "paused", "pausing", "running", "requested", "scheduled", "resuming"):
            time.sleep(2)  # the rollout's last chat message follows its end
            watch.show()
            return run_json("execution", "get", execution_id)
        inquiry = watch.pending_inquiry()
        if inquiry is None:
            time.sleep(1)
            continue
        schema = (inquiry.get("result") or {}).get("schema") or {}
        watch.channel.answer(inquiry["id"], answer(schema))
        watch.answered.add(inquiry["id"])


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


def st2(info: stack.ChatopsInfo, *args: str) -> subprocess.CompletedProcess:
    """The real st2 CLI (PyPI st2client) as the SRE, against the lab's st2 API."""
    if not stack.ST2_CLI.exists():
        raise SystemExit(f"demo: {stack.ST2_CLI} is missing: `make install` creates it")
    return subprocess.run([str(stack.ST2_CLI), *args], env=info.st2_env(SRE),
                          capture_output=True, text=True, timeout=300)


def start(profile: str, targets: str, watch: Watch) -> Dict[str, Any]:
    info = watch.channel.info
    print(f"  $ st2 run fleet_rollout.rollout profile={profile} targets={targets} -a    "
          f"(as {SRE})", flush=True)
    out = st2(info, "run", "fleet_rollout.rollout", f"profile={profile}", f"targets={targets}",
              "-a")
    found = re.search(r"st2 execution get (\S+)", out.stdout)
    if out.returncode != 0 or not found:
        raise SystemExit(f"demo: st2 run did not start the rollout:\n{out.stdout[-3000:]}"
                         f"{out.stderr[-3000:]}")
    print("  " + out.stdout.strip().replace("\n", "\n  "), flush=True)
    return drive(found.group(1), watch, sre)


def verdicts(watch: Watch, rollout_id: str) -> None:
    """The canary judge's verdict of every judged batch, whole (chat splits long messages)."""
    prefix = f"fleet_rollout.{rollout_id}.batch."
    found = []
    for item in watch.kv.list(prefix):
        index, _, field = item["name"][len(prefix):].partition(".state.")
        if not index.isdigit() or field != "verdict":
            continue  # the batch's counters and its other fields
        verdict = json.loads(item["value"] or "{}") or {}
        if isinstance(verdict, dict):
            found.append((int(index), verdict))
    for _index, verdict in sorted(found, key=lambda item: item[0]):
        print(f"  judge [{verdict.get('reason')}] {verdict.get('explanation')}", flush=True)


def rollout_good(watch: Watch, targets: str) -> str:
    say("rollout 1: home-snoop (Early Snoop -> Home Snoop) on the target servers, approvals in "
        "chat (IRC); the canary judge compares them with the unchanged control servers")
    doc = start("lab-home-snoop", targets, watch)
    result = (doc.get("result") or {}).get("output") or {}
    rollout_id = result.get("rollout_id", "?")
    print(f"\n  workflow {doc['status']}; rollout {rollout_id}: {result.get('status')}")
    print("\n  the canary verdicts:")
    verdicts(watch, rollout_id)
    print("\n" + status_table(rollout_id))
    return rollout_id


def rollout_bad(watch: Watch, targets: str) -> Tuple[str, bool]:
    say("rollout 2: lab-bad (a change that slows packet processing): the canary must FAIL "
        "against the control servers and roll back by itself")
    doc = start("lab-bad", targets, watch)
    result = (doc.get("result") or {}).get("output") or {}
    bad_id = result.get("rollout_id", "?")
    print(f"\n  workflow {doc['status']}; rollout {bad_id}: {result.get('status')} "
          f"(last verdict {result.get('last_verdict')})")
    print("\n  the canary verdict:")
    verdicts(watch, bad_id)
    print("\n" + status_table(bad_id))
    watch.show()
    return bad_id, result.get("status") == "rolled_back"


def summary(watch: Watch, rollout_ids: List[str]) -> None:
    say("after both rollouts")
    print(cli("lab", "status", "--state-dir", STATE).stdout)
    for rollout_id in rollout_ids:
        path = os.path.join(STATE, "rollouts", "reports", f"{rollout_id}.html")
        print(f"  report: {path} (any runner: st2 run fleet_rollout.report "
              f"rollout_id={rollout_id})")
        entries = watch.kv.list(f"fleet_rollout.{rollout_id}.audit.")
        print(f"  audit:  {len(entries)} entries (datastore keys fleet_rollout.{rollout_id}"
              ".audit.*)")
    print(f"  runtime: FLEET_ROLLOUT_HOME={HOME} .venv/bin/fleet-rollout execution list")
    print(f"  st2 CLI: ST2_CONFIG_FILE={os.path.join(STATE, 'st2', SRE + '.conf')} "
          f"{stack.ST2_CLI} execution list")


def lab_config(hosts: int, backend: str, sim_hosts: int,
               counters: str = "collector") -> lab.LabConfig:
    """The demo's lab: `hosts` target servers on `backend`, then `sim_hosts` sim servers (the
    controls), one rack per server and site; a sim demo is all sim servers in one backend.
    `counters`: where the judge's windows come from (prometheus: the lab's Prometheus)."""
    # rates and traffic at 10% of the lab's model: the same drop fractions for far less CPU
    # (TCG guests pay for every packet). At 15% a CI run that loaded both cores starved the
    # guests below even Early Snoop's rate: the canaries dropped 35% under either setting and
    # the good rollout showed no improvement
    # The VM guests' receive buffers hold about 1.6 s of their 350 packets/s (the receiver's
    # default holds 0.24 s): with the default, a CI run whose load stalled the TCG guests saw
    # Home Snoop canaries drop 22% (the rate model: none), and the good rollout's first batch
    # showed no improvement (1.10x)
    common: Dict[str, Any] = dict(vendors=["dell-idrac8"], sites=2, hosts_per_rack=1,
                                  rate_scale=0.1, approvers=[SRE], chatops=True,
                                  guest_rcvbuf=lab.GUEST_RCVBUF_MAX,
                                  prometheus=counters == "prometheus", counters=counters)
    if backend == "sim":
        return lab.LabConfig(hosts=hosts + sim_hosts, backend="sim", **common)
    return lab.LabConfig(hosts=hosts, backend=backend, sim_hosts=sim_hosts, **common)


def targets_of(config: lab.LabConfig, hosts: int) -> str:
    """The rollouts' Ansible pattern: the VMs' inventory group, or (a sim demo) the names of
    the first `hosts` servers; the servers after them are the controls."""
    if config.backend == "vm":
        return lab.BACKEND_GROUPS["vm"]
    return ",".join(config.host_names()[:hosts])


def lab_up(config: lab.LabConfig, hosts: int) -> stack.ChatopsInfo:
    """A fresh lab with ChatOps: IRC, errbot, the st2 API and its engine (like st2's
    services, it runs every request: st2 run, the bot's alias executions, inquiry answers)."""
    lab.down(STATE, progress=lambda _m: None)
    shutil.rmtree(STATE, ignore_errors=True)  # a fresh lab: BIOS defaults, empty disks
    os.makedirs(HOME, exist_ok=True)
    controls = config.total_hosts() - hosts
    beside = f" and {controls} sim servers beside them (the control group)" if controls else ""
    say(f"lab up: {hosts} {config.backend} servers to change{beside}, in 2 sites, one simulated "
        "Dell iDRAC 8 BMC each; IRC + errbot + the st2 API")
    inventory = os.environ.get("DEMO_INVENTORY") or os.path.join(REPO, "inventory", "lab.yml")
    lab.up(config, STATE, inventory, progress=lambda m: print("  " + m, flush=True))
    print(cli("lab", "status", "--state-dir", STATE).stdout)
    info = stack.read_info(STATE)
    if info is None:
        raise SystemExit(f"demo: lab up --chatops wrote no {stack.INFO_NAME} in {STATE}")
    return info


def main() -> int:
    hosts = int(os.environ.get("DEMO_HOSTS", "6"))
    backend = os.environ.get("DEMO_BACKEND", "vm")
    counters = os.environ.get("DEMO_COUNTERS", "collector")
    if counters not in lab.COUNTER_SOURCES:
        raise SystemExit(f"demo: DEMO_COUNTERS={counters!r}: one of "
                         f"{', '.join(lab.COUNTER_SOURCES)}")
    config = lab_config(hosts, backend, int(os.environ.get("DEMO_SIM_HOSTS", "10")), counters)
    targets = targets_of(config, hosts)
    started = time.monotonic()
    os.environ["FLEET_ROLLOUT_HOME"] = HOME
    channel: Optional[Channel] = None
    try:
        info = lab_up(config, hosts)
        channel = Channel(info)
        print(f"  {SRE} joined {info.channel} on {info.irc_host}:{info.irc_port}", flush=True)
        watch = Watch(channel)
        good = rollout_good(watch, targets)
        bad, ok = rollout_bad(watch, targets)
        summary(watch, [good, bad])
        print(f"\n  demo took {time.monotonic() - started:.0f} s")
        return 0 if ok else 1
    finally:
        if channel is not None:
            channel.close()
        if os.environ.get("DEMO_KEEP_LAB") != "1":
            say("lab down")
            lab.down(STATE)


if __name__ == "__main__":
    sys.exit(main())
