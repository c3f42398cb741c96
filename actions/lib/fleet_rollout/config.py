"""The pack config (st2: /opt/stackstorm/configs/fleet_rollout.yaml, secrets encrypted), checked
once, and the per-host BMC endpoint built from it. Credentials never come from the inventory."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from fleet_rollout import bmc_networks
from fleet_rollout.connection import Connection, load_connection
from fleet_rollout.counter_source import CounterSource, load_counter_source
from fleet_rollout.errors import ConfigError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.profile import DEFAULT_FORKS
from fleet_rollout.redfish.client import AUTH_MODES, BmcEndpoint


@dataclass
class PackConfig:
    # name -> {username, password, auth, networks}; auth: auto (session when the BMC offers
    # it, else basic) | session | basic, for every host that uses this credential; networks:
    # the only BMC networks its password is sent to (empty: anywhere in bmc_networks)
    credentials: Dict[str, Dict[str, Any]]
    ca_bundle: Optional[str] = None
    allow_insecure_http: bool = False
    redfish_timeout: float = 30.0
    redfish_get_retries: int = 4
    inventory: str = ""  # no default: a rollout never falls back to some file (plan refuses)
    state_dir: str = "/var/lib/fleet_rollout"
    chat_route: str = "chatops"
    chat_channel: str = "fleet-rollout"
    approvers: List[str] = field(default_factory=list)
    # who may plan, start, abort, roll back and restore (st2 users; chat users through a
    # chatops_users account)
    operators: List[str] = field(default_factory=list)
    approver_roles: List[str] = field(default_factory=list)
    chatops_users: List[str] = field(default_factory=list)
    ansible_private_key: Optional[str] = None
    # SSH known_hosts file host keys are verified against ("": the runner's ~/.ssh/known_hosts)
    ssh_known_hosts: str = ""
    # a site's own profiles besides the pack's profiles/ (the pack's win on a name clash)
    profiles_dir: str = ""
    # hosts one ansible-playbook run works on at once (its --forks; a counter window's start
    # and read: at least profile.SAMPLE_FORKS); a run's further hosts start as others finish
    # (strategy free)
    ansible_forks: int = DEFAULT_FORKS
    # seconds a host action's execution may stay running after its work ended (or after its
    # timeout) before fleet_rollout.watchdog takes its action runner for dead
    watchdog_grace: float = 300.0
    # seconds at most between the resume an answer writes and the inquiry's end (one st2 API
    # request: respond()); a resume further from the answer names nobody
    answer_gap: float = 300.0
    # API key of the st2 account the pack keeps rollout state as (statestore.py); "": the
    # action's own user
    state_api_key: str = ""
    # the networks BMC addresses must be in (bmc_networks.py); empty: every BMC is refused
    bmc_networks: List[bmc_networks.Network] = field(default_factory=list)
    # how Ansible reaches the hosts (connection.py); never from the inventory
    connection: Connection = field(default_factory=Connection)
    # where counter windows come from: the hosts' own samplers, or a Prometheus
    counters: CounterSource = field(default_factory=CounterSource)
    pack_dir: str = ""

    def __repr__(self) -> str:  # never print credentials
        return (f"PackConfig(inventory={self.inventory!r}, credentials="
                f"{sorted(self.credentials)!r}, ca_bundle={self.ca_bundle!r})")

    def inventory_source(self) -> str:
        """The inventory every rollout plans from (relative: to the pack directory); a clear
        error when the pack config names none."""
        if not self.inventory:
            raise ConfigError("pack config: inventory is not set; name the Ansible inventory of "
                              "your fleet (a file, directory or script) in the pack config "
                              "(configs/fleet_rollout.yaml: inventory: /etc/ansible/fleet.yml); "
                              "`fleet-rollout lab up` writes one for the lab")
        return self.resolve(self.inventory)

    def resolve(self, path: str) -> str:
        """Relative paths in the config are relative to the pack directory."""
        if not path or os.path.isabs(path) or not self.pack_dir:
            return path
        return os.path.join(self.pack_dir, path)

    def endpoint(self, host: FleetHost, timeout: Optional[float] = None) -> BmcEndpoint:
        cred = self.credentials.get(host.bmc_credential)
        if cred is None:
            raise ConfigError(f"host {host.name}: bmc_credential {host.bmc_credential!r} is not "
                              f"in the pack config credentials (known: "
                              f"{', '.join(sorted(self.credentials)) or 'none'})", host.name)
        bmc_networks.check_bmc_address(host.name, host.bmc_address, self.bmc_networks,
                                       host.bmc_credential, cred.get("networks") or [])
        return BmcEndpoint(host.name, host.bmc_address, cred["username"], cred["password"],
                           ca_bundle=self.resolve(self.ca_bundle or "") or None,
                           allow_http=self.allow_insecure_http,
                           timeout=timeout or self.redfish_timeout,
                           get_retries=self.redfish_get_retries, vendor=host.bmc_vendor,
                           auth=cred.get("auth") or "auto")


def load_pack_config(raw: Optional[Mapping[str, Any]], pack_dir: str = "") -> PackConfig:
    """Validate the pack config dict (self.config in an st2 action)."""
    data = dict(raw or {})
    creds = data.get("credentials")
    if not isinstance(creds, Mapping) or not creds:
        raise ConfigError("pack config: credentials missing (a mapping of name -> "
                          "{username, password})")
    checked: Dict[str, Dict[str, Any]] = {}
    for name, value in creds.items():
        if not isinstance(value, Mapping) or not value.get("username") or not value.get(
                "password"):
            raise ConfigError(f"pack config: credentials.{name} needs username and password")
        auth = str(value.get("auth") or "auto")
        if auth not in AUTH_MODES:
            raise ConfigError(f"pack config: credentials.{name}.auth must be one of "
                              f"{', '.join(AUTH_MODES)}, not {auth!r}")
        checked[str(name)] = {"username": str(value["username"]),
                              "password": str(value["password"]), "auth": auth,
                              "networks": bmc_networks.parse_networks(
                                  value.get("networks"), f"credentials.{name}.networks")}
    try:
        return PackConfig(
            credentials=checked, ca_bundle=data.get("ca_bundle") or None,
            allow_insecure_http=bool(data.get("allow_insecure_http", False)),
            redfish_timeout=float(data.get("redfish_timeout", 30)),
            redfish_get_retries=int(data.get("redfish_get_retries", 4)),
            inventory=str(data.get("inventory") or ""),
            state_dir=str(data.get("state_dir") or "/var/lib/fleet_rollout"),
            chat_route=str(data.get("chat_route") or "chatops"),
            chat_channel=str(data.get("chat_channel") or "fleet-rollout"),
            approvers=_names(data, "approvers"),
            operators=_names(data, "operators"),
            approver_roles=_names(data, "approver_roles"),
            chatops_users=_names(data, "chatops_users"),
            ansible_private_key=data.get("ansible_private_key") or None,
            ssh_known_hosts=_optional_text(data, "ssh_known_hosts"),
            profiles_dir=_optional_text(data, "profiles_dir"),
            ansible_forks=_forks(data.get("ansible_forks", DEFAULT_FORKS)),
            watchdog_grace=_grace(data.get("watchdog_grace", 300)),
            answer_gap=_answer_gap(data.get("answer_gap", 300)),
            state_api_key=_optional_text(data, "state_api_key"),
            bmc_networks=bmc_networks.parse_networks(data.get("bmc_networks"),
                                                     "bmc_networks"),
            connection=load_connection(data),
            counters=load_counter_source(data.get("counters"),
                                         bool(data.get("allow_insecure_http", False))),
            pack_dir=pack_dir)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"pack config: {err}") from None


def _answer_gap(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 3600:
        raise ConfigError("pack config: answer_gap must be a number of seconds from 1 to 3600")
    return float(value)


def _grace(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 5 <= value <= 86400:
        raise ConfigError("pack config: watchdog_grace must be a number of seconds from 5 to "
                          "86400")
    return float(value)


def _forks(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 500:
        raise ConfigError("pack config: ansible_forks must be a whole number from 1 to 500")
    return value


def _optional_text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key) or ""
    if not isinstance(value, str):
        raise ConfigError(f"pack config: {key} must be a string")
    return value


def _names(data: Mapping[str, Any], key: str) -> List[str]:
    """A list of user or role names from the pack config (a lone string is one name)."""
    value = data.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip()
                                                         for v in value):
        raise ConfigError(f"pack config: {key} must be a list of names")
    return [v.strip() for v in value]
