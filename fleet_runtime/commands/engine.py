"""`fleet-rollout engine`: run the runtime's engine in the foreground.

Recovers what a killed runtime left unfinished, then processes work: executions started with
`run -a`, requests from other `fleet-rollout` commands, delays, inquiry timeouts. By default it
exits when nothing is in flight; `--forever` keeps serving (Ctrl-C stops it).
"""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, NoReturn

from fleet_runtime import home_client
from fleet_runtime.commands._common import fail, finish
from fleet_runtime.runtime_errors import RuntimeErrorBase


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("engine", help="run the engine (recovery, async runs)")
    parser.add_argument("--forever", action="store_true", help="keep serving until Ctrl-C")
    finish(parser, main, json_flag=False)


def _interrupt(*_: Any) -> NoReturn:
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    # SIGTERM (`fleet-rollout api serve` stopping its engine, systemd, kill) stops the engine
    # as Ctrl-C does: the lock is released and a later engine recovers what was in flight.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with home_client.Session(args) as session:
            if not session.engine:
                pid = session.rt.engine_pid()
                print(f"another engine (pid {pid}) is running for this home", file=sys.stderr)
                return 1
            session.rt.run(forever=args.forever)
            return 0
    except RuntimeErrorBase as e:
        return fail(e)
