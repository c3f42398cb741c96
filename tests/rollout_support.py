"""Helpers for the rollout tests: a sim lab, a runtime home, the CLI, the simulator's state."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import requests
import yaml
from locations import ROOT as REPO_ROOT

from fleet_lab import lab

ROOT = str(REPO_ROOT)  # tests/locations.py's, as a str for os.path


class SimLab:
    def __init__(self, tmp: str, hosts: int, vendors: Optional[List[str]] = None,
                 approvers: Optional[List[str]] = None, reboot_seconds: float = 0.5,
                 prometheus: bool = False) -> None:
        """`prometheus`: the lab's node_exporters and Prometheus run, and the pack config
        reads counter windows from that Prometheus."""
        self.tmp = tmp
        self.home = os.path.join(tmp, "home")
        self.state = os.path.join(tmp, "lab")
        self.inventory = os.path.join(tmp, "inventory.yml")
        self.env = dict(os.environ, FLEET_ROLLOUT_HOME=self.home, FLEET_ROLLOUT_USER="alice")
        os.environ["FLEET_ROLLOUT_HOME"] = self.home  # lab.up copies the pack config there
        self.manifest = lab.up(lab.LabConfig(hosts=hosts, backend="sim",
                                             vendors=vendors or ["generic"],
                                             reboot_seconds=reboot_seconds, hosts_per_rack=4,
                                             approvers=["alice"] if approvers is None
                                             else approvers, prometheus=prometheus,
                                             counters="prometheus" if prometheus
                                             else "collector"),
                               self.state, self.inventory, progress=lambda _m: None)
        self.config = yaml.safe_load(open(lab.paths(self.state)["pack_config"]))
        self.engine: Optional[subprocess.Popen] = None

    def down(self) -> None:
        self.stop_engine()
        lab.down(self.state, progress=lambda _m: None)

    # ------------------------------------------------------------------ engine
    def start_engine(self) -> None:
        """A background engine (as st2's services run), in its own process group: a rollout
        waits for its answers with a task running (fleet_rollout.await_answer), so a run
        in the foreground would wait for them too."""
        if self.engine is not None and self.engine.poll() is None:
            return
        with open(os.path.join(self.tmp, "engine.log"), "ab") as log:  # for a failure's reader
            self.engine = subprocess.Popen(
                [sys.executable, "-m", "fleet_runtime.cli", "engine", "--forever"],
                env=self.env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
        lock = os.path.join(self.home, "runtime.lock")
        deadline = time.time() + 60
        while time.time() < deadline and self.engine.poll() is None:
            try:
                if open(lock).read().strip() == str(self.engine.pid):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the background engine did not start (exit {self.engine.poll()})")

    def stop_engine(self) -> None:
        if self.engine is None:
            return
        if self.engine.poll() is None:
            os.killpg(self.engine.pid, signal.SIGTERM)
            try:
                self.engine.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.engine.pid, signal.SIGKILL)
                self.engine.wait(timeout=30)
        self.engine = None

    def ask_run(self, action: str, **params: Any) -> Dict[str, Any]:
        """Start `action` with the background engine; its execution once it ends, pauses
        or waits for an answer (settle)."""
        self.start_engine()
        args = [f"{k}={v}" for k, v in params.items()]
        out = self.cli("run", action, *args, "-a", "--json")
        assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
        return self.settle(json.loads(out.stdout)["id"])

    def run_proceeding(self, action: str, **params: Any) -> Dict[str, Any]:
        """run, answering: each INCONCLUSIVE verdict's question (it asks a human) is answered
        `proceed` by the runtime's user, an approver; the background engine is stopped at the
        end, as run leaves none."""
        execution = self.ask_run(action, **params)
        while self.waiting(execution):
            for inquiry in self.pending():
                self.cli("inquiry", "respond", inquiry["id"], "-r", '{"choice": "proceed"}')
            execution = self.settle(execution["id"])
        self.wait_idle()
        self.stop_engine()
        return execution

    def waiting(self, doc: Dict[str, Any]) -> bool:
        """The execution is under way with a question waiting for an answer."""
        return doc["status"] in ("running", "paused") and bool(self.pending())

    def settle(self, execution_id: str, timeout: float = 900) -> Dict[str, Any]:
        """The execution once it has ended or paused, or while a question waits for an
        answer (an inquiry seen pending in two reads: an answer just given is not)."""
        deadline = time.time() + timeout
        seen: set = set()
        while True:
            doc = json.loads(self.cli("execution", "get", execution_id, "--json").stdout)
            if doc["status"] in ("succeeded", "failed", "canceled", "timeout", "abandoned",
                                 "paused") or time.time() > deadline:
                return doc
            pending = {i["id"] for i in self.pending()}
            if pending & seen:
                return doc
            seen = pending
            time.sleep(0.5)

    # ------------------------------------------------------------------ CLI
    def cli(self, *args: str, timeout: float = 900,
            user: Optional[str] = None) -> subprocess.CompletedProcess:
        """`fleet-rollout ARGS` as the runtime's user (alice) or as `user`."""
        env = self.env if user is None else dict(self.env, FLEET_ROLLOUT_USER=user)
        return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args], env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def set_config(self, **values: Any) -> None:
        """Change the pack config the runtime reads (like editing /opt/stackstorm/configs)."""
        path = os.path.join(self.home, "configs", "fleet_rollout.yaml")
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        doc.update(values)
        with open(path, "w") as handle:
            yaml.safe_dump(doc, handle)
        self.config = doc

    def pending(self) -> List[Dict[str, Any]]:
        out = self.cli("inquiry", "list", "--json")
        return json.loads(out.stdout) if out.stdout.strip() else []

    def wait_status(self, execution_id: str, statuses: tuple, timeout: float = 300
                    ) -> Dict[str, Any]:
        deadline = time.time() + timeout
        while True:
            doc = json.loads(self.cli("execution", "get", execution_id, "--json").stdout)
            if doc["status"] in statuses or time.time() > deadline:
                return doc
            time.sleep(1)

    def run(self, action: str, **params: Any) -> Dict[str, Any]:
        """`st2 run` in the foreground: this CLI is the engine (a background engine of
        ask_run's is stopped first) and returns when the execution ends or pauses."""
        self.stop_engine()
        args = [f"{k}={v}" for k, v in params.items()]
        out = self.cli("run", action, *args, "--json")
        assert out.stdout.strip().startswith("{"), out.stderr[-3000:] + out.stdout[-3000:]
        return json.loads(out.stdout)

    def start(self, action: str, **params: Any) -> subprocess.Popen:
        """`st2 run` in the background, in its own process group (to be killed as a whole);
        it is the engine (a background engine of ask_run's is stopped first)."""
        self.stop_engine()
        args = [f"{k}={v}" for k, v in params.items()]
        return subprocess.Popen([sys.executable, "-m", "fleet_runtime.cli", "run", action, *args,
                                 "--json"], env=self.env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def profile(self, name: str, **overrides: Any) -> str:
        """A copy of a shipped profile with short windows and the given overrides, in this
        lab's own profiles directory (the pack config's profiles_dir); returns its name."""
        data = yaml.safe_load(open(os.path.join(ROOT, "profiles", f"{name}.yaml")))
        data.setdefault("canary", {}).update({"window_seconds": 6, "window_steps": 1,
                                              "pre_windows": 1, "soak_seconds": 1})
        data.setdefault("probe", {})["budget_ms"] = 300
        data.setdefault("redfish", {}).update({"graceful_timeout": 20, "poll": 0.3,
                                               "boot_timeout": 60})
        for key, value in overrides.items():
            if isinstance(value, dict):
                data.setdefault(key, {}).update(value)
            else:
                data[key] = value
        directory = os.path.join(self.tmp, "profiles")
        os.makedirs(directory, exist_ok=True)
        data["name"] = f"{name}-t{len(os.listdir(directory))}"
        with open(os.path.join(directory, data["name"] + ".yaml"), "w") as handle:
            yaml.safe_dump(data, handle)
        if self.config.get("profiles_dir") != directory:
            self.set_config(profiles_dir=directory)
        return data["name"]

    # ------------------------------------------------------------------ servers
    def host_names(self) -> List[str]:
        return [h["name"] for h in self.manifest["hosts"]]

    def bmc(self, host: str) -> Dict[str, Any]:
        entry = next(h for h in self.manifest["hosts"] if h["name"] == host)
        return requests.get(f"{entry['bmc_url']}/_sim/state", verify=self.manifest["ca"],
                            timeout=10).json()

    def fault(self, host: str, **faults: Any) -> None:
        entry = next(h for h in self.manifest["hosts"] if h["name"] == host)
        requests.post(f"{entry['bmc_url']}/_sim/faults", json=faults,
                      verify=self.manifest["ca"], timeout=10).raise_for_status()

    def sysroot(self, host: str) -> str:
        return os.path.join(self.state, "hosts", host)

    def read(self, host: str, rel: str) -> str:
        try:
            with open(os.path.join(self.sysroot(host), rel)) as handle:
                return handle.read().strip()
        except OSError:
            return ""

    def drained(self, host: str) -> bool:
        return os.path.exists(os.path.join(self.sysroot(host), "etc/fleet/maintenance"))

    def nodes(self, host: str) -> int:
        base = os.path.join(self.sysroot(host), "sys/devices/system/node")
        return len([n for n in os.listdir(base) if n.startswith("node")])

    def wait_idle(self, timeout: float = 30) -> None:
        """Until no BMC is mid-reboot (POST done is not OS up)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(not self.bmc(h)["rebooting"] for h in self.host_names()):
                return
            time.sleep(0.2)

    def kv_ids(self) -> List[str]:
        """Rollout ids in the datastore, oldest first (by plan time)."""
        items = self._key_items("fleet_rollout.")
        # the plan's head (plan.head; `plan`: one document, planned before the split)
        plans = [(i, suffix) for i in items for suffix in (".plan.head", ".plan")
                 if str(i.get("name", "")).endswith(suffix)]
        plans.sort(key=lambda p: json.loads(p[0]["value"]).get("created", 0))
        return list(dict.fromkeys(i["name"][len("fleet_rollout."):-len(suffix)]
                                  for i, suffix in plans))

    def plan(self, rollout_id: str) -> Any:
        """The whole plan document, assembled from its keys (store.RolloutState.plan)."""
        from fleet_rollout.errors import ConfigError
        from fleet_rollout.store import MemoryStore, RolloutState

        items = self._key_items(f"fleet_rollout.{rollout_id}.plan")
        store = MemoryStore()
        store.data = {i["name"]: i["value"] for i in items}
        try:
            return RolloutState(store, rollout_id).plan()
        except ConfigError:
            return None

    def keys(self, rollout_id: str) -> Dict[str, Any]:
        """Every datastore key of a rollout in one `key list` (one CLI process, not one a key),
        by the name after `fleet_rollout.<id>.`, values decoded: for the checks that read many
        keys of a rollout that has ended."""
        prefix = f"fleet_rollout.{rollout_id}."
        items = self._key_items(prefix, strict=True)
        return assembled(rollout_id, {i["name"]: i["value"] for i in items})

    def snapshot(self, rollout_id: str) -> Any:
        """The rollout's state as the datastore holds it now (a RolloutState on a copy)."""
        from fleet_rollout.store import MemoryStore, RolloutState

        items = self._key_items(f"fleet_rollout.{rollout_id}.", strict=True)
        store = MemoryStore()
        store.data = {i["name"]: i["value"] for i in items}
        return RolloutState(store, rollout_id)

    def audit(self, rollout_id: str) -> List[Dict[str, Any]]:
        """The rollout's audit trail, in time order (audit.py)."""
        from fleet_rollout.audit import Audit

        return Audit(self.snapshot(rollout_id).store, rollout_id).entries()

    def _key_items(self, prefix: str, strict: bool = False) -> List[Dict[str, Any]]:
        """`key list --prefix PREFIX --json`: the items ([] for none); strict: the command must
        succeed."""
        out = self.cli("key", "list", "--prefix", prefix, "--json")
        if strict:
            assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout) if out.stdout.strip() else []

    def kv(self, rollout_id: str, key: str) -> Any:
        if key == "plan":  # stored split (store.split_plan): assembled
            return self.plan(rollout_id)
        if key == "meta" or key.startswith("batch."):  # a key a field (store.RolloutState)
            state = self.snapshot(rollout_id)
            return state.meta() if key == "meta" else state.batch(int(key.split(".")[1]))
        out = self.cli("key", "get", f"fleet_rollout.{rollout_id}.{key}", "--json")
        if out.returncode != 0:
            return None
        doc = json.loads(out.stdout)
        return _decoded(doc.get("value") if isinstance(doc, dict) else doc)


