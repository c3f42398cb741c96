"""`fleet-rollout run <pack.action> key=value ...` (like `st2 run`)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from typing import Any, List

from fleet_runtime import home_client, render
from fleet_runtime.commands._common import fail, finish
from fleet_runtime.params import cast_cli_parameters
from fleet_runtime.runtime_errors import RuntimeErrorBase
from fleet_runtime.statuses import COMPLETED, SUCCEEDED


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an action (st2 run): fleet-rollout run pack.action key=value ...",
        description="Run an action of a loaded pack with st2's parameter casting. Prints the"
        " execution when it finishes (or waits for an inquiry / pause).",
    )
    parser.add_argument("action", help="action reference, e.g. fleet_rollout.rollout")
    parser.add_argument("parameters", nargs="*", help="key=value parameters")
    parser.add_argument("-a", "--async", dest="run_async", action="store_true",
                        help="do not wait: print the execution id (a background engine runs it)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop waiting after this many seconds (the execution continues)")
    finish(parser, main)


def spawn_background_engine(args: argparse.Namespace) -> int:
    """Start `fleet-rollout engine` detached (used by --async)."""
    argv = home_client.engine_argv(args)
    home = home_client.RuntimeHome(args.home)
    log = open(home.path / "engine.log", "a")
    proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=os.environ.copy())
    return proc.pid


def main(args: argparse.Namespace) -> int:
    try:
        with home_client.Session(args) as session:
            rt = session.rt
            action = rt.registry.action(args.action)
            params = cast_cli_parameters(action, args.parameters)
            response = session.submit("run", {"action": action.ref, "parameters": params})
            ex_id = response["id"]
            if args.run_async:
                if session.engine:
                    session.close()
                    spawn_background_engine(args)
                if args.json:
                    print(json.dumps({"id": ex_id}))
                else:
                    print(f"execution id: {ex_id}")
                    print(f'To get the results, execute:\n fleet-rollout execution get {ex_id}')
                return 0
            record = session.wait(ex_id, timeout=args.timeout)
            _print(rt, record, args.json)
            if record["status"] in COMPLETED and record["status"] != SUCCEEDED:
                return 1
            return 0
    except RuntimeErrorBase as e:
        return fail(e)


def _print(rt: Any, record: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(render.tree_json(rt.registry, rt.store, record), indent=2,
                         default=str))
        return
    print(render.execution_text(rt.registry, rt.store, record))
    hints: List[str] = []
    if record["status"] == "paused":
        pending = [r for r in _descendants(rt, record["id"]) if r["status"] == "pending"]
        for inquiry in pending:
            hints.append(f"waiting for inquiry {inquiry['id']}:"
                         f" fleet-rollout inquiry respond {inquiry['id']} -r '<json>'")
        if not pending:
            hints.append(f"paused: fleet-rollout execution resume {record['id']}")
    elif record["status"] == "pending":
        hints.append(f"waiting for a response: fleet-rollout inquiry respond {record['id']}"
                     " -r '<json>'")
    for hint in hints:
        print(hint)


def _descendants(rt: Any, ex_id: str) -> List[Any]:
    out = []
    for child in rt.store.find_executions("parent_id=?", (ex_id,)):
        out.append(child)
        out.extend(_descendants(rt, child["id"]))
    return out
