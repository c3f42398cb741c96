"""`fleet-rollout inquiry list|get|respond` (like `st2 inquiry ...`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fleet_runtime import home_client, render
from fleet_runtime.commands._common import command_group, fail, finish
from fleet_runtime.runtime_errors import InquiryError, RuntimeErrorBase


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "inquiry", "list, show and answer inquiries (core.ask)",
                        "inquiry_command")

    p = sub.add_parser("list", help="pending inquiries")
    finish(p, cmd_list)

    p = sub.add_parser("get", help="an inquiry: schema, route, users, roles, ttl")
    p.add_argument("id")
    finish(p, cmd_get)

    p = sub.add_parser("respond", help="answer an inquiry; the workflow resumes")
    p.add_argument("id")
    p.add_argument("-r", "--response", required=True, help="the response as JSON")
    p.add_argument("--no-wait", action="store_true",
                   help="do not drive the resumed workflow afterwards")
    finish(p, cmd_respond)


def _inquiry_view(record: Any) -> Any:
    result = record.get("result") or {}
    return {
        "id": record["id"],
        "status": record["status"],
        "route": result.get("route"),
        "ttl": result.get("ttl"),
        "users": result.get("users") or [],
        "roles": result.get("roles") or [],
        "schema": result.get("schema"),
        "parent": record.get("parent_id"),
        "root": record.get("root_id"),
        "start_timestamp": render.ts(record.get("start_ts")),
        "response": result.get("response"),
    }


def cmd_list(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
    except RuntimeErrorBase as e:
        return fail(e)
    rows = rt.store.find_executions("runner='inquirer' AND status='pending'")
    views = [_inquiry_view(r) for r in rows]
    if args.json:
        print(json.dumps(views, indent=2, default=str))
        return 0
    print(render.table(["id", "route", "ttl", "users", "roles", "parent", "started"],
                       [[v["id"], v["route"], v["ttl"], ",".join(v["users"]),
                         ",".join(v["roles"]), v["parent"], v["start_timestamp"]]
                        for v in views]))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
        record = rt.inquiry(args.id)
    except RuntimeErrorBase as e:
        return fail(e)
    view = _inquiry_view(record)
    if args.json:
        print(json.dumps(view, indent=2, default=str))
    else:
        print(render.dump_yaml(view, indent=0))
    return 0


def cmd_respond(args: argparse.Namespace) -> int:
    try:
        response = json.loads(args.response)
    except ValueError as e:
        print(f"ERROR: --response is not valid JSON: {e}", file=sys.stderr)
        return 2
    try:
        with home_client.Session(args) as session:
            rt = session.rt
            record = rt.inquiry(args.id)
            result = session.submit("respond", {"id": record["id"], "response": response,
                                                "requester": rt.user})
            print(f"Response accepted for inquiry {record['id']}.")
            if not args.json:
                print(render.dump_yaml({"response": result["response"]}, indent=0))
            if args.no_wait:
                return 0
            session.wait(record["id"], done=lambda r: r["status"] != "pending", timeout=30)
            root = record["root_id"]
            final = session.wait(root)
            if args.json:
                print(json.dumps(render.tree_json(rt.registry, rt.store, final), indent=2,
                                 default=str))
            else:
                print(render.execution_text(rt.registry, rt.store, final))
            return 0
    except InquiryError as e:
        return fail(e, 1)
    except RuntimeErrorBase as e:
        return fail(e)
