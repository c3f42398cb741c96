"""The lab's ChatOps stack (`fleet-rollout lab up --chatops`): st2 users, the runtime's st2 API
(with its engine), ngircd and errbot with err-stackstorm, all on 127.0.0.1.

    info = stack.start(state_dir, home, users=["sre-alice"], bot_user="chatops_bot")
    ...                                   # info.irc_port, info.api_url, info.st2_config(user)
    stack.stop(state_dir)                 # by the PIDs in the state dir

Passwords are random, registered with `fleet-rollout api user` through stdin and kept only in
<state>/st2/<user>.conf (mode 0600, st2 CLI config files: `ST2_CONFIG_FILE=... st2 ...`). The
bot gets its password through its environment (fleet_lab.chatops.bot), never argv or logs.
"""
from __future__ import annotations

import configparser
import io
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from fleet_lab.chatops import bot, ircd, procs
from fleet_runtime.paths import REPO_ROOT

REPO = REPO_ROOT
PACK_DIR = Path(__file__).resolve().parent / "st2pack"  # rule chatops_errbot.notify_errbot
ROUTE = "errbot"
CHANNEL = ircd.DEFAULT_CHANNEL
INFO_NAME = "chatops.json"
API_PID_NAME = "st2api.pid"
API_LOG_NAME = "st2api.log"
API_STATE_FILE = "st2api.json"  # written by `fleet-rollout api serve` in the runtime home
ST2_CLI = REPO / ".venv-st2client" / "bin" / "st2"

Progress = Callable[[str], None]


