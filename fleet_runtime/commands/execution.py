"""`fleet-rollout execution list|get|cancel|pause|resume` (like `st2 execution ...`)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from fleet_runtime import home_client, render
from fleet_runtime.commands._common import command_group, fail, finish
from fleet_runtime.runtime_errors import NotFoundError, RuntimeErrorBase
from fleet_runtime.statuses import COMPLETED, PAUSED, PENDING


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "execution", "list, inspect and control executions",
                        "execution_command")

    p = sub.add_parser("list", help="list executions (newest last)")
    p.add_argument("-n", "--last", type=int, default=50, help="how many (default 50)")
    p.add_argument("--action", help="only this action")
    p.add_argument("--status", help="only this status")
    p.add_argument("--all", action="store_true", help="include workflow task executions")
    finish(p, cmd_list)

    p = sub.add_parser("get", help="an execution with its task tree, statuses and timings")
    p.add_argument("id")
    finish(p, cmd_get)

    for name, helptext in (
        ("cancel", "cancel an execution (workflows: running tasks finish, nothing new starts)"),
        ("pause", "pause a workflow (running tasks finish first)"),
        ("resume", "resume a paused workflow, or pick up one a killed runtime left behind"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("id")
        p.add_argument("--no-wait", action="store_true",
                       help="do not drive the execution afterwards")
        finish(p, cmd_control, op=name)


def cmd_list(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
    except RuntimeErrorBase as e:
        return fail(e)
    where, values = ["1=1"], []
    if not args.all:
        where.append("parent_id IS NULL")
    if args.action:
        where.append("action=?")
        values.append(args.action)
    if args.status:
        where.append("status=?")
        values.append(args.status)
    rows = rt.store.find_executions(" AND ".join(where), values,
                                    order="created_ts DESC, rowid DESC", limit=args.last)
    rows.reverse()
    if args.json:
        print(json.dumps([render.public(rt.registry, r) for r in rows], indent=2, default=str))
        return 0
    print(render.table(
        ["id", "action", "context.user", "status", "start", "end"],
        [[r["id"], r["action"], (r.get("context") or {}).get("user"), render.status_text(r),
          render.ts(r.get("start_ts") or r.get("created_ts")), render.ts(r.get("end_ts"))]
         for r in rows]))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
        full = rt.store.resolve_execution_id(args.id)
        record = rt.store.get_execution(full) if full else None
        if record is None:
            raise NotFoundError(f'Execution "{args.id}" not found.')
    except RuntimeErrorBase as e:
        return fail(e)
    if args.json:
        print(json.dumps(render.tree_json(rt.registry, rt.store, record), indent=2, default=str))
    else:
        print(render.execution_text(rt.registry, rt.store, record))
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    try:
        with home_client.Session(args) as session:
            before = session.rt.store.get_execution(
                session.rt.store.resolve_execution_id(args.id) or args.id)
            log_len = len(before["log"]) if before else 0
            response = session.submit(args.op, {"id": args.id, "requester": session.rt.user})
            ex_id = response["id"]
            if args.op == "resume" and before and before["status"] in (PAUSED, "pausing"):
                # Another process runs the engine: first see the resume take effect.
                session.wait(ex_id, done=lambda r: len(r["log"]) > log_len, timeout=30)
            if args.no_wait and not session.engine:
                record = session.rt.store.get_execution(ex_id)
            elif args.op == "pause":
                record = session.wait(ex_id, done=lambda r: r["status"] in COMPLETED + (PAUSED,),
                                      timeout=None if not args.no_wait else 0.5)
            else:
                record = session.wait(ex_id, timeout=None if not args.no_wait else 0.5)
            assert record is not None
            if args.json:
                print(json.dumps(render.tree_json(session.rt.registry, session.rt.store, record),
                                 indent=2, default=str))
            else:
                print(render.execution_text(session.rt.registry, session.rt.store, record))
                if record["status"] in (PAUSED, PENDING):
                    print(f"{record['id']} is {record['status']}")
            return 0
    except RuntimeErrorBase as e:
        return fail(e)
