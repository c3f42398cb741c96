"""`python -m fleet_lab.chatops up|down|say --state-dir D`: the lab's ChatOps by hand.

    up    start ngircd + errbot (err-stackstorm against --st2-url; bot credentials from the
          environment: FLEET_ST2_USER + FLEET_ST2_PASSWORD, or FLEET_ST2_API_KEY), print JSON
    down  stop both by the PIDs in the state dir
    say   join the channel as --nick, say a line, print what the channel says for --wait s
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

from fleet_lab.chatops import bot, ircd
from fleet_lab.chatops.irc_client import IrcClient

STATE_FILE = "chatops.json"


def _up(args: argparse.Namespace) -> int:
    state = Path(args.state_dir).resolve()
    st2: Optional[bot.St2Settings] = None
    if args.st2_url:
        st2 = bot.St2Settings(args.st2_url, username=os.environ.get("FLEET_ST2_USER"),
                              password=os.environ.get("FLEET_ST2_PASSWORD"),
                              api_key=os.environ.get("FLEET_ST2_API_KEY"),
                              route_key=args.route_key)
        st2.secret_env()  # fail early without credentials
    venv = bot.ensure_venv(Path(args.venv) if args.venv else None)
    server = ircd.start(state / "ircd", port=args.irc_port or None, channels=(args.channel,))
    try:
        b = bot.start(state / "bot", venv, server.host, server.port, args.channel, args.nick,
                      st2=st2)
    except BaseException:
        ircd.stop(server.pid)
        raise
    info = {"irc_host": server.host, "irc_port": server.port, "channel": args.channel,
            "ngircd_pid": server.pid, "bot_nick": b.nick, "errbot_pid": b.pid,
            "errbot_log": str(b.log_path), "st2_url": args.st2_url or None}
    (state / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(info))
    return 0


def _down(args: argparse.Namespace) -> int:
    state = Path(args.state_dir).resolve()
    ok = bot.stop(bot.running_pid(state / "bot")) & ircd.stop(ircd.running_pid(state / "ircd"))
    print("chatops down" if ok else "chatops: something did not stop")
    return 0 if ok else 1


def _say(args: argparse.Namespace) -> int:
    info = json.loads((Path(args.state_dir) / STATE_FILE).read_text(encoding="utf-8"))
    channel = info["channel"]
    with IrcClient(info["irc_host"], info["irc_port"], args.nick) as person:
        person.join(channel)
        mark = person.say(channel, args.line)
        for line in person.collect(lambda ln: ln.command == "PRIVMSG" and not ln.own,
                                   quiet=args.quiet, timeout=args.wait, since=mark):
            print(f"<{line.nick}> {line.plain}" if line.target == channel
                  else f"*{line.nick}* {line.plain}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet_lab.chatops")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--state-dir", required=True)
    up.add_argument("--st2-url", default="", help="e.g. http://127.0.0.1:9101 (one port)")
    up.add_argument("--route-key", default="errbot")
    up.add_argument("--channel", default=ircd.DEFAULT_CHANNEL)
    up.add_argument("--nick", default=bot.DEFAULT_NICK)
    up.add_argument("--irc-port", type=int, default=0)
    up.add_argument("--venv", default="")
    down = sub.add_parser("down")
    down.add_argument("--state-dir", required=True)
    say = sub.add_parser("say")
    say.add_argument("--state-dir", required=True)
    say.add_argument("--nick", default="sre")
    say.add_argument("--wait", type=float, default=30.0)
    say.add_argument("--quiet", type=float, default=3.0)
    say.add_argument("line")
    args = parser.parse_args(argv)
    return {"up": _up, "down": _down, "say": _say}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