@dataclass
class ChatopsInfo:
    """What `lab status` shows and the demo/tests use; <state>/chatops.json (no secrets)."""

    irc_host: str
    irc_port: int
    channel: str
    bot_nick: str
    route: str
    api_url: str
    home: str
    st2_dir: str
    users: List[str] = field(default_factory=list)
    api_pid: Optional[int] = None
    ngircd_pid: Optional[int] = None
    errbot_pid: Optional[int] = None

    def st2_config(self, user: str) -> str:
        """The st2 CLI config file of `user` (ST2_CONFIG_FILE)."""
        return os.path.join(self.st2_dir, f"{user}.conf")

    def st2_env(self, user: str) -> Dict[str, str]:
        """Environment for the real st2 CLI as `user` (its HOME inside the state dir)."""
        cli_home = os.path.join(self.st2_dir, "home", user)
        os.makedirs(cli_home, mode=0o700, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ST2_")}
        env.update({"ST2_CONFIG_FILE": self.st2_config(user), "HOME": cli_home,
                    "NO_COLOR": "1"})
        return env


def dirs(state_dir: str) -> Dict[str, Path]:
    root = Path(state_dir).resolve()
    return {"st2": root / "st2", "chatops": root / "chatops", "info": root / INFO_NAME,
            "ircd": root / "chatops" / "ircd", "bot": root / "chatops" / "bot",
            "api_pid": root / "chatops" / API_PID_NAME, "api_log": root / "chatops" / API_LOG_NAME}


def read_info(state_dir: str) -> Optional[ChatopsInfo]:
    try:
        doc = json.loads(dirs(state_dir)["info"].read_text(encoding="utf-8"))
        return ChatopsInfo(**doc)
    except (OSError, ValueError, TypeError):
        return None


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def _fleet_cli() -> List[str]:
    return [sys.executable, "-m", "fleet_runtime.cli"]


def _child_env(home: str) -> Dict[str, str]:
    env = dict(os.environ, FLEET_ROLLOUT_HOME=home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


# -- st2 users ------------------------------------------------------------------------------


# The pack's RBAC roles (rbac/roles): the lab's SREs run and approve rollouts, the bot's
# account runs the chat aliases for them.
SRE_ROLES = ("fleet_rollout_operator", "fleet_rollout_approver")
BOT_ROLES = ("fleet_rollout_chatops",)


def _api_cli(home: str, args: List[str], what: str, stdin: Optional[str] = None) -> None:
    out = subprocess.run(_fleet_cli() + ["api"] + args + ["--home", home], input=stdin,
                         capture_output=True, text=True, timeout=120, cwd=str(REPO),
                         env=_child_env(home))
    if out.returncode != 0:
        raise RuntimeError(f"{what}: {(out.stderr or out.stdout).strip()[-1000:]}")


def add_user(home: str, name: str, password: str, roles: Sequence[str] = ()) -> None:
    """`fleet-rollout api user NAME --home H [--role R ...]`, the password on stdin (never
    argv)."""
    args = ["user", name]
    for role in roles:
        args += ["--role", role]
    _api_cli(home, args, f"st2 user {name} not added to {home}/st2api-users",
             stdin=password + "\n")


def create_users(home: str, names: List[str], bot_user: Optional[str] = None
                 ) -> Dict[str, str]:
    """A random password per user, registered in the home's users file with the pack's roles
    (the bot's account: the chat role; the others: operator and approver); returns them."""
    _api_cli(home, ["roles", str(REPO / "rbac")], "the pack's RBAC roles not installed")
    passwords: Dict[str, str] = {}
    for name in dict.fromkeys(names):
        passwords[name] = secrets.token_urlsafe(18)
        add_user(home, name, passwords[name], BOT_ROLES if name == bot_user else SRE_ROLES)
    return passwords


# The st2 account the pack keeps rollout state as (the pack config's state_api_key): st2's admin
# role, as on StackStorm with RBAC, where only a system role reaches the pack's per-rollout keys.
STATE_ACCOUNT = "fleet_rollout_state"


def create_state_account(home: str) -> None:
    """The state account (a random password nobody keeps), an API key acting as it, and that
    key as state_api_key in the home's pack config: before the engine reads the config."""
    import yaml

    from fleet_runtime.home import RuntimeHome

    add_user(home, STATE_ACCOUNT, secrets.token_urlsafe(24), ("admin",))
    out = subprocess.run(_fleet_cli() + ["api", "apikey", STATE_ACCOUNT, "--json", "--home",
                                         home], capture_output=True, text=True, timeout=120,
                         cwd=str(REPO), env=_child_env(home))
    if out.returncode != 0:
        raise RuntimeError(f"no API key for {STATE_ACCOUNT}: {out.stderr.strip()[-500:]}")
    path = RuntimeHome(home).pack_config_path("fleet_rollout")
    doc = (yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None) or {}
    doc["state_api_key"] = json.loads(out.stdout)["key"]
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, "# written by `fleet-rollout lab up`\n" + yaml.safe_dump(doc))


def cli_config_text(user: str, password: str, api: Dict[str, str]) -> str:
    config = configparser.ConfigParser(interpolation=None)
    config["general"] = {"base_url": api["ST2_BASE_URL"]}
    config["auth"] = {"url": api["ST2_AUTH_URL"]}
    config["api"] = {"url": api["ST2_API_URL"]}
    config["stream"] = {"url": api["ST2_STREAM_URL"]}
    config["credentials"] = {"username": user, "password": password}
    config["cli"] = {"cache_token": "False"}
    out = io.StringIO()
    out.write(f"# st2 CLI config of {user} for the lab's st2 API (written by `lab up`)\n")
    config.write(out)
    return out.getvalue()


def write_cli_configs(st2_dir: Path, passwords: Dict[str, str], api: Dict[str, str]) -> None:
    st2_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(st2_dir, 0o700)
    for user, password in passwords.items():
        _write_private(st2_dir / f"{user}.conf", cli_config_text(user, password, api))


def read_password(st2_dir: Path, user: str) -> str:
    path = st2_dir / f"{user}.conf"
    config = configparser.ConfigParser(interpolation=None)
    if not config.read(path):
        raise RuntimeError(f"{path}: missing (written by `lab up --chatops`)")
    try:
        return config["credentials"]["password"]
    except KeyError as e:
        raise RuntimeError(f"{path}: no [credentials] password") from e


# -- the st2 API ----------------------------------------------------------------------------


def _api_state(home: str) -> Optional[Dict[str, object]]:
    try:
        return dict(json.loads((Path(home) / API_STATE_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def start_api(home: str, state_dir: str, timeout: float = 90.0) -> Dict[str, str]:
    """`fleet-rollout api serve --port 0 --pack <st2pack>` for `home` in its own process group;
    returns its st2api.json once it serves (the engine runs as its child)."""
    d = dirs(state_dir)
    running = _api_state(home)
    if running and procs.alive(int(str(running.get("pid") or 0))):
        raise RuntimeError(f"an st2 API already serves {home} (pid {running['pid']}, "
                           f"{Path(home) / API_STATE_FILE}); stop it first")
    d["chatops"].mkdir(parents=True, exist_ok=True)
    argv = _fleet_cli() + ["api", "serve", "--port", "0", "--home", home,
                               "--pack", str(PACK_DIR)]
    pid = procs.spawn(argv, d["api_log"], env=_child_env(home), cwd=REPO)
    procs.write_pid(d["api_pid"], pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _api_state(home)
        if state and state.get("pid") == pid:
            return {k: str(v) for k, v in state.items()}
        if not procs.alive(pid):
            raise RuntimeError(f"`fleet-rollout api serve` for {home} exited; "
                               f"{d['api_log']}:\n{procs.tail(d['api_log'])}")
        time.sleep(0.2)
    raise RuntimeError(f"the st2 API did not start within {timeout:.0f}s; see {d['api_log']}")


# -- the whole stack ------------------------------------------------------------------------


def start(state_dir: str, home: str, users: List[str], bot_user: str,
          progress: Progress = print, venv: Optional[Path] = None) -> ChatopsInfo:
    """Users, API (+engine), ngircd, errbot. The caller stops it with `stop` on failure."""
    d = dirs(state_dir)
    home = str(Path(home).resolve())
    passwords = create_users(home, [bot_user] + list(users), bot_user)
    progress(f"chatops: st2 users {', '.join(passwords)} (passwords in {d['st2']}/*.conf)")
    create_state_account(home)
    progress(f"chatops: the pack keeps rollout state as {STATE_ACCOUNT} (state_api_key)")
    api = start_api(home, state_dir)
    write_cli_configs(d["st2"], passwords, api)
    progress(f"chatops: st2 API on {api['ST2_BASE_URL']} (engine included)")
    info = ChatopsInfo(irc_host=procs.LOOPBACK, irc_port=0, channel=CHANNEL,
                       bot_nick=bot.DEFAULT_NICK, route=ROUTE, api_url=api["ST2_BASE_URL"],
                       home=home, st2_dir=str(d["st2"]), users=list(passwords),
                       api_pid=int(api["pid"]))
    save_info(state_dir, info)
    progress(f"chatops: errbot virtualenv {venv or bot.DEFAULT_VENV} (the first time: pip "
             f"install -r {bot.REQUIREMENTS.name})")
    venv = bot.ensure_venv(venv)
    server = ircd.start(d["ircd"], channels=(CHANNEL,))
    info.irc_host, info.irc_port, info.ngircd_pid = server.host, server.port, server.pid
    save_info(state_dir, info)
    progress(f"chatops: IRC server {server.host}:{server.port}, channel {CHANNEL}")
    settings = bot.St2Settings(api["ST2_BASE_URL"], username=bot_user,
                               password=passwords[bot_user], route_key=ROUTE)
    admins = tuple(f"{user}!*@*" for user in users) or bot.DEFAULT_ADMINS
    b = bot.start(d["bot"], venv, server.host, server.port, CHANNEL, bot.DEFAULT_NICK,
                  st2=settings, admins=admins)
    info.errbot_pid = b.pid
    save_info(state_dir, info)
    wait_bot_streaming(api, b, timeout=60.0)
    progress(f"chatops: errbot {b.nick} in {CHANNEL} as st2 user {bot_user}")
    return info


def save_info(state_dir: str, info: ChatopsInfo) -> None:
    dirs(state_dir)["info"].write_text(json.dumps(asdict(info), indent=1) + "\n",
                                       encoding="utf-8")


def wait_bot_streaming(api: Dict[str, str], b: bot.BotProcess, timeout: float) -> None:
    """Until err-stackstorm's stream listener started, logged in (else announcements are lost).
    err-stackstorm logs only failed logins ("API response to token = 401 ...")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = procs.tail(b.log_path, 400)
        if "*** Start stream listener ***" in text:
            time.sleep(2.0)  # it logs in and connects right after; a failure is logged
            _check_login(api, b)
            return
        _check_login(api, b)
        if not procs.alive(b.pid):
            raise RuntimeError(f"errbot (pid {b.pid}) exited:\n{b.logs()}")
        time.sleep(0.3)
    raise RuntimeError(f"err-stackstorm did not start its st2 stream listener within "
                       f"{timeout:.0f}s; {b.log_path}:\n{procs.tail(b.log_path, 30)}")


def _check_login(api: Dict[str, str], b: bot.BotProcess) -> None:
    text = procs.tail(b.log_path, 400)
    if "Failed to authenticate" in text or "API response to token" in text:
        raise RuntimeError(f"err-stackstorm could not log in to {api['ST2_BASE_URL']}; "
                           f"{b.log_path}:\n{procs.tail(b.log_path, 30)}")


# -- stopping -------------------------------------------------------------------------------


def _is(pid: Optional[int], marker: bytes) -> bool:
    """`pid` is alive and still the process we started (its command line has `marker`)."""
    if not procs.alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return marker in handle.read()
    except OSError:
        return False


def running(state_dir: str) -> Dict[str, Optional[int]]:
    """PIDs of the stack's processes that still run (None: not running)."""
    d = dirs(state_dir)
    api = procs.read_pid(d["api_pid"])
    ngircd = ircd.running_pid(d["ircd"])
    errbot = bot.running_pid(d["bot"])
    return {"errbot": errbot if _is(errbot, b"errbot") else None,
            "ngircd": ngircd if _is(ngircd, b"ngircd") else None,
            "st2api": api if _is(api, b"api\x00serve") else None}


def stop(state_dir: str, progress: Progress = print) -> List[str]:
    """Stop errbot, ngircd and the st2 API (its engine with it), by PID. Returns what ran."""
    stopped = []
    for name, pid in running(state_dir).items():
        if pid is None:
            continue
        progress(f"stopping {name} {pid}")
        timeout = 45.0 if name == "st2api" else 15.0  # the API waits for its engine
        if not procs.stop(pid, timeout):
            progress(f"{name} {pid} did not stop")
        stopped.append(name)
    info = dirs(state_dir)["info"]
    if info.exists():
        info.unlink()
    return stopped
