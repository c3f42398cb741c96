"""`fleet-rollout` command line: discovers the sub-commands in fleet_runtime.commands."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import List, Optional

from fleet_runtime import commands, home

# Commands that open a runtime home (and may write to it or start the engine).
RUNTIME_COMMANDS = ("api", "chat", "engine", "execution", "inquiry", "key", "pack", "run")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet-rollout",
        description="Staged BIOS/kernel rollouts: embedded StackStorm runtime, lab and tools.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
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
