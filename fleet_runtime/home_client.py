"""What the CLI commands use: open the runtime, become the engine or talk to the one running.

Only one process drives a runtime home at a time (it holds `runtime.lock`). A command that
changes state (run, pause, resume, cancel, respond, chat) either becomes the engine itself,
recovering whatever a killed engine left behind, and runs in the foreground until its
execution finishes or waits for a person; or, when another process is the engine, hands its
request to it through the database and follows the execution's status from there.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from fleet_runtime.home import RuntimeHome
from fleet_runtime.paths import REPO_ROOT
from fleet_runtime.statuses import COMPLETED, PAUSED, PENDING

if TYPE_CHECKING:  # imported where a runtime is opened: the commands' options need no engine
    from fleet_runtime.engine import Runtime


def default_pack_dir() -> Optional[str]:
    """The pack the runtime runs by default: the repository root (the fleet_rollout pack)."""
    if (REPO_ROOT / "pack.yaml").is_file():
        return str(REPO_ROOT)
    cwd = Path.cwd()
    if (cwd / "pack.yaml").is_file():
        return str(cwd)
    return None


def add_common_options(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    parser.add_argument(
        "--home",
        default=None,
        help="runtime home (default: $FLEET_ROLLOUT_HOME or ~/.fleet-rollout)",
    )
    parser.add_argument(
        "--pack",
        dest="packs",
        action="append",
        default=[],
        metavar="DIR",
        help="load one more pack directory (repeatable; also $FLEET_ROLLOUT_PACKS)",
    )
    parser.add_argument(
        "--no-default-pack",
        action="store_true",
        help="do not load the repository's own pack (fleet_rollout)",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON")


def pack_paths(args: argparse.Namespace, home: RuntimeHome) -> List[str]:
    paths: List[str] = []
    if not getattr(args, "no_default_pack", False):
        default = default_pack_dir()
        if default:
            paths.append(default)
    for extra in home.extra_packs + list(getattr(args, "packs", []) or []):
        resolved = str(Path(extra).expanduser().resolve())
        if resolved not in paths:
            paths.append(resolved)
    return paths


def engine_argv(args: argparse.Namespace, forever: bool = False) -> List[str]:
    """The `fleet-rollout engine` command for the same home and packs as `args`."""
    argv = [sys.executable, "-m", "fleet_runtime.cli", "engine"]
    if forever:
        argv.append("--forever")
    if getattr(args, "home", None):
        argv += ["--home", args.home]
    for pack in getattr(args, "packs", None) or []:
        argv += ["--pack", pack]
    if getattr(args, "no_default_pack", False):
        argv.append("--no-default-pack")
    return argv


def open_runtime(args: argparse.Namespace) -> Runtime:
    from fleet_runtime.engine import Runtime

    home = RuntimeHome(getattr(args, "home", None))
    return Runtime(home, pack_paths(args, home))


class Session:
    """A runtime plus the engine role when available."""

    def __init__(self, args: argparse.Namespace, engine: bool = True) -> None:
        self.rt = open_runtime(args)
        self.engine = self.rt.try_become_engine() if engine else False

    def close(self) -> None:
        self.rt.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, op: str, payload: Dict[str, Any]) -> Any:
        return self.rt.submit(op, payload)

    def wait(
        self,
        ex_id: str,
        done: Optional[Callable[[Dict[str, Any]], bool]] = None,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Drive (or follow) the execution until it is finished or waits for a person."""
        store = self.rt.store

        def settled() -> bool:
            record = store.get_execution(ex_id)
            if record is None:
                return True
            if done is not None:
                return done(record)
            return record["status"] in COMPLETED or record["status"] in (PAUSED, PENDING)

        if self.engine:
            self.rt.run(until=settled, timeout=timeout)
        else:
            deadline = time.time() + timeout if timeout else None
            while not settled():
                if deadline and time.time() > deadline:
                    break
                if not self.rt.engine_alive():
                    # The engine went away: take over (this recovers the execution).
                    if self.rt.try_become_engine():
                        self.engine = True
                        self.rt.run(until=settled, timeout=timeout)
                        break
                time.sleep(0.1)
        record = store.get_execution(ex_id)
        assert record is not None
        return record


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
