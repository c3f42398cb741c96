"""Run the pack's playbooks with ansible-playbook and return structured per-host results.

No screen scraping: results come from the events of the pack's callback plugin
(playbook_process). Each playbook has a task named
`fleet_result: <what it does>` that prints the host's result as one JSON document (or sets a
fact named fleet_result); drain and undrain through a configured command have `fleet_command:
...` instead. Errors name the task by what it does. One task per host
where possible: every task costs the controller a forked worker per host. A failed task or an
unreachable host is a per-host error (task name and message), never a crash.

Inventory: each run gets an inventory of only its hosts, their variables resolved once per
fleet inventory by ansible-core and cached (fleet_rollout.hostvars): a run's cost does not grow
with the fleet. The values are data: a string with a Jinja marker is written `!unsafe`.

Safety: host names must be plain names (never an Ansible pattern: `web*`, `all`, `a,b` would
widen the run), a requested name that is a group of the fleet inventory is refused, `--limit`
names exactly the run's hosts and a run that still reports a host outside the requested set is
an error;
extravars never carry Jinja markers (Ansible would render them); SSH host keys are verified
(StrictHostKeyChecking=yes against the given known_hosts, else the runner's default one).
Connection settings come from the pack config (fleet_rollout.connection): a host whose inventory
variables set one is refused, and the run's inventory carries the pack's settings.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from fleet_rollout import host_script, hostvars, timeouts
from fleet_rollout.connection import Connection, refusal_text
from fleet_rollout.errors import ConfigError
from fleet_rollout.hostside import playbook_process
from fleet_rollout.inventory import check_host_name
from fleet_rollout.paths import PLAYBOOK_DIR

HOST_SCRIPT = host_script.PATH
RESERVED_HOST_NAMES = ("all", "ungrouped")
JINJA_MARKERS = hostvars.JINJA_MARKERS


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
    texts = [str(res[key]).strip() for key in ("msg", "stderr", "module_stderr", "stdout")
             if res.get(key) and str(res[key]).strip()]
    if not texts:
        return "failed (no message)"
    if texts[0] == "non-zero return code" and len(texts) > 1:  # a script: what it said
        code = f" {res['rc']}" if res.get("rc") is not None else ""
        return f"{texts[0]}{code}: {texts[1][-500:]}"
    return texts[0][-500:]


def _ansible_bin_dir() -> str:
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "ansible-playbook")):
        return here
    found = shutil.which("ansible-playbook")
    if not found:
        raise ConfigError("ansible-playbook not found: install ansible-core in the pack venv")
    return os.path.dirname(found)


def check_host_names(hosts: Iterable[str]) -> List[str]:
    """The requested names, sorted; ConfigError for anything Ansible would read as a pattern."""
    names = sorted(set(hosts))
    for name in names:
        check_host_name(name, "ansible --limit")
        if name in RESERVED_HOST_NAMES:
            raise ConfigError(f"host name {name!r}: reserved by Ansible (all, ungrouped): a "
                              "pattern would widen the run")
    return names


def check_extravars(value: Any, where: str = "extravars") -> None:
    """No Jinja markers anywhere: Ansible renders extravars as templates when it reads them."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_extravars(str(key), f"{where} key")
            check_extravars(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_extravars(item, f"{where}[{index}]")
    elif isinstance(value, str) and any(marker in value for marker in JINJA_MARKERS):
        raise ConfigError(f"{where}: contains a Jinja marker ({{{{, {{% or {{#}}; refused")


def ssh_args(known_hosts: Optional[str], options: Iterable[str] = ()) -> str:
    """OpenSSH options for every connection: host keys verified, never recorded blindly; then
    the pack config's own `options` (ssh keeps the first value of an option: these never
    override the pack's)."""
    args = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s",
            "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=30",
            # a host that stops answering mid-task (frozen, cut off) is dropped within a minute:
            # in a run of many hosts (a counter window's) it must not hold the others' results
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    if known_hosts:
        args += ["-o", f"UserKnownHostsFile={known_hosts}"]
    for option in options:
        args += ["-o", option]
    return " ".join(shlex.quote(a) for a in args)


def control_path_dir(known_hosts: Optional[str]) -> str:
    """One ControlMaster directory per known_hosts file: a master opened under one trust
    setting is never reused under another."""
    digest = hashlib.sha256((known_hosts or "~/.ssh/known_hosts").encode()).hexdigest()[:12]
    return os.path.join(os.path.expanduser("~"), ".ansible", "cp", f"kh-{digest}")


# what Ansible and the commands it runs on this machine get of the action's environment: the
# basics of a process, locale, proxies, the ssh agent, Ansible's and the pack's own settings
ENV_KEPT = frozenset(("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                      "TMPDIR", "TERM", "SSH_AUTH_SOCK", "VIRTUAL_ENV", "PYTHONPATH",
                      "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                      "NO_PROXY"))
ENV_KEPT_PREFIXES = ("LC_", "ANSIBLE_", "FLEET_ROLLOUT_")


def inherited_env() -> Dict[str, str]:
    """The part of this process's environment Ansible gets: ENV_KEPT and ENV_KEPT_PREFIXES
    only. StackStorm's ST2_* variables (the API URL, the token acting as the action's user)
    and whatever else the action runner holds (cloud credentials, ...) stay out of Ansible and
    of anything it runs on this machine (a drain command)."""
    return {k: v for k, v in os.environ.items()
            if k in ENV_KEPT or k.startswith(ENV_KEPT_PREFIXES)}


def runner_env(known_hosts: Optional[str],
               connection: Optional[Connection] = None) -> Dict[str, str]:
    connection = connection or Connection()
    return {
        "PATH": _ansible_bin_dir() + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        # modules go through the SSH session's stdin: one round trip per task instead of
        # mkdir/put/chmod/run/rm (needs no `requiretty` for sudo, the default on current distros)
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": ssh_args(known_hosts, connection.ssh_options),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": control_path_dir(known_hosts),
        # a run's inventory is always the YAML file of its hosts (hostvars.write_run_inventory):
        # only the yaml plugin reads it; with Ansible's default list the auto plugin parses
        # the file first to look for a `plugin:` key (0.12 CPU-s a run of 20 hosts)
        "ANSIBLE_INVENTORY_ENABLED": "yaml",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        **connection.env(),
    }


def _collect(events: Iterable[Dict[str, Any]], results: Dict[str, HostResult]) -> List[str]:
    """Fill the per-host results from the runner's events; the hosts outside `results`."""
    strangers: List[str] = []
    for event in events:
        data = event.get("event_data") or {}
        host = data.get("host")
        if host is None:
            continue
        if host not in results:
            strangers.append(str(host))
            continue
        _record(results[host], str(event.get("event")), data)
    return sorted(set(strangers))


def _task_role(name: str) -> Tuple[str, str]:
    """A task name `fleet_result: Drain with the maintenance flag` -> ("fleet_result", "Drain
    with the maintenance flag"): the role says what the task's output is, the rest is what a
    person reads (in errors: failed_task). Other names: ("", name)."""
    for role in ("fleet_result", "fleet_command"):
        if name == role:
            return role, role
        if name.startswith(role + ": "):
            return role, name[len(role) + 2:]
    return "", name


def _record(entry: HostResult, kind: str, data: Dict[str, Any]) -> None:
    res = data.get("res") or {}
    role, task = _task_role(str(data.get("task") or ""))
    if kind == "runner_on_ok":
        entry.tasks.append(task)
        entry.changed = entry.changed or bool(res.get("changed"))
        if role == "fleet_result":
            _take_result(entry, res, task)
        elif role == "fleet_command":  # drain/undrain through the configured command
            entry.result = {"method": "command", "rc": res.get("rc")}
    elif kind == "runner_on_failed" and not data.get("ignore_errors"):
        entry.failed_task = entry.failed_task or task
        entry.error = entry.error or _error_text(res)
        if role == "fleet_result" and entry.result is None:
            # what the host said it did before it failed (a drain that timed out: the flag
            # it set); the entry stays failed
            entry.result = _stdout_doc(res)
    elif kind == "runner_on_unreachable":
        entry.unreachable = True
        entry.failed_task = entry.failed_task or task
        entry.error = entry.error or f"unreachable: {_error_text(res)}"


def _take_result(entry: HostResult, res: Dict[str, Any], task: str) -> None:
    """The host's result: the JSON document the task named fleet_result printed (the pack's
    playbooks: one task per host, no set_fact), or a fact of that name (a set_fact task)."""
    facts = res.get("ansible_facts") or {}
    if "fleet_result" in facts:
        entry.result = facts["fleet_result"]
        return
    doc = _stdout_doc(res)
    if doc is not None:
        entry.result = doc
    else:
        stdout = str(res.get("stdout") or "")
        entry.failed_task = entry.failed_task or task
        entry.error = entry.error or (f"task {task!r} printed no JSON document: "
                                      f"{stdout.strip()[:200]!r}")


def _stdout_doc(res: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The JSON document a task printed, None when its output is not one."""
    try:
        doc = json.loads(str(res.get("stdout") or ""))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def run_hosts(inventory: str, names: List[str], results: Dict[str, HostResult],
              cache_dir: Optional[str] = None,
              connection: Optional[Connection] = None) -> List[hostvars.HostEntry]:
    """The cached entries of the hosts to run (names already checked). A name that is a group
    of the inventory is refused (as a --limit it would select the group's hosts); a host
    missing from the inventory, with a variable that cannot be carried as data or with a
    connection variable the pack config decides (fleet_rollout.connection), gets its error in
    `results` and is left out of the run."""
    connection = connection or Connection()
    found = hostvars.lookup(inventory, names, cache_dir)
    if found.groups:
        members = sorted({m for _count, sample in found.groups.values() for m in sample})
        extra = sum(count for count, _sample in found.groups.values()) - len(members)
        more = f" and {extra} more" if extra > 0 else ""
        raise ConfigError(f"host name(s) {', '.join(sorted(found.groups))}: group(s) of "
                          f"inventory {inventory}; as --limit they would run on host(s) outside "
                          f"the requested set: {', '.join(members[:10])}{more}. Rename the "
                          "host or the group")
    entries: List[hostvars.HostEntry] = []
    for name in names:
        entry = found.hosts.get(name)
        if entry is None:
            results[name].error = f"no result: host not in inventory {inventory}"
        elif entry.errors:
            var, why = sorted(entry.errors.items())[0]
            results[name].error = (f"inventory {inventory}: host {name}: variable {var} cannot "
                                   f"be resolved to plain data ({why}); no Jinja template that "
                                   "needs run-time variables, no vault-encrypted value")
        elif connection.refusal(entry.vars):
            var, why = connection.refusal(entry.vars) or ("", "")
            results[name].error = refusal_text(inventory, name, var, why)
        else:
            entries.append(hostvars.HostEntry(entry.name, connection.run_vars(entry.vars),
                                              entry.groups))
    return entries


@dataclass
class RunSpec:
    """Everything of an Ansible run but its hosts (checked by prepare)."""
    playbook: str  # absolute path
    inventory: str
    extravars: Dict[str, Any]
    forks: int = 20
    private_key: Optional[str] = None
    timeout: Optional[int] = None
    verbose: bool = False
    known_hosts: Optional[str] = None
    cache_dir: Optional[str] = None
    connection: Connection = field(default_factory=Connection)  # the pack config's


# playbooks whose hosts may drain through a command (fleet_drain_method: command): the command's
# task is a playbook of its own, run after the flag's in the same ansible-playbook only when one
# of the run's hosts asks for it; a skipped task would cost every other host a forked worker
COMMAND_PLAYBOOKS = {"drain.yml": "drain_command.yml", "undrain.yml": "undrain_command.yml"}


def playbooks_for(playbook: str, entries: Iterable[hostvars.HostEntry]) -> List[str]:
    """The playbook files a run of `playbook` on these hosts (their resolved variables) runs."""
    companion = COMMAND_PLAYBOOKS.get(os.path.basename(playbook))
    if companion and any(e.vars.get("fleet_drain_method") == "command" for e in entries):
        return [playbook, os.path.join(os.path.dirname(playbook), companion)]
    return [playbook]


def prepare(playbook: str, inventory: str, extravars: Optional[Dict[str, Any]] = None,
            forks: int = 20, private_key: Optional[str] = None, timeout: Optional[int] = None,
            verbose: bool = False, known_hosts: Optional[str] = None,
            cache_dir: Optional[str] = None,
            connection: Optional[Connection] = None) -> RunSpec:
    """The checked spec of a run of playbooks/<playbook>.yml (ConfigError for a missing
    playbook or inventory, a bad known_hosts path, Jinja in the extravars)."""
    path = playbook if os.path.isabs(playbook) else os.path.join(PLAYBOOK_DIR, playbook + ".yml")
    if not os.path.exists(path):
        raise ConfigError(f"playbook {path} not found")
    if not os.path.exists(inventory):
        raise ConfigError(f"inventory {inventory} not found")
    if known_hosts and (not os.path.isfile(known_hosts) or re.search(r"[\s\"']", known_hosts)):
        raise ConfigError(f"ssh_known_hosts file {known_hosts!r} not found (or its path has "
                          "spaces or quotes, which ssh would split)")
    extra = {"fleet_host_script": HOST_SCRIPT}
    extra.update(extravars or {})
    check_extravars(extra)
    return RunSpec(path, inventory, extra, forks, private_key, timeout, verbose, known_hosts,
                   cache_dir, connection or Connection())


def run_playbook(playbook: str, inventory: str, hosts: Iterable[str],
                 extravars: Optional[Dict[str, Any]] = None, forks: int = 20,
                 private_key: Optional[str] = None, timeout: Optional[int] = None,
                 verbose: bool = False, known_hosts: Optional[str] = None,
                 cache_dir: Optional[str] = None,
                 connection: Optional[Connection] = None) -> Dict[str, HostResult]:
    """Run playbooks/<playbook>.yml on `hosts` (names in `inventory`); a result per host.

    `known_hosts`: the SSH known_hosts file host keys are checked against (None: the runner's
    ~/.ssh/known_hosts); an unknown or changed key makes the host unreachable.
    `cache_dir`: where resolved host variables are cached (None: hostvars.default_cache_dir).
    `connection`: the pack config's connection settings (None: the defaults)."""
    names = check_host_names(hosts)
    if not names:
        return {}
    spec = prepare(playbook, inventory, extravars, forks, private_key, timeout, verbose,
                   known_hosts, cache_dir, connection)
    return run_spec(spec, names)


def run_spec(spec: RunSpec, names: List[str]) -> Dict[str, HostResult]:
    """One ansible-playbook run of `spec` for checked host names: a result per host (a host
    left out of the run, or that the run did not reach, gets its error). ConfigError when the
    run is refused: a name that is a group of the inventory, or a run that reached hosts
    outside the requested set."""
    results = {name: HostResult(name) for name in names}
    entries = run_hosts(spec.inventory, names, results, spec.cache_dir, spec.connection)
    status = "successful"  # nothing to run: every host is already an error
    said = ""  # what ansible-playbook said on stderr, when the run did not succeed
    strangers: List[str] = []
    if entries:
        run_names = sorted(entry.name for entry in entries)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        with tempfile.TemporaryDirectory(prefix="fleet-ansible-") as data_dir:
            run_inventory = hostvars.write_run_inventory(
                os.path.join(data_dir, "fleet-run-inventory.yml"), entries)
            extravars_file = os.path.join(data_dir, "extravars.json")
            with open(extravars_file, "w") as handle:
                json.dump(spec.extravars, handle)
            env = inherited_env()
            env.update(runner_env(spec.known_hosts, spec.connection))
            env.update(playbook_process.callback_env(os.path.join(data_dir, "events.jsonl"),
                                                     spec.verbose))
            argv = playbook_process.command(
                os.path.join(_ansible_bin_dir(), "ansible-playbook"),
                playbooks_for(spec.playbook, entries), run_inventory, run_names,
                extravars_file, min(spec.forks, len(run_names)), spec.private_key)
            ended = playbook_process.run(argv, env, data_dir,
                                         spec.timeout or run_limit(spec, len(run_names)),
                                         spec.verbose)
            strangers = _collect(ended.events, {name: results[name] for name in run_names})
            status = ended.status
            said = _said(ended.stderr) if ended.status != "successful" else ""
        _log_run(spec, run_names, status, before, started)
    if strangers:
        raise ConfigError(
            f"playbook {os.path.basename(spec.playbook)} ran on host(s) outside the "
            f"requested set: {', '.join(strangers[:10])} (requested: "
            f"{', '.join(sorted(results)[:10])}); check inventory {spec.inventory} for "
            "groups named like hosts")
    for entry in results.values():
        if entry.error is None and not entry.tasks:
            entry.error = (f"no result: host not in inventory {spec.inventory}" if status ==
                           "successful" else f"ansible run {status} before reaching this "
                           f"host{said}")
        elif entry.error is None and entry.result is None and status != "successful":
            entry.error = (f"ansible run {status} before this host's result (after task "
                           f"{entry.tasks[-1]!r}){said}")
        entry.ok = entry.error is None and entry.result is not None
    return results


def run_limit(spec: RunSpec, hosts: int) -> int:
    """Seconds a run may take when its caller set no timeout: what the host steps' own
    timeouts allow one run (fleet_rollout.timeouts.ANSIBLE, plus a drain's or probe's own wait,
    a counter window's wait for its samples, or the wait for an OS to start), for each wave of
    `forks` hosts. A run that hangs on a host (a command that never returns) is ended by then:
    its hosts without a result get an error, the batch is not held."""
    extra = spec.extravars
    wait = float(extra.get("fleet_drain_timeout") or 0) + \
        4 * float(extra.get("fleet_probe_budget_ms") or 0) / 1000.0 + \
        float(extra.get("fleet_window_wait") or 0) + float(extra.get("fleet_boot_wait") or 0)
    waves = -(-max(1, hosts) // max(1, min(spec.forks, hosts or 1)))
    return int((timeouts.ANSIBLE + wait) * waves)


def _said(stderr: str) -> str:
    """': <what ansible-playbook said>' for the error of a host a failed run did not reach: its
    first error line ("[ERROR]: ..."; "ERROR! ..." before ansible-core 2.19), else the last line
    of its stderr; '' when it said nothing."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    said = (errors or lines[-1:] or [""])[0]
    return f": {said[:300]}" if said else ""


def _log_run(spec: RunSpec, hosts: List[str], status: str, before: Any,
             started: float) -> None:
    """A line per run in $FLEET_ROLLOUT_ANSIBLE_LOG, when set (benchmarks, debugging):
    playbook, hosts, status, CPU-seconds of the ansible-playbook process tree, start and end."""
    path = os.environ.get("FLEET_ROLLOUT_ANSIBLE_LOG")
    if not path:
        return
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = json.dumps({"playbook": os.path.basename(spec.playbook), "hosts": hosts,
                       "status": status, "cpu": round(cpu, 3), "pid": os.getpid(),
                       "started": round(started, 3), "at": round(time.time(), 3)})
    try:
        with open(path, "a") as handle:
            handle.write(line + "\n")
    except OSError:
        pass
