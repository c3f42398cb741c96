"""The runtime home directory: database, pack configs, chat transcript, crypto key, settings.

Layout (default `~/.fleet-rollout`, or `$FLEET_ROLLOUT_HOME`):

    runtime.db            SQLite: executions, workflow state, events, datastore, inquiries
    runtime.lock          held (flock) by the process that runs the engine
    rbac/                 StackStorm RBAC: roles/*.yaml, assignments/*.yaml (fleet_runtime/rbac.py)
    config.yaml           runtime settings: user, roles, user_roles, system_user, chatops_user,
                          chat_webhook_url, workers, packs, time_factor, python_workers
                          (warm|cold), warm_preload, runners
    configs/<pack>.yaml   pack configs (like /opt/stackstorm/configs/<pack>.yaml)
    chat.jsonl            what reached chat (route chatops: post_message, alias replies)
    announcements.jsonl   post_message on other routes (no chat bot listens; chatlog.py)
    crypto.key            key for datastore secrets (created on first use, mode 0600)
    runners/<k>/          action runner k's own directory (`runners` >= 2): runner.json, its
                          pack configs' state_dir (state_dir/), lost.jsonl

Everything in it is private: the home and its directories 0700, its files 0600 (also the
SQLite -wal/-shm files, the chat transcript, and what the pack's actions write there); a home
found with looser permissions is tightened when it is opened.
"""
from __future__ import annotations

import getpass
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import yaml

from fleet_runtime.runtime_errors import MetadataError

if TYPE_CHECKING:
    from fleet_runtime.rbac import Rbac

ENV_HOME = "FLEET_ROLLOUT_HOME"
ENV_USER = "FLEET_ROLLOUT_USER"
ENV_ROLES = "FLEET_ROLLOUT_ROLES"
ENV_TIME_FACTOR = "FLEET_ROLLOUT_TIME_FACTOR"
ENV_WEBHOOK = "FLEET_ROLLOUT_CHAT_WEBHOOK"
ENV_PACKS = "FLEET_ROLLOUT_PACKS"
ENV_CHATOPS_USER = "FLEET_ROLLOUT_CHATOPS_USER"
ENV_PYTHON_WORKERS = "FLEET_ROLLOUT_PYTHON_WORKERS"
ENV_ST2_RACES = "FLEET_ROLLOUT_ST2_RACES"
ENV_ST2_PAUSE_WINDOW = "FLEET_ROLLOUT_ST2_PAUSE_WINDOW"
ENV_DEAD_RUNNER = "FLEET_ROLLOUT_DEAD_RUNNER"
ENV_RUNNERS = "FLEET_ROLLOUT_RUNNERS"
MAX_RUNNERS = 32
PYTHON_WORKERS = ("warm", "cold")

_SETTINGS_KEYS = {
    "user": str,
    "roles": list,
    "chat_webhook_url": str,
    "workers": int,
    "packs": list,
    "time_factor": (int, float),
    "system_user": str,
    "chatops_user": str,
    "user_roles": dict,
    "python_workers": str,
    "warm_preload": list,
    "st2_races": (bool, str),
    "st2_pause_window": (int, float),
    "api_key_ttl_days": (int, float),
    "dead_runner": str,
    "runners": int,
}