def assembled(rollout_id: str, items: Dict[str, str]) -> Dict[str, Any]:
    """The rollout's documents kept a key a field (store.RolloutState: meta, batch.<n>,
    stale.<execution>) from datastore `items` (name -> value), by the name after
    `fleet_rollout.<id>.`; the field keys themselves are left out."""
    from fleet_rollout.store import MemoryStore, RolloutState

    store = MemoryStore()
    store.data = dict(items)
    state = RolloutState(store, rollout_id)
    prefix = f"fleet_rollout.{rollout_id}."
    out: Dict[str, Any] = {}
    for name, value in items.items():
        part = name[len(prefix):]
        if part.startswith("meta.") or ".state." in part:
            continue
        if part.startswith("stale."):
            execution = part.split(".")[1]
            out[f"stale.{execution}"] = state.stale(execution)
            continue
        out[part] = _decoded(value)
    out["meta"] = state.meta()
    batches = {name[len(prefix + "batch."):].split(".")[0] for name in items
               if name.startswith(prefix + "batch.")}
    for index in batches:
        if index.isdigit():
            out[f"batch.{index}"] = state.batch(int(index))
    return out


def _decoded(value: Any) -> Any:
    """A datastore value as the pack stored it (JSON text: decoded; other text as it is)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def output(execution: Dict[str, Any]) -> Dict[str, Any]:
    result = execution.get("result") or {}
    return result.get("output") or result.get("result") or {}


def error_text(execution: Dict[str, Any]) -> str:
    return json.dumps(execution.get("result"))
