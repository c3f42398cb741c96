"""Helpers shared by the sub-command modules (no `register()`: the CLI registers nothing here)."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable


def command_group(subparsers: Any, name: str, help: str, dest: str) -> Any:
    """A command with sub-commands (`fleet-rollout NAME COMMAND`); without one it prints its
    help and exits 2. Returns the sub-parsers to add the sub-commands to."""
    parser = subparsers.add_parser(name, help=help)
    sub = parser.add_subparsers(dest=dest, metavar="COMMAND")
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])
    return sub


def finish(
    parser: argparse.ArgumentParser,
    func: Callable[[argparse.Namespace], int],
    json_flag: bool = True,
    **defaults: Any,
) -> None:
    """Add the common options (--home, --pack, --no-default-pack, --json) after the command's
    own arguments and set the function that runs it."""
    from fleet_runtime import home_client  # the engine's client: only for commands that run it

    home_client.add_common_options(parser, json_flag=json_flag)
    parser.set_defaults(func=func, **defaults)


def fail(e: Exception, code: int = 2) -> int:
    """Print the error the way every command does; the exit code to return."""
    print(f"ERROR: {e}", file=sys.stderr)
    return code
