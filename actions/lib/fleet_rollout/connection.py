"""How Ansible reaches the hosts: decided by the pack config, never by the inventory.

An inventory says where a host is (`ansible_host`, `ansible_port`) and as whom to log in
(`ansible_user`); every other Ansible connection or execution variable in it (ssh arguments,
host key checking, the Python interpreter, the shell, become, the connection plugin, ...) could
run a command on the action runner (a ProxyCommand), turn host key checks off or run the host
script as something else, so a host carrying one is refused at plan time and again before each
run, naming host and variable. The pack writes the connection settings of its config into each
run's inventory instead.

The same holds for what runs on the action runner for a host that drains through a load
balancer (`fleet_drain_method: command`): the commands are the pack config's `drain_command` and
`undrain_command` (argument lists, `{host}` standing for the host's name); an inventory's own
`fleet_drain_command` or `fleet_undrain_command` is refused.

A lab host (`fleet_sysroot`: a sim server's directory tree, which the host script works on
instead of /) is taken only when the pack config allows lab hosts (`allow_local_hosts`, labs
only); without `ansible_host` it runs over a local connection on the action runner.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from fleet_rollout.errors import ConfigError

# Ansible variables an inventory may set: where the host is and the login name.
INVENTORY_ALLOWED = frozenset(("ansible_host", "ansible_port", "ansible_user"))
SYSROOT_VAR = "fleet_sysroot"
# what the pack config decides beyond the ansible_* variables
PACK_DECIDES = {"fleet_drain_command": "drain_command", "fleet_undrain_command": "undrain_command"}
DRAIN_METHODS = ("flag", "command")
HOST_PLACEHOLDER = "{host}"
BECOME_METHODS = ("sudo", "su", "doas")
INTERPRETER_AUTO = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_PATH = re.compile(r"^/[A-Za-z0-9._+/-]{1,255}\Z")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]{0,31}\Z")
# a host name or address ssh takes as its destination (never something it reads as an option)
_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:%-]{0,252}\Z")
# ssh options the pack itself sets for host key verification: never from ssh_options
_SSH_OPTION = re.compile(r"^([A-Za-z]+)=([^\s'\"\\]{1,512})\Z")
SSH_OPTIONS_REFUSED = frozenset(o.lower() for o in (
    "StrictHostKeyChecking", "UserKnownHostsFile", "GlobalKnownHostsFile", "KnownHostsCommand",
    "VerifyHostKeyDNS", "UpdateHostKeys", "CheckHostIP", "HostKeyAlias", "LocalCommand",
    "PermitLocalCommand", "ControlPath", "ControlMaster", "ControlPersist"))


@dataclass(frozen=True)
class Connection:
    """The pack config's connection settings for every Ansible run."""
    user: str = ""  # ssh login name ("": the action runner's user); an inventory's wins
    python_interpreter: str = "auto_silent"
    become: bool = False
    become_method: str = "sudo"
    ssh_retries: int = 0
    ssh_options: Tuple[str, ...] = ()  # extra `-o Key=Value` (e.g. ProxyJump=bastion)
    allow_local: bool = False
    local_python: str = ""  # interpreter of lab hosts run locally ("": local_python())
    # argv run on the action runner to drain / undrain a host of fleet_drain_method command
    drain_command: Tuple[str, ...] = ()
    undrain_command: Tuple[str, ...] = ()

    def env(self) -> Dict[str, str]:
        """Ansible settings for the whole run (inventory variables are filtered: nothing in
        the run's inventory overrides them)."""
        env = {"ANSIBLE_PYTHON_INTERPRETER": self.python_interpreter,
               "ANSIBLE_BECOME": "True" if self.become else "False",
               "ANSIBLE_BECOME_METHOD": self.become_method,
               "ANSIBLE_SSH_RETRIES": str(self.ssh_retries)}
        if self.user:
            env["ANSIBLE_REMOTE_USER"] = self.user
        return env

    def run_vars(self, host_vars: Mapping[str, Any]) -> Dict[str, Any]:
        """A host's variables for a run's inventory: the inventory's data without connection
        variables (checked before: see refusal), plus the connection the pack decides."""
        out = {k: v for k, v in host_vars.items()
               if not k.startswith("ansible_") or k in INVENTORY_ALLOWED}
        if SYSROOT_VAR in host_vars and "ansible_host" not in host_vars:
            out.update({"ansible_connection": "local",
                        "ansible_python_interpreter": self.local_python or local_python()})
        else:
            out["ansible_connection"] = "ssh"
            if self.python_interpreter not in INTERPRETER_AUTO:
                # the playbooks start the host script with this interpreter too
                out["ansible_python_interpreter"] = self.python_interpreter
        return out

    def refusal(self, host_vars: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
        """(variable, why) when this host's inventory variables are refused, else None."""
        for key in sorted(host_vars):
            if key.startswith("ansible_") and key not in INVENTORY_ALLOWED:
                return key, ("a connection setting; the pack config decides those (ssh "
                             "options, host key checking, interpreter, become), an inventory "
                             "may set only " + ", ".join(sorted(INVENTORY_ALLOWED)))
        for key, setting in PACK_DECIDES.items():
            if key in host_vars:
                return key, (f"a command run on the action runner; the pack config decides it "
                             f"({setting}), not the inventory")
        method = host_vars.get("fleet_drain_method", "flag")
        if method not in DRAIN_METHODS:
            return "fleet_drain_method", f"must be one of {', '.join(DRAIN_METHODS)}"
        if method == "command" and not (self.drain_command and self.undrain_command):
            return "fleet_drain_method", ("command, but the pack config sets no drain_command "
                                          "and undrain_command")
        user = host_vars.get("ansible_user")
        if user is not None and not (isinstance(user, str) and _USER.match(user)):
            return "ansible_user", "not a plain user name"
        address = host_vars.get("ansible_host")
        if address is not None and not (isinstance(address, str) and _HOST.match(address)):
            return "ansible_host", "not a plain host name or address"
        port = host_vars.get("ansible_port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, (int, str)) or
                                 not str(port).isdigit() or not 1 <= int(port) <= 65535):
            return "ansible_port", "not a port number (1-65535)"
        if SYSROOT_VAR in host_vars:
            if not self.allow_local:
                return SYSROOT_VAR, ("a lab host (its host script works on another tree, "
                                     "run on the action runner itself without ansible_host); "
                                     "the pack config does not allow lab hosts "
                                     "(allow_local_hosts, labs only)")
            root = host_vars[SYSROOT_VAR]
            if not isinstance(root, str) or not _PATH.match(root) or \
                    os.path.realpath(root) == "/":
                return SYSROOT_VAR, "must be an absolute path of a lab host's tree, not /"
        return None


def refusal_text(inventory: str, host: str, variable: str, why: str) -> str:
    return f"inventory {inventory}: host {host}: variable {variable}: {why}"


def check_hosts(inventory: str, entries: Mapping[str, Any], connection: Connection,
                names: List[str]) -> None:
    """Plan time: ConfigError naming every refused host and variable (the first 10)."""
    refused: List[str] = []
    for name in names:
        entry = entries.get(name)
        if entry is None:
            continue
        found = connection.refusal(entry.vars)
        if found:
            refused.append(f"host {name}: variable {found[0]}: {found[1]}")
    if refused:
        more = f"; and {len(refused) - 10} more" if len(refused) > 10 else ""
        raise ConfigError(f"inventory {inventory}: {len(refused)} host(s) refused, nothing was "
                          f"changed: {'; '.join(refused[:10])}{more}")


def local_python() -> str:
    """The interpreter of a local (lab) host's tasks: the system's, as a server has it (no
    pack installed; else the one running the pack, outside its virtualenv): a virtualenv's
    site-packages make every host-side script slower to start, and the counter collector would
    import the pack's library instead of running on its own."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3"
    return os.path.realpath(sys.executable)


def load_connection(data: Mapping[str, Any]) -> Connection:
    """The connection settings of a pack config dict (ConfigError naming the key)."""
    user = data.get("ansible_user") or ""
    if not isinstance(user, str) or (user and not _USER.match(user)):
        raise ConfigError("pack config: ansible_user must be a plain user name")
    interpreter = data.get("ansible_python_interpreter") or "auto_silent"
    if not isinstance(interpreter, str) or not (interpreter in INTERPRETER_AUTO or
                                                _PATH.match(interpreter)):
        raise ConfigError("pack config: ansible_python_interpreter must be an absolute path "
                          f"(e.g. /usr/bin/python3) or one of {', '.join(INTERPRETER_AUTO)}")
    method = data.get("ansible_become_method") or "sudo"
    if method not in BECOME_METHODS:
        raise ConfigError("pack config: ansible_become_method must be one of "
                          f"{', '.join(BECOME_METHODS)}")
    retries = data.get("ssh_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
        raise ConfigError("pack config: ssh_retries must be a whole number from 0 to 10")
    local_python_path = data.get("local_hosts_python") or ""
    if not isinstance(local_python_path, str) or (local_python_path and
                                                  not _PATH.match(local_python_path)):
        raise ConfigError("pack config: local_hosts_python must be an absolute path")
    become = data.get("ansible_become", False)
    local = data.get("allow_local_hosts", False)
    for key, value in (("ansible_become", become), ("allow_local_hosts", local)):
        if not isinstance(value, bool):
            raise ConfigError(f"pack config: {key} must be true or false")
    return Connection(user=user, python_interpreter=interpreter, become=become,
                      become_method=method, ssh_retries=retries,
                      ssh_options=ssh_options(data.get("ssh_options") or []),
                      allow_local=local, local_python=local_python_path,
                      drain_command=command_argv(data, "drain_command"),
                      undrain_command=command_argv(data, "undrain_command"))


def command_argv(data: Mapping[str, Any], key: str) -> Tuple[str, ...]:
    """A command as a list of arguments (no shell), `{host}` in any of them for the host's
    name; nothing Ansible would render."""
    value = data.get(key) or []
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"pack config: {key} must be a list of arguments (e.g. "
                          "[/usr/local/bin/lb-member, disable, '{host}'])")
    for word in value:
        if any(marker in word for marker in ("{{", "{%", "{#")):
            raise ConfigError(f"pack config: {key}: {word!r} carries a Jinja marker; "
                              f"{HOST_PLACEHOLDER} stands for the host's name")
    return tuple(value)


def ssh_options(value: Any) -> Tuple[str, ...]:
    """`Key=Value` ssh options (ProxyJump, Ciphers, ...); host key checking is the pack's."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError("pack config: ssh_options must be a list of Key=Value ssh options")
    out: List[str] = []
    for item in value:
        match = _SSH_OPTION.match(item) if isinstance(item, str) else None
        if not match:
            raise ConfigError(f"pack config: ssh_options: {item!r} is not Key=Value (no "
                              "spaces or quotes)")
        if match.group(1).lower() in SSH_OPTIONS_REFUSED:
            raise ConfigError(f"pack config: ssh_options: {match.group(1)} is the pack's own "
                              "(host keys are always verified against ssh_known_hosts)")
        out.append(item)
    return tuple(out)
