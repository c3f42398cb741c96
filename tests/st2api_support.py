"""The runtime's st2 API started for a test, and the real `st2` CLI (PyPI st2client) run
against it.

Each test gets its own runtime home under tmp_path, users file (0600), free port, and process
group; the API and the engine it starts are stopped by PID. The CLI runs with HOME and its
config file in tmp_path, so nothing of the user's ~/.st2 is read or written.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import requests
from locations import FIXTURES, ROOT

REPO = ROOT
ST2 = REPO / ".venv-st2client" / "bin" / "st2"
RUNTIME_PACK = FIXTURES / "runtime_pack"
ST2API_PACK = FIXTURES / "st2api_pack"

PASSWORDS = {"sre-alice": "alice-pw-1", "sre-bob": "bob-pw-2", "st2admin": "admin-pw-3",
             "chatops_bot": "bot-pw-4", "sre-carol": "carol-pw-5", "sre-viewer": "viewer-pw-6",
             "sre-operator": "operator-pw-7"}
# The tests' everyday users may run every action of the packs a test loads (a role the harness
# writes); sre-carol has no grant at all; sre-viewer and sre-operator have the pack's roles.
TESTS_ROLE = "tests_runner"
DEFAULT_ROLES = {"sre-alice": [TESTS_ROLE], "sre-bob": [TESTS_ROLE],
                 "chatops_bot": [TESTS_ROLE], "sre-carol": [],
                 "sre-viewer": ["fleet_rollout_viewer"],
                 "sre-operator": ["fleet_rollout_operator", "fleet_rollout_approver"]}


def st2_cli() -> Path:
    if not ST2.exists():
        raise AssertionError(f"{ST2} is missing: `make install` creates it"
                             " (requirements-st2client.txt)")
    return ST2


class St2Api:
    def __init__(self, tmp: Path, packs: List[Path], default_pack: bool = False,
                 admins: Optional[List[str]] = None, home_settings: Optional[Dict] = None,
                 roles: Optional[Dict[str, List[str]]] = None) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        if home_settings:
            import yaml

            (self.home / "config.yaml").write_text(yaml.safe_dump(home_settings))
        self.packs = packs
        self.default_pack = default_pack
        self.admins = admins if admins is not None else ["st2admin"]
        self.proc: Optional[subprocess.Popen] = None
        self.state: Dict[str, Any] = {}
        self.log = tmp / "st2api.log"
        self._tokens: Dict[str, str] = {}
        self._write_tests_role()
        self.fleet(["api", "roles", str(REPO / "rbac")])
        assigned = dict(DEFAULT_ROLES, **(roles or {}))
        for name, password in PASSWORDS.items():
            args = ["api", "user", name]
            for role in assigned.get(name, []):
                args += ["--role", role]
            self.fleet(args, stdin=password + "\n")

    def _write_tests_role(self) -> None:
        """Every action of the packs this API loads (and st2's core and chatops packs)."""
        import yaml

        names = {"core", "chatops", "fleet_rollout"}
        for pack in self.packs:
            names.add(str(yaml.safe_load((pack / "pack.yaml").read_text())["ref"]))
        grants: List[Dict[str, Any]] = [
            {"resource_uid": f"pack:{name}", "permission_types": ["action_all",
                                                                   "action_alias_view"]}
            for name in sorted(names)]
        grants.append({"permission_types": ["action_list", "execution_list", "inquiry_list",
                                            "action_alias_list", "action_alias_match",
                                            "action_alias_help",
                                            "stream_view", "rule_list", "runner_type_list",
                                            "api_key_create", "api_key_list"]})
        grants.append({"resource_uid": "inquiry:tests",
                       "permission_types": ["inquiry_view", "inquiry_respond"]})
        grants.append({"resource_uid": "key_value_pair:st2kv.system:site",
                       "permission_types": ["key_value_pair_view"]})
        roles_dir = self.home / "rbac" / "roles"
        roles_dir.mkdir(parents=True, exist_ok=True)
        (roles_dir / f"{TESTS_ROLE}.yaml").write_text(yaml.safe_dump(
            {"name": TESTS_ROLE, "description": "the tests' users", "enabled": True,
             "permission_grants": grants}))

    # ------------------------------------------------------------------ processes
    def common(self) -> List[str]:
        args = ["--home", str(self.home)]
        for pack in self.packs:
            args += ["--pack", str(pack)]
        if not self.default_pack:
            args.append("--no-default-pack")
        return args

    def fleet(self, args: List[str], stdin: Optional[str] = None, check: bool = True,
              timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "fleet_runtime.cli"] + args + self.common()
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              timeout=timeout, cwd=str(REPO))
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {proc.stdout}\n{proc.stderr}")
        return proc

    def start(self) -> St2Api:
        if (self.home / "configs" / "fleet_rollout.yaml").exists():
            # the pack keeps rollout state as the lab's state account, as `lab up` sets it
            from fleet_lab.chatops.stack import create_state_account

            create_state_account(str(self.home))
        cmd = [sys.executable, "-m", "fleet_runtime.cli", "api", "serve", "--port", "0"]
        for admin in self.admins:
            cmd += ["--admin", admin]
        cmd += self.common()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=str(REPO), start_new_session=True)
        state_path = self.home / "st2api.json"
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"api serve exited: {self.log.read_text()}")
            if state_path.exists():
                state = json.loads(state_path.read_text())
                if state.get("pid") == self.proc.pid:
                    self.state = state
                    return self
            time.sleep(0.1)
        raise AssertionError(f"api serve did not start: {self.log.read_text()}")

    def engine_pid(self) -> Optional[int]:
        try:
            text = (self.home / "runtime.lock").read_text().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self.proc is None:
            return
        engine = self.engine_pid()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if engine:  # the engine was the API's child (same process group): gone with it
            for _ in range(100):
                if not _alive(engine):
                    break
                time.sleep(0.1)
        self.proc = None

    # ------------------------------------------------------------------ clients
    @property
    def base(self) -> str:
        return str(self.state["ST2_BASE_URL"])

    def token(self, user: str) -> str:
        if user in self._tokens:
            return self._tokens[user]
        r = requests.post(self.base + "/auth/v1/tokens", auth=(user, PASSWORDS[user]),
                          timeout=10)
        assert r.status_code == 201, r.text
        self._tokens[user] = str(r.json()["token"])
        return self._tokens[user]

    def http(self, method: str, path: str, user: str = "sre-alice", **kw: Any
             ) -> requests.Response:
        headers = kw.pop("headers", {})
        headers.setdefault("X-Auth-Token", self.token(user))
        return requests.request(method, self.base + path, headers=headers, timeout=30, **kw)

    def cli_env(self, user: str) -> Dict[str, str]:
        home = self.tmp / f"cli-{user}"
        home.mkdir(exist_ok=True)
        config = home / "st2.conf"
        config.write_text(f"[credentials]\nusername = {user}\npassword = {PASSWORDS[user]}\n"
                          "[cli]\ncache_token = False\n")
        os.chmod(config, 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ST2_")}
        env.update({"HOME": str(home), "ST2_CONFIG_FILE": str(config),
                    "ST2_AUTH_URL": self.state["ST2_AUTH_URL"],
                    "ST2_API_URL": self.state["ST2_API_URL"],
                    "ST2_STREAM_URL": self.state["ST2_STREAM_URL"],
                    "ST2_BASE_URL": self.state["ST2_BASE_URL"],
                    "NO_COLOR": "1",
                    # tables as wide as their content: no wrapped names, whatever the tty
                    "COLUMNS": "240"})
        return env

    def st2(self, args: List[str], user: str = "sre-alice", check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(st2_cli())] + args, env=self.cli_env(user),
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"st2 {' '.join(args)} (as {user}) exited"
                                 f" {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def st2_json(self, args: List[str], user: str = "sre-alice") -> Any:
        out = self.st2(args + ["-j"], user=user).stdout
        start = min(i for i in (out.find("{"), out.find("[")) if i >= 0)
        value, _ = json.JSONDecoder().raw_decode(out[start:])  # a workflow: then its tasks
        return value

    def run_async(self, args: List[str], user: str = "sre-alice") -> str:
        """`st2 run ... -a`: the execution id the CLI prints."""
        out = self.st2(["run"] + args + ["-a"], user=user).stdout
        return out.split("st2 execution get")[1].split()[0]

    def wait_status(self, ex_id: str, statuses: tuple, timeout: float = 60) -> Dict[str, Any]:
        deadline = time.time() + timeout
        record: Dict[str, Any] = {}
        while time.time() < deadline:
            record = self.http("GET", f"/api/v1/executions/{ex_id}").json()
            if record.get("status") in statuses:
                return record
            time.sleep(0.3)
        raise AssertionError(f"execution {ex_id} is {record.get('status')}, not {statuses}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False
