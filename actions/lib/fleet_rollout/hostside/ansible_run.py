"""Run the pack's playbooks through ansible-runner and return structured per-host results.

No screen scraping: results come from ansible-runner's events. Each playbook ends with a task
named `fleet_result` that sets a fact of that name; its value is the host's result. A failed task
or an unreachable host is a per-host error (task name and message), never a crash.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from fleet_rollout.errors import ConfigError

PACK_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))
PLAYBOOK_DIR = os.path.join(PACK_DIR, "playbooks")
HOST_SCRIPT = os.path.join(PLAYBOOK_DIR, "files", "fleet_host.py")


@dataclass
class HostResult:
    host: str
    ok: bool = False
    changed: bool = False
    unreachable: bool = False
    failed_task: Optional[str] = None
    error: Optional[str] = None
    result: Any = None
    tasks: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _error_text(res: Dict[str, Any]) -> str:
    stdout = res.get("stdout")
    if isinstance(stdout, str) and stdout.strip().startswith("{"):
        try:
            parsed = json.loads(stdout)
            if isinstance(parsed, dict) and parsed.get("error"):
                return str(parsed["error"])
        except ValueError:
            pass
    for key in ("msg", "stderr", "module_stderr", "stdout"):
        value = res.get(key)
        if value:
            return str(value).strip()[-500:]
    return "failed (no message)"


def _ansible_bin_dir() -> str:
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "ansible-playbook")):
        return here
    found = shutil.which("ansible-playbook")
    if not found:
        raise ConfigError("ansible-playbook not found: install ansible-core in the pack venv")
    return os.path.dirname(found)


def run_playbook(playbook: str, inventory: str, hosts: Iterable[str],
                 extravars: Optional[Dict[str, Any]] = None, forks: int = 20,
                 private_key: Optional[str] = None, timeout: Optional[int] = None,
                 verbose: bool = False) -> Dict[str, HostResult]:
    """Run playbooks/<playbook>.yml on `hosts` (names in `inventory`); a result per host."""
    import ansible_runner  # imported here: the pack's other actions need not load it

    names = sorted(set(hosts))
    if not names:
        return {}
    path = playbook if os.path.isabs(playbook) else os.path.join(PLAYBOOK_DIR, playbook + ".yml")
    if not os.path.exists(path):
        raise ConfigError(f"playbook {path} not found")
    if not os.path.exists(inventory):
        raise ConfigError(f"inventory {inventory} not found")
    extra = {"fleet_host_script": HOST_SCRIPT}
    extra.update(extravars or {})
    env = {
        "PATH": _ansible_bin_dir() + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        # modules go through the SSH session's stdin: one round trip per task instead of
        # mkdir/put/chmod/run/rm (needs no `requiretty` for sudo, the default on current distros)
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s "
                            "-o UserKnownHostsFile=/dev/null -o ConnectTimeout=30",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    }
    cmdline = f"--private-key {private_key}" if private_key else None
    results = {h: HostResult(h) for h in names}
    with tempfile.TemporaryDirectory(prefix="fleet-ansible-") as data_dir:
        runner = ansible_runner.run(
            private_data_dir=data_dir, playbook=path, inventory=os.path.abspath(inventory),
            limit=",".join(names), extravars=extra, forks=max(1, min(forks, len(names))),
            envvars=env, cmdline=cmdline, quiet=not verbose, timeout=timeout,
            suppress_env_files=True)
        for event in runner.events:
            data = event.get("event_data") or {}
            host = data.get("host")
            if host not in results:
                continue
            kind = event.get("event")
            res = data.get("res") or {}
            entry = results[host]
            task = str(data.get("task") or "")
            if kind == "runner_on_ok":
                entry.tasks.append(task)
                entry.changed = entry.changed or bool(res.get("changed"))
                if task == "fleet_result":
                    entry.result = (res.get("ansible_facts") or {}).get("fleet_result")
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                entry.failed_task = entry.failed_task or task
                entry.error = entry.error or _error_text(res)
            elif kind == "runner_on_unreachable":
                entry.unreachable = True
                entry.failed_task = entry.failed_task or task
                entry.error = entry.error or f"unreachable: {_error_text(res)}"
        status = runner.status
    for entry in results.values():
        if entry.error is None and not entry.tasks:
            entry.error = (f"no result: host not in inventory {inventory}" if status ==
                           "successful" else f"ansible run {status} before reaching this host")
        entry.ok = entry.error is None and entry.result is not None
    return results
