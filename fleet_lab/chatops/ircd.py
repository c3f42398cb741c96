"""The lab's IRC server: Debian's ngircd, on 127.0.0.1 only, one config per state dir.

    server = ircd.start(state_dir)          # free port, #fleet-rollout predefined
    ...                                     # server.port, server.pid
    ircd.stop(server.pid)
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from fleet_lab.chatops import procs

DEFAULT_CHANNEL = "#fleet-rollout"
SERVER_NAME = "irc.fleet-rollout.lab"
CONFIG_NAME = "ngircd.conf"
PID_NAME = "ngircd.pid"
LOG_NAME = "ngircd.log"


@dataclass(frozen=True)
class IrcServer:
    pid: int
    host: str
    port: int
    channels: Sequence[str]
    state_dir: Path

    @property
    def channel(self) -> str:
        return self.channels[0]

    @property
    def log_path(self) -> Path:
        return self.state_dir / LOG_NAME


def ngircd_binary() -> str:
    found = shutil.which("ngircd") or ("/usr/sbin/ngircd" if os.path.exists("/usr/sbin/ngircd")
                                       else None)
    if not found:
        raise FileNotFoundError(
            "ngircd not found: install Debian's package (apt-get install ngircd; it is listed "
            "in system-packages.txt)")
    return found


def config_text(state_dir: Path, port: int, channels: Sequence[str] = (DEFAULT_CHANNEL,),
                server_name: str = SERVER_NAME) -> str:
    """ngircd.conf: loopback only, no ident/DNS/PAM lookups, no flood penalties, channels
    predefined (persistent, so they exist before anyone joins)."""
    uid, gid = os.getuid(), os.getgid()
    lines = [
        "# Written by fleet_lab.chatops.ircd; the lab's IRC server (127.0.0.1 only).",
        "[Global]",
        f"    Name = {server_name}",
        "    Info = fleet_rollout ChatOps lab",
        "    AdminInfo1 = fleet_rollout virtual lab",
        "    AdminInfo2 = 127.0.0.1 only",
        "    AdminEMail = root@localhost",
        "    Listen = 127.0.0.1",
        f"    Ports = {port}",
        "    MotdPhrase = \"fleet_rollout lab IRC: ChatOps with errbot + err-stackstorm\"",
        f"    PidFile = {state_dir / 'ngircd-self.pid'}",
        # Started by root: stay this user instead of switching to 'irc' (the state dir may be
        # private to us). Ignored when not started by root.
        f"    ServerUID = {uid}",
        f"    ServerGID = {gid}",
        "[Limits]",
        "    MaxConnections = 64",
        "    MaxConnectionsIP = 0",
        "    MaxJoins = 0",
        "    MaxNickLength = 30",
        "    MaxPenaltyTime = 0",
        "    PingTimeout = 120",
        "    PongTimeout = 20",
        "    ConnectRetry = 60",
        "[Options]",
        "    DNS = no",
        # Never read the system's /etc/ngircd/ngircd.conf.d: an empty dir of our own.
        f"    IncludeDir = {state_dir / 'ngircd.conf.d'}",
        "    Ident = no",
        "    PAM = no",
        "    MorePrivacy = no",
        "    RequireAuthPing = no",
        "    NoticeBeforeRegistration = no",
        "    OperCanUseMode = yes",
    ]
    for name in channels:
        lines += [
            "[Channel]",
            f"    Name = {name}",
            "    Topic = fleet_rollout ChatOps: !help, !st2help, !st2 <command>",
            "    Modes = +Pnt",
        ]
    return "\n".join(lines) + "\n"


def write_config(state_dir: Path, port: int, channels: Sequence[str] = (DEFAULT_CHANNEL,),
                 server_name: str = SERVER_NAME) -> Path:
    state_dir = Path(state_dir).resolve()
    (state_dir / "ngircd.conf.d").mkdir(parents=True, exist_ok=True)
    path = state_dir / CONFIG_NAME
    path.write_text(config_text(state_dir, port, channels, server_name), encoding="utf-8")
    return path


def check_config(config: Path) -> None:
    """`ngircd --configtest`; raises with ngircd's words when it rejects the file."""
    out = subprocess.run([ngircd_binary(), "--configtest", "--config", str(config)],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    text = out.stdout + out.stderr
    if out.returncode != 0 or "Unknown variable" in text:
        raise RuntimeError(f"ngircd rejected {config}:\n{text}")


def start(state_dir: Path, port: Optional[int] = None,
          channels: Sequence[str] = (DEFAULT_CHANNEL,), timeout: float = 15.0) -> IrcServer:
    """Write the config and run `ngircd --nodaemon` as our child in its own process group.

    Returns once 127.0.0.1:port accepts connections. The PID also goes to <state>/ngircd.pid.
    """
    state_dir = Path(state_dir).resolve()
    port = port or procs.free_port()
    config = write_config(state_dir, port, channels)
    pid = procs.spawn([ngircd_binary(), "--nodaemon", "--passive", "--config", str(config)],
                      state_dir / LOG_NAME)
    procs.write_pid(state_dir / PID_NAME, pid)
    try:
        procs.wait_tcp(procs.LOOPBACK, port, timeout, pid=pid)
    except (RuntimeError, TimeoutError) as e:
        procs.stop(pid)
        raise RuntimeError(f"ngircd did not start: {e}\n{procs.tail(state_dir / LOG_NAME)}"
                           ) from e
    return IrcServer(pid=pid, host=procs.LOOPBACK, port=port, channels=tuple(channels),
                     state_dir=state_dir)


def stop(pid: Optional[int], timeout: float = 10.0) -> bool:
    """Stop ngircd by PID (SIGTERM, then SIGKILL). True when it is gone."""
    return procs.stop(pid, timeout)


def running_pid(state_dir: Path) -> Optional[int]:
    pid = procs.read_pid(Path(state_dir) / PID_NAME)
    return pid if procs.alive(pid) else None
