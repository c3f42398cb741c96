"""`fleet-rollout pack validate|show|config`: the loaded packs, as st2 would register them."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

from fleet_runtime import hazards, home_client, render
from fleet_runtime.commands._common import command_group, fail, finish
from fleet_runtime.runtime_errors import RuntimeErrorBase


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "pack", "validate and show the loaded packs", "pack_command")
    p = sub.add_parser("validate", help="load every pack; report the first metadata error, or"
                       " every workflow st2 would fail to load and every known st2 hazard")
    finish(p, cmd_validate)
    p = sub.add_parser("show", help="actions, aliases, rules, policies and trigger types")
    finish(p, cmd_show)
    p = sub.add_parser("config", help="a pack's effective config (secrets masked)")
    p.add_argument("pack")
    finish(p, cmd_config)


def problems(registry: Any) -> List[str]:
    """What registration lets through but fails or hangs on StackStorm: workflows orquesta
    cannot load (st2 registers them, every run fails) and the hazards of fleet_runtime.hazards."""
    found = [f"{e} (st2 registers the action; every run of it fails with this)"
             for _, e in sorted(registry.workflow_load_errors.items())]
    found += [str(h) for h in hazards.inquiry_hazards(registry)]
    return found


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
    except RuntimeErrorBase as e:
        return fail(e)
    reg = rt.registry
    for ref, pack in sorted(reg.packs.items()):
        where = pack.path or "built-in"
        print(f"{ref}: {len(pack.actions)} actions, {len(pack.aliases)} aliases,"
              f" {len(pack.rules)} rules, {len(pack.policies)} policies,"
              f" {len(pack.trigger_types)} trigger types ({where})")
    errors = problems(reg)
    for error in errors:
        print(f"ERROR: {error}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} error(s)")
        return 2
    print("OK")
    return 0


def _summary(rt: Any) -> Dict[str, List[Dict[str, Any]]]:
    reg = rt.registry
    return {
        "actions": [{"ref": a.ref, "runner": a.runner_type, "description": a.description}
                    for a in sorted(reg.actions.values(), key=lambda a: a.ref)],
        "aliases": [{"ref": a.ref, "action": a.action_ref, "formats": a.formats}
                    for a in reg.aliases],
        "rules": [{"ref": r.ref, "trigger": r.trigger_type, "action": r.action_ref,
                   "enabled": r.enabled} for r in reg.rules],
        "policies": [{"ref": p.ref, "type": p.policy_type, "resource": p.resource_ref,
                      "parameters": p.parameters} for p in reg.policies],
        "trigger_types": [{"ref": t.ref, "description": t.description}
                          for t in reg.trigger_types.values()],
    }


def cmd_show(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
    except RuntimeErrorBase as e:
        return fail(e)
    data = _summary(rt)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(render.table(["action", "runner", "description"],
                       [[a["ref"], a["runner"], a["description"][:60]] for a in data["actions"]]))
    print(render.table(["alias", "action", "formats"],
                       [[a["ref"], a["action"], json.dumps(a["formats"])[:70]]
                        for a in data["aliases"]]))
    print(render.table(["rule", "trigger", "action", "enabled"],
                       [[r["ref"], r["trigger"], r["action"], r["enabled"]]
                        for r in data["rules"]]))
    print(render.table(["policy", "type", "resource"],
                       [[p["ref"], p["type"], p["resource"]] for p in data["policies"]]))
    return 0


def _is_secret(path: List[str], secrets: List[str]) -> bool:
    for secret in secrets:
        parts = secret.split(".")
        if len(parts) == len(path) and all(p in ("*", q) for p, q in zip(parts, path)):
            return True
    return False


def _mask(config: Any, secrets: List[str], path: Any = ()) -> Any:
    if isinstance(config, dict):
        return {
            key: "********" if _is_secret([*path, key], secrets)
            else _mask(value, secrets, (*path, key))
            for key, value in config.items()
        }
    return config


def cmd_config(args: argparse.Namespace) -> int:
    try:
        rt = home_client.open_runtime(args)
        config = rt.pack_config(args.pack)
    except RuntimeErrorBase as e:
        return fail(e)
    masked = _mask(config, rt._config_secrets.get(args.pack, []))
    print(json.dumps(masked, indent=2) if args.json else render.dump_yaml(masked, indent=0))
    return 0
