"""`fleet-rollout` command line: the runtime's sub-commands (fleet_runtime.commands) and those
that live with what they drive, found through the `fleet_rollout.commands` entry points (the
lab's `lab` and `bmc-sim`, the pack library's `judge`): the runtime imports neither."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from importlib.metadata import entry_points
from typing import Any, Callable, Dict, List, Optional

from fleet_runtime import commands, home

# Commands that open a runtime home (and may write to it or start the engine).
RUNTIME_COMMANDS = ("api", "chat", "engine", "execution", "inquiry", "key", "pack", "run",
                    "runner")
PLUGIN_GROUP = "fleet_rollout.commands"


def _registrars() -> Dict[str, Callable[[], Callable[[Any], None]]]:
    """Command module name -> a loader of its `register(subparsers)`."""
    found: Dict[str, Callable[[], Callable[[Any], None]]] = {}
    for info in pkgutil.iter_modules(commands.__path__):
        if not info.name.startswith("_"):
            found[info.name] = (lambda name=info.name: getattr(importlib.import_module(
                f"{commands.__name__}.{name}"), "register", None))
    for point in entry_points(group=PLUGIN_GROUP):
        found.setdefault(point.name, point.load)
    return found


def _command_modules(argv: Optional[List[str]], names: List[str]) -> List[str]:
    """The command modules to load: only the named command's when the first argument names one
    (`key get` need not import the judge's scipy or the lab), else all of them (help, errors)."""
    first = next((a for a in (argv or []) if not a.startswith("-")), None)
    wanted = first.replace("-", "_") if first else None
    if wanted in names and (argv or [])[0] == first:
        return [wanted]
    return sorted(names)


def build_parser(argv: Optional[List[str]] = None) -> argparse.ArgumentParser:
    """The parser; given `argv`, with only the sub-command it names (see _command_modules)."""
    parser = argparse.ArgumentParser(
        prog="fleet-rollout",
        description="Staged BIOS/kernel rollouts: embedded StackStorm runtime, lab and tools.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    registrars = _registrars()
    for name in _command_modules(argv, list(registrars)):
        register = registrars[name]()
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    if args.command in RUNTIME_COMMANDS:
        home.private_umask()  # the runtime home and what the engine's actions write: private
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