class RuntimeHome:
    """Paths and settings of one runtime home."""

    def __init__(self, path: Optional[str] = None) -> None:
        raw = path or os.environ.get(ENV_HOME) or os.path.join("~", ".fleet-rollout")
        self.path = Path(os.path.expanduser(raw)).resolve()
        self.path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        (self.path / "configs").mkdir(mode=PRIVATE_DIR, exist_ok=True)
        make_private(self.path)
        self.settings = self._load_settings()
        self._rbac: Dict[Tuple[str, ...], Rbac] = {}

    # ------------------------------------------------------------------ paths
    @property
    def db_path(self) -> Path:
        return self.path / "runtime.db"

    @property
    def lock_path(self) -> Path:
        return self.path / "runtime.lock"

    @property
    def transcript_path(self) -> Path:
        return self.path / "chat.jsonl"

    @property
    def key_path(self) -> Path:
        return self.path / "crypto.key"

    def pack_config_path(self, pack: str) -> Path:
        return self.path / "configs" / f"{pack}.yaml"

    # ------------------------------------------------------------------ settings
    def _load_settings(self) -> Dict[str, Any]:
        path = self.path / "config.yaml"
        if not path.exists():
            return {}
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise MetadataError(str(path), None, f"not valid YAML: {e}") from e
        if not isinstance(data, dict):
            raise MetadataError(str(path), None, "must be a mapping")
        for key, value in data.items():
            if key not in _SETTINGS_KEYS:
                allowed = ", ".join(sorted(_SETTINGS_KEYS))
                raise MetadataError(str(path), key, f"unknown setting (allowed: {allowed})")
            if not isinstance(value, _SETTINGS_KEYS[key]):
                raise MetadataError(str(path), key, f"wrong type {type(value).__name__}")
        return data

    @property
    def user(self) -> str:
        """The user this runtime acts as (st2's authenticated user)."""
        return os.environ.get(ENV_USER) or self.settings.get("user") or _os_user()

    @property
    def system_user(self) -> str:
        """st2's system user (rules and timers run as it); default `stanley` like st2."""
        return self.settings.get("system_user") or "stanley"

    @property
    def chatops_user(self) -> str:
        """The chat bot's st2 account: alias executions from `fleet-rollout chat` run as it,
        with the chat user as api_user (st2's alias execution API); default `chatops_bot`."""
        return (os.environ.get(ENV_CHATOPS_USER) or self.settings.get("chatops_user")
                or "chatops_bot")

    @property
    def roles(self) -> List[str]:
        env = os.environ.get(ENV_ROLES)
        if env is not None:
            return [r.strip() for r in env.split(",") if r.strip()]
        return [str(r) for r in self.settings.get("roles", [])]

    def roles_of(self, user: str) -> List[str]:
        """RBAC roles of a user (st2: role assignments): the assignments under `rbac/`, the
        runtime user's `roles`, any user's from the `user_roles` setting ({name: [role,
        ...]})."""
        found = [str(r) for r in (self.settings.get("user_roles") or {}).get(user) or []]
        if user == self.user:
            found += [r for r in self.roles if r not in found]
        found += [r for r in self.rbac().roles_of(user) if r not in found]
        return found

    @property
    def rbac_path(self) -> Path:
        """StackStorm's RBAC definitions (st2: /opt/stackstorm/rbac): roles/, assignments/."""
        return self.path / "rbac"

    def rbac(self, admins: Sequence[str] = ()) -> Rbac:
        """Who may do what through the APIs; the runtime's own user and its system user are
        `system_admin` (StackStorm's installer assigns it to its admin and to stanley), the
        `admins` given are `admin`."""
        from fleet_runtime.rbac import Rbac

        key = tuple(admins)
        cached = self._rbac.get(key)
        if cached is None:
            cached = self._rbac[key] = Rbac(self.rbac_path, (self.user, self.system_user),
                                            admins)
        return cached

    @property
    def time_factor(self) -> float:
        """Multiplies every wait (task delay, retry delay, policy delay, inquiry ttl)."""
        env = os.environ.get(ENV_TIME_FACTOR)
        if env:
            return float(env)
        return float(self.settings.get("time_factor", 1.0))

    @property
    def st2_races(self) -> str:
        """Model StackStorm's asynchronous steps that race each other (docs/runtime.md, "st2
        races"): "" (off), "random" (either side of a race may win) or "completion-first"
        (an answer's completion always reaches its workflow before the answer's resume)."""
        env = os.environ.get(ENV_ST2_RACES)
        value: Any = env if env is not None and env.strip() else self.settings.get("st2_races")
        text = str(value).strip().lower() if value is not None else ""
        if text in ("", "0", "false", "no", "off"):
            return ""
        if text in ("1", "true", "yes", "on", "random"):
            return "random"
        if text == "completion-first":
            return text
        raise MetadataError(str(self.path / "config.yaml"), "st2_races",
                            f"{value!r}: true, false, random or completion-first")

    @property
    def st2_pause_window(self) -> float:
        """Under st2_races, the seconds at most between an inquiry turning pending (listed,
        answerable) and its workflow pausing on it (docs/runtime.md, "st2 races"); on st2
        it is the time the workflow engine takes to handle that status from the message bus."""
        env = os.environ.get(ENV_ST2_PAUSE_WINDOW)
        value: Any = env if env is not None and env.strip() else \
            self.settings.get("st2_pause_window", 3.0)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = -1.0
        if not 0 <= seconds <= 3600:
            raise MetadataError(str(self.path / "config.yaml"), "st2_pause_window",
                                f"{value!r}: a number of seconds from 0 to 3600")
        return seconds

    @property
    def api_key_ttl_days(self) -> float:
        """Days an API key of the runtime's st2 API works after it was created (default 90)."""
        value = self.settings.get("api_key_ttl_days", 90)
        if isinstance(value, bool) or not 0 < float(value) <= 3650:
            raise MetadataError(str(self.path / "config.yaml"), "api_key_ttl_days",
                                f"{value!r}: a number of days from 0 to 3650")
        return float(value)

    @property
    def dead_runners(self) -> List[Tuple[str, Dict[str, str]]]:
        """Model st2 action runners killed while they run an action (docs/runtime.md, "st2
        races"): `<action ref> [param=value ...]`, several separated by `;`, each naming the
        execution whose runner dies (the first one started that matches); [] (off) when
        unset."""
        env = os.environ.get(ENV_DEAD_RUNNER)
        value = env if env is not None and env.strip() else self.settings.get("dead_runner")
        specs: List[Tuple[str, Dict[str, str]]] = []
        for spec in str(value or "").split(";"):
            words = spec.split()
            if not words:
                continue
            match: Dict[str, str] = {}
            for word in words[1:]:
                key, sep, wanted = word.partition("=")
                if not sep or not key:
                    raise MetadataError(str(self.path / "config.yaml"), "dead_runner",
                                        f"{value!r}: `<action ref> [param=value ...]`, several"
                                        " separated by `;`")
                match[key] = wanted
            specs.append((words[0], match))
        return specs

    def dead_runner_path(self, index: int) -> Path:
        """Where the runtime records the execution whose runner died by the index-th spec of
        dead_runner (each dies once)."""
        return self.path / f"dead-runner-{index}"

    @property
    def runners(self) -> int:
        """Action runners (st2actionrunner processes): 1 (default) runs actions as children of
        the engine process; N >= 2 runs them in N runner processes of their own, each with its
        own directory (`runner_dir`), like N st2 action runner machines (docs/runtime.md,
        "Action runners")."""
        env = os.environ.get(ENV_RUNNERS)
        value: Any = env if env is not None and env.strip() else self.settings.get("runners", 1)
        try:
            count = int(str(value).strip())
        except ValueError:
            count = 0
        if isinstance(value, bool) or not 1 <= count <= MAX_RUNNERS:
            raise MetadataError(str(self.path / "config.yaml"), "runners",
                                f"{value!r}: a number of action runners from 1 to {MAX_RUNNERS}"
                                f" (or ${ENV_RUNNERS})")
        return count

    def runner_dir(self, index: int) -> Path:
        """Action runner `index`'s own directory (1-based): what it keeps on its machine."""
        return self.path / "runners" / str(index)

    @property
    def webhook_url(self) -> Optional[str]:
        return os.environ.get(ENV_WEBHOOK) or self.settings.get("chat_webhook_url") or None

    @property
    def workers(self) -> int:
        return int(self.settings.get("workers", 16))

    @property
    def python_workers(self) -> str:
        """`warm`: python actions are forked from a per-pack zygote (fleet_runtime.warm);
        `cold`: a new interpreter per execution."""
        value = (os.environ.get(ENV_PYTHON_WORKERS) or self.settings.get("python_workers")
                 or "warm").strip().lower()
        if value not in PYTHON_WORKERS:
            raise MetadataError(str(self.path / "config.yaml"), "python_workers",
                                f"{value!r} is not one of {', '.join(PYTHON_WORKERS)}"
                                f" (or ${ENV_PYTHON_WORKERS})")
        return value

    @property
    def warm_preload(self) -> List[str]:
        """More modules the warm worker zygotes import (e.g. ansible)."""
        return [str(m) for m in self.settings.get("warm_preload") or []]

    @property
    def extra_packs(self) -> List[str]:
        env = os.environ.get(ENV_PACKS)
        packs = [p for p in env.split(os.pathsep) if p] if env else []
        return packs + [str(p) for p in self.settings.get("packs", [])]


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PRIVATE_UMASK = 0o077


def private_umask() -> None:
    """Files and directories this process (and the actions it starts) creates are private to
    the user: the runtime's entry points (engine, `api serve`, the CLI commands) call it."""
    os.umask(PRIVATE_UMASK)


# Checked, not fixed: `api serve` refuses an API users file others could read (its password
# hashes may have been copied; the passwords are to be set again), st2api/users.py.
CHECKED_NOT_FIXED = frozenset({"st2api-users"})


def make_private(root: Path) -> None:
    """Take group and other permissions away from `root` and everything below it (a home made
    by an older version, or files written by a process with a looser umask). Symbolic links
    are not followed; what this user cannot change is left as it is."""
    _strip_group_other(root)
    for folder, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            if name not in CHECKED_NOT_FIXED:
                _strip_group_other(Path(folder) / name)


def _strip_group_other(path: Path) -> None:
    try:
        mode = os.lstat(str(path)).st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode) or not stat.S_IMODE(mode) & 0o077:
        return
    try:
        os.chmod(str(path), stat.S_IMODE(mode) & ~0o077)
    except OSError:
        pass


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "root"
