"""The lab's chat bot: errbot (IRC backend) with the err-stackstorm plugin from PyPI.

errbot pins its own dependency tree and needs Python >= 3.9, so it lives in its own virtualenv
made from requirements-chatops.txt (`ensure_venv`, default <repo>/.cache/chatops-venv).

    venv = bot.ensure_venv()
    st2 = bot.St2Settings("http://127.0.0.1:9100", username="errbot", password=secret)
    b = bot.start(state_dir, venv, irc_host="127.0.0.1", irc_port=port, st2=st2)
    ...
    bot.stop(b.pid)

Credentials never go to argv, logs or config.py: config.py reads them from the bot process's
environment (FLEET_CHATOPS_ST2_*), which only this module sets.
"""
from __future__ import annotations

import fcntl
import hashlib
import inspect
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from fleet_lab.chatops import irc_serial, irc_split, procs
from fleet_lab.chatops.irc_client import IrcClient, IrcError
from fleet_lab.chatops.ircd import DEFAULT_CHANNEL
from fleet_runtime.paths import REPO_ROOT

REPO = REPO_ROOT
REQUIREMENTS = REPO / "requirements-chatops.txt"
DEFAULT_VENV = REPO / ".cache" / "chatops-venv"
PIP_INSTALL = REPO / "scripts" / "pip-install.sh"  # uv when `make install` has it, else pip
MAKE_VENV = REPO / "scripts" / "make-venv.sh"  # uv venv when `make install` has uv, else venv
DEFAULT_NICK = "fleetbot"
DEFAULT_ADMINS = ("sre!*@*",)
PLUGIN_DIR_NAME = "err-stackstorm"  # the wheel installs site-packages/err-stackstorm/st2.plug
CONFIG_NAME = "errbot_config.py"
PID_NAME = "errbot.pid"
LOG_NAME = "errbot.log"  # errbot's own log (BOT_LOG_FILE)
CONSOLE_NAME = "errbot.console.log"  # stdout/stderr of the process
ENV_USER = "FLEET_CHATOPS_ST2_USER"
ENV_PASSWORD = "FLEET_CHATOPS_ST2_PASSWORD"
ENV_API_KEY = "FLEET_CHATOPS_ST2_API_KEY"
# errbot's core plugins we load. Not VersionChecker (it fetches errbot.io), not Webserver,
# Plugins/Backup/Flows/TextCmds (repo management, not needed, longer !help).
CORE_PLUGINS = ("ACLs", "ChatRoom", "CommandNotFoundFilter", "Health", "Help", "Utils")


# -- the virtualenv ------------------------------------------------------------------------


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _base_python() -> str:
    """An interpreter >= 3.9 to build the venv from (errbot 6.2 needs it)."""
    if sys.version_info >= (3, 9):
        return sys.executable
    for name in ("python3.12", "python3.11", "python3.10", "python3.9"):
        for d in os.environ.get("PATH", "").split(os.pathsep):
            if os.access(os.path.join(d, name), os.X_OK):
                return os.path.join(d, name)
    raise RuntimeError("errbot needs Python >= 3.9 and none was found on PATH")


def _stamp(requirements: Path, python: str) -> str:
    h = hashlib.sha256(requirements.read_bytes())
    h.update(python.encode())
    return h.hexdigest()


