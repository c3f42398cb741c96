"""`fleet-rollout key list|get|set|delete` (like `st2 key ...`): the runtime's datastore."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fleet_runtime import render
from fleet_runtime.commands._common import command_group, fail
from fleet_runtime.datastore import Datastore, DatastoreError
from fleet_runtime.home import RuntimeHome


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "key", "datastore keys (st2kv)", "key_command")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--scope", choices=["system", "user"], default="system")
        p.add_argument("--user", default=None, help="user of the user scope")
        p.add_argument("--home", default=None)
        p.add_argument("--json", action="store_true")

    p = sub.add_parser("list", help="list keys")
    p.add_argument("--prefix", default=None)
    p.add_argument("--decrypt", action="store_true")
    common(p)
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("get", help="get a key")
    p.add_argument("name")
    p.add_argument("--decrypt", action="store_true")
    common(p)
    p.set_defaults(func=cmd_get)
    p = sub.add_parser("set", help="set a key")
    p.add_argument("name")
    p.add_argument("value")
    p.add_argument("--encrypt", action="store_true", help="store encrypted (a secret)")
    p.add_argument("--ttl", type=float, default=None, help="expire after N seconds")
    common(p)
    p.set_defaults(func=cmd_set)
    p = sub.add_parser("delete", help="delete a key")
    p.add_argument("name")
    common(p)
    p.set_defaults(func=cmd_delete)


def _store(args: argparse.Namespace) -> Any:
    home = RuntimeHome(args.home)
    return Datastore(str(home.db_path), home.key_path), (args.user or home.user)


def cmd_list(args: argparse.Namespace) -> int:
    ds, user = _store(args)
    items = ds.list(prefix=args.prefix, scope=args.scope, user=user, decrypt=args.decrypt)
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    print(render.table(["name", "value", "secret", "scope", "expire"],
                       [[i["name"], i["value"], i["secret"], i["scope"],
                         render.ts(i["expire_timestamp"])] for i in items]))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    ds, user = _store(args)
    try:
        value = ds.get(args.name, scope=args.scope, user=user, decrypt=args.decrypt)
    except DatastoreError as e:
        return fail(e)
    if value is None:
        print(f'ERROR: Key "{args.name}" not found in the {args.scope} scope.', file=sys.stderr)
        return 1
    print(json.dumps({"name": args.name, "value": value}) if args.json else value)
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    ds, user = _store(args)
    ds.set(args.name, args.value, scope=args.scope, user=user, secret=args.encrypt,
           ttl=args.ttl)
    print(f"{args.name} set in the {args.scope} scope" + (" (encrypted)" if args.encrypt else ""))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    ds, user = _store(args)
    if not ds.delete(args.name, scope=args.scope, user=user):
        print(f'ERROR: Key "{args.name}" not found.', file=sys.stderr)
        return 1
    print(f"{args.name} deleted")
    return 0


