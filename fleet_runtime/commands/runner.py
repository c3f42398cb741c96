"""`fleet-rollout runner list|kill`: the engine's action runner processes (the `runners`
setting, 2 or more; docs/runtime.md, "Action runners").

`list` shows each runner's index, hostname, pid, whether it is alive and the executions
running on it. `kill K` SIGKILLs runner K's process and every process below it, by PID, as an
st2 action runner machine dies: its running executions stay `running`, new executions go to
the other runners, and it stays dead until the engine starts again. Neither opens the packs
nor becomes the engine: they read the home's runner directories and database.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from fleet_runtime import render
from fleet_runtime.commands._common import command_group, fail, finish
from fleet_runtime.runtime_errors import RuntimeErrorBase


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "runner", "the engine's action runner processes",
                        "runner_command")
    p = sub.add_parser("list", help="runners: index, pid, alive, running executions")
    finish(p, cmd_list)
    p = sub.add_parser("kill", help="SIGKILL runner K and everything it started")
    p.add_argument("index", type=int, metavar="K", help="the runner's index (1-based)")
    finish(p, cmd_kill)


def _home_and_store(args: argparse.Namespace) -> Any:
    from fleet_runtime.database import Store
    from fleet_runtime.home import RuntimeHome

    home = RuntimeHome(args.home)
    return home, Store(str(home.db_path))


def cmd_list(args: argparse.Namespace) -> int:
    from fleet_runtime.action_runners import runner_status

    try:
        home, store = _home_and_store(args)
        if home.runners < 2:
            rows = []
        else:
            rows = runner_status(home, store)
    except RuntimeErrorBase as e:
        return fail(e)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("runners: 1: actions run as children of the engine process")
        return 0
    print(render.table(
        ["index", "hostname", "pid", "alive", "running", "executions"],
        [[r["index"], r["hostname"], r["pid"], "yes" if r["alive"] else "no", r["running"],
          " ".join(r["executions"])] for r in rows]))
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    from fleet_runtime.action_runners import kill_runner
    from fleet_runtime.home import RuntimeHome

    try:
        killed = kill_runner(RuntimeHome(args.home), args.index)
    except RuntimeErrorBase as e:
        return fail(e)
    if args.json:
        print(json.dumps(killed, indent=2))
    else:
        print(f"killed {killed['hostname']} (pid {killed['pid']}) and its processes:"
              f" {' '.join(str(p) for p in killed['killed'])}")
    return 0