def ensure_venv(venv: Optional[Path] = None, requirements: Optional[Path] = None,
                python: Optional[str] = None) -> Path:
    """Create or update the chat-ops virtualenv from the pinned requirements (idempotent:
    nothing to do when the stamp matches). Works from a fresh clone; uses PyPI through uv or pip."""
    venv = Path(venv or DEFAULT_VENV).resolve()
    requirements = Path(requirements or REQUIREMENTS).resolve()
    python = python or _base_python()
    venv.parent.mkdir(parents=True, exist_ok=True)
    stamp_file = venv / ".fleet-chatops-stamp"
    want = _stamp(requirements, python)
    with open(venv.parent / f".{venv.name}.lock", "w", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once: one installs, one waits
        have = stamp_file.read_text(encoding="ascii").strip() if stamp_file.exists() else ""
        if have == want and (venv / "bin" / "errbot").exists():
            return venv
        if not _venv_python(venv).exists():
            subprocess.run([str(MAKE_VENV), str(venv), python], check=True,
                           stdin=subprocess.DEVNULL)
        out = subprocess.run(
            [str(PIP_INSTALL), str(_venv_python(venv)), "-r", str(requirements)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"{PIP_INSTALL.name} -r {requirements} failed:\n"
                               f"{out.stdout}{out.stderr}")
        stamp_file.write_text(want + "\n", encoding="ascii")
    return venv


def plugin_dir(venv: Path) -> Path:
    """err-stackstorm's plugin directory inside the venv (what BOT_EXTRA_PLUGIN_DIR needs)."""
    found = sorted((Path(venv) / "lib").glob(f"python3*/site-packages/{PLUGIN_DIR_NAME}"))
    for path in found:
        if (path / "st2.plug").exists():
            return path
    raise FileNotFoundError(f"no {PLUGIN_DIR_NAME}/st2.plug in {venv}: run ensure_venv()")


# -- configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class St2Settings:
    """Where err-stackstorm finds the (lab's) StackStorm API and how the bot logs in.

    base_url serves /auth/v1, /api/v1 and /stream/v1 (one port). Give username+password or
    api_key; they are kept out of repr(), argv, config files and logs.
    """

    base_url: str
    username: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    api_key: Optional[str] = field(default=None, repr=False)
    route_key: str = "errbot"
    plugin_prefix: str = "st2"
    timer_update: int = 60

    @property
    def api_url(self) -> str:
        return self.base_url.rstrip("/") + "/api/v1"

    @property
    def auth_url(self) -> str:
        return self.base_url.rstrip("/") + "/auth/v1"

    @property
    def stream_url(self) -> str:
        return self.base_url.rstrip("/") + "/stream/v1"

    def secret_env(self) -> Dict[str, str]:
        env: Dict[str, str] = {}
        if self.api_key:
            env[ENV_API_KEY] = self.api_key
        if self.username:
            env[ENV_USER] = self.username
            env[ENV_PASSWORD] = self.password or ""
        if not env:
            raise ValueError("St2Settings needs username+password or api_key")
        return env


def config_text(state_dir: Path, irc_host: str, irc_port: int, channel: str, nick: str,
                st2: Optional[St2Settings], plugin_path: Optional[Path],
                admins: tuple = DEFAULT_ADMINS) -> str:
    data = state_dir / "errbot-data"
    lines: List[str] = [
        '"""errbot config written by fleet_lab.chatops.bot (IRC backend, err-stackstorm)."""',
        "import logging",
        "import os",
        "",
        'BACKEND = "IRC"',
        f"BOT_DATA_DIR = {str(data)!r}",
        f"BOT_EXTRA_PLUGIN_DIR = {[str(plugin_path)] if plugin_path else None!r}",
        f"BOT_PLUGIN_INDEXES = {str(state_dir / 'errbot-plugin-index.json')!r}",
        f"CORE_PLUGINS = {CORE_PLUGINS!r}",
        "AUTOINSTALL_DEPS = False",
        f"BOT_LOG_FILE = {str(state_dir / LOG_NAME)!r}",
        "BOT_LOG_LEVEL = logging.INFO",
        "BOT_LOG_SENTRY = False",
        "BOT_IDENTITY = {",
        f"    'nickname': {nick!r},",
        f"    'username': {nick!r},",
        f"    'server': {irc_host!r},",
        f"    'port': {int(irc_port)},",
        "    'ssl': False,",
        "}",
        f"BOT_ADMINS = {tuple(admins)!r}",
        # errbot would PRIVMSG every admin the tracebacks of plugins failing to start.
        "BOT_ADMINS_NOTIFICATIONS = ()",
        f"CHATROOM_PRESENCE = ({channel!r},)",
        "CHATROOM_FN = 'fleet_rollout bot'",
        "BOT_PREFIX = '!'",
        f"BOT_ALT_PREFIXES = ({nick!r},)",
        "DIVERT_TO_PRIVATE = ()",
        "DIVERT_TO_THREAD = ()",
        "CHATROOM_RELAY = {}",
        "REVERSE_CHATROOM_RELAY = {}",
        # errbot waits 1 s per IRC line by default; ngircd here has penalties off.
        "IRC_CHANNEL_RATE = 0.05",
        "IRC_PRIVATE_RATE = 0.05",
        "IRC_RECONNECT_ON_KICK = 5",
        "IRC_RECONNECT_ON_DISCONNECT = 5",
        "COMPACT_OUTPUT = True",
        # An IRC line is at most 512 bytes with the sender's prefix; ngircd cuts longer ones
        # ("[CUT]"). errbot splits messages into parts of at most this many characters, with
        # fleet_lab.chatops.irc_split.split_message (whole lines, long ones broken at spaces).
        "MESSAGE_SIZE_LIMIT = 400",
        "import errbot.core as _errbot_core",
        "from typing import Iterator, List",
        inspect.getsource(irc_split._wrap),
        inspect.getsource(irc_split.split_message),
        "_errbot_core.split_string_after = split_message",
        # One message at a time: errbot's IRC backend shares one Markdown converter between
        # threads (fleet_lab.chatops.irc_serial).
        "from typing import Any",
        inspect.getsource(irc_serial.send_one_at_a_time),
        "send_one_at_a_time(_errbot_core.ErrBot)",
        "SUPPRESS_CMD_NOT_FOUND = False",
    ]
    if st2 is not None:
        lines += [
            "",
            "_api_auth = {}",
            f"if os.environ.get({ENV_API_KEY!r}):",
            f"    _api_auth['apikey'] = os.environ[{ENV_API_KEY!r}]",
            f"elif os.environ.get({ENV_USER!r}):",
            f"    _api_auth['user'] = {{'name': os.environ[{ENV_USER!r}],",
            f"                         'password': os.environ.get({ENV_PASSWORD!r}, '')}}",
            "STACKSTORM = {",
            f"    'api_url': {st2.api_url!r},",
            f"    'auth_url': {st2.auth_url!r},",
            f"    'stream_url': {st2.stream_url!r},",
            f"    'route_key': {st2.route_key!r},",
            f"    'plugin_prefix': {st2.plugin_prefix!r},",
            "    'verify_cert': False,",
            f"    'timer_update': {int(st2.timer_update)},",
            "    'api_auth': _api_auth,",
            "    'rbac_auth': {'standalone': {}},",
            "}",
        ]
    return "\n".join(lines) + "\n"


def write_config(state_dir: Path, venv: Path, irc_host: str, irc_port: int,
                 channel: str = DEFAULT_CHANNEL, nick: str = DEFAULT_NICK,
                 st2: Optional[St2Settings] = None, admins: tuple = DEFAULT_ADMINS) -> Path:
    """config.py + data dir for errbot in `state_dir`. Without `st2` the plugin is not loaded."""
    state_dir = Path(state_dir).resolve()
    (state_dir / "errbot-data").mkdir(parents=True, exist_ok=True)
    (state_dir / "errbot-home").mkdir(parents=True, exist_ok=True)
    (state_dir / "errbot-plugin-index.json").write_text("{}\n", encoding="ascii")
    plugin_path = plugin_dir(venv) if st2 is not None else None
    path = state_dir / CONFIG_NAME
    path.write_text(config_text(state_dir, irc_host, irc_port, channel, nick, st2, plugin_path,
                                admins), encoding="utf-8")
    path.chmod(0o600)
    return path


# -- the process ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BotProcess:
    pid: int
    nick: str
    channel: str
    irc_host: str
    irc_port: int
    state_dir: Path

    @property
    def log_path(self) -> Path:
        return self.state_dir / LOG_NAME

    @property
    def console_path(self) -> Path:
        return self.state_dir / CONSOLE_NAME

    def logs(self, lines: int = 60) -> str:
        return (procs.tail(self.log_path, lines) + "\n--- console ---\n"
                + procs.tail(self.console_path, lines))


def _bot_env(state_dir: Path, st2: Optional[St2Settings]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLEET_CHATOPS_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"HOME": str(state_dir / "errbot-home"), "PYTHONUNBUFFERED": "1",
                "LANG": env.get("LANG", "C.UTF-8"), "NO_PROXY": "127.0.0.1,localhost"})
    if st2 is not None:
        env.update(st2.secret_env())
    return env


def start(state_dir: Path, venv: Path, irc_host: str, irc_port: int,
          channel: str = DEFAULT_CHANNEL, nick: str = DEFAULT_NICK,
          st2: Optional[St2Settings] = None, admins: tuple = DEFAULT_ADMINS,
          timeout: float = 90.0) -> BotProcess:
    """Write errbot's config and start `errbot -c config.py` as our child in its own process
    group (logs: <state>/errbot.log and errbot.console.log, PID in <state>/errbot.pid).

    Returns once the bot has joined `channel` (seen on IRC by a probe client).
    """
    state_dir = Path(state_dir).resolve()
    config = write_config(state_dir, venv, irc_host, irc_port, channel, nick, st2, admins)
    pid = procs.spawn([str(Path(venv) / "bin" / "errbot"), "-c", str(config)],
                      state_dir / CONSOLE_NAME, env=_bot_env(state_dir, st2), cwd=state_dir)
    procs.write_pid(state_dir / PID_NAME, pid)
    bot = BotProcess(pid=pid, nick=nick, channel=channel, irc_host=irc_host, irc_port=irc_port,
                     state_dir=state_dir)
    try:
        wait_joined(bot, timeout)
    except BaseException:
        stop(pid)
        raise
    return bot


def wait_joined(bot: BotProcess, timeout: float = 90.0) -> None:
    """Wait until `bot.nick` is in the channel, as a probe IRC client sees it."""
    deadline = time.monotonic() + timeout
    probe_nick = f"probe{os.getpid() % 100000}"
    with IrcClient(bot.irc_host, bot.irc_port, probe_nick) as probe:
        if bot.nick in probe.join(bot.channel):
            probe.part(bot.channel)
            return
        since = 0
        while time.monotonic() < deadline:
            if not procs.alive(bot.pid):
                raise RuntimeError(f"errbot (pid {bot.pid}) exited before joining "
                                   f"{bot.channel}:\n{bot.logs()}")
            try:
                probe.wait_for_join(bot.channel, bot.nick, timeout=1.0, since=since)
                probe.part(bot.channel)
                return
            except TimeoutError:
                since = 0
            except IrcError as e:
                raise RuntimeError(f"IRC server went away while waiting for errbot: {e}") from e
    raise TimeoutError(f"errbot did not join {bot.channel} within {timeout}s:\n{bot.logs()}")


def stop(pid: Optional[int], timeout: float = 10.0) -> bool:
    """Stop errbot by PID: SIGTERM to its process group, SIGKILL after `timeout` s
    (err-stackstorm's stream thread can hold a clean shutdown until the next stream event)."""
    return procs.stop(pid, timeout)


def running_pid(state_dir: Path) -> Optional[int]:
    pid = procs.read_pid(Path(state_dir) / PID_NAME)
    return pid if procs.alive(pid) else None
