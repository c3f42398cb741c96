"""`fleet-rollout api serve|user|env`: StackStorm's API on this machine, for the `st2` CLI and
chat bots.

`serve` listens on 127.0.0.1 (st2's API port 9101 by default; `--port 0` picks a free one),
with the engine as a second process (started here when none runs for the home, stopped with
this one). `user NAME` adds or changes a user of the flat users file (password from stdin).
`roles DIR` installs role files (the pack's `rbac/`); `user NAME --role R` also assigns RBAC
roles (fleet_runtime/rbac.py). `apikey NAME` creates an API key acting as user NAME (st2's
`st2 apikey create -k`) and prints it once. `env` prints the ST2_* variables that point the
st2 CLI at the running API.
"""
from __future__ import annotations

import argparse
import getpass
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from fleet_runtime.commands._common import command_group, fail, finish
from fleet_runtime.home import RuntimeHome
from fleet_runtime.runtime_errors import RuntimeErrorBase
from fleet_runtime.st2api import users
from fleet_runtime.st2api.users import USERS_FILE

# `api user` (the lab's chat stack and the API tests add users with it) opens no runtime: the
# engine and the API server (orquesta, networkx, the pack registry: over a CPU-second a process)
# are imported by the commands that run them.

DEFAULT_PORT = 9101


def register(subparsers: Any) -> None:
    sub = command_group(subparsers, "api", "StackStorm's API for the st2 CLI and chat bots",
                        "api_command")
    serve = sub.add_parser("serve", help="serve the st2 API (and run the engine)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1, loopback only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"port (default {DEFAULT_PORT}; 0: a free one, see `api env`)")
    serve.add_argument("--users-file", default=None,
                       help=f"flat users file (default <home>/{USERS_FILE}, mode 0600)")
    serve.add_argument("--admin", action="append", default=[],
                       help="user with st2's admin rights (decrypt, run as others); repeatable")
    serve.add_argument("--no-engine", action="store_true",
                       help="do not start an engine (one runs already or will)")
    finish(serve, cmd_serve, json_flag=False)
    user = sub.add_parser("user", help="add a user or change a password (stdin)")
    user.add_argument("name")
    user.add_argument("--users-file", default=None)
    user.add_argument("--role", action="append", default=None,
                      help="RBAC role to assign (rbac/assignments/NAME.yaml, st2's format);"
                           " repeatable; replaces the user's roles")
    finish(user, cmd_user, json_flag=False)
    roles = sub.add_parser("roles", help="install RBAC role definitions (st2's roles/*.yaml)")
    roles.add_argument("directory", help="a directory holding roles/*.yaml, as the pack's rbac/")
    finish(roles, cmd_roles, json_flag=False)
    apikey = sub.add_parser("apikey", help="create an API key acting as a user; printed once")
    apikey.add_argument("name", help="a user of the users file")
    apikey.add_argument("--users-file", default=None)
    finish(apikey, cmd_apikey, json_flag=True)
    env = sub.add_parser("env", help="print the ST2_* variables for the st2 CLI")
    finish(env, cmd_env, json_flag=True)


def _users_path(args: argparse.Namespace, home: RuntimeHome) -> Path:
    return Path(args.users_file) if args.users_file else home.path / USERS_FILE


def cmd_user(args: argparse.Namespace) -> int:
    home = RuntimeHome(args.home)
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    try:
        users.set_password(_users_path(args, home), args.name, password)
    except users.UsersFileError as e:
        return fail(e)
    print(f"user {args.name} set in {_users_path(args, home)}")
    if args.role is not None:
        from fleet_runtime import rbac

        path = rbac.write_assignment(home.rbac_path, args.name, args.role)
        try:
            rbac.load(home.rbac_path)
        except rbac.RbacError as e:
            path.unlink()
            return fail(e)
        print(f"roles of {args.name}: {', '.join(args.role) or 'none'} ({path})")
    return 0


def cmd_apikey(args: argparse.Namespace) -> int:
    from fleet_runtime.st2api.credentials import Credentials

    home = RuntimeHome(args.home)
    try:
        known = users.load(_users_path(args, home))
    except users.UsersFileError as e:
        return fail(e)
    if args.name not in known:
        return fail(f"{args.name} is not a user of {_users_path(args, home)} (api user NAME)")
    made = Credentials(str(home.db_path), home.api_key_ttl_days * 86400.0).create_api_key(
        args.name, {"created_by": "fleet-rollout api apikey"})
    if args.json:
        import json

        print(json.dumps({"id": made["id"], "user": made["user"], "key": made["key"],
                          "expires_at": made.get("expires_at")}))
    else:
        print(made["key"])
    return 0


def cmd_roles(args: argparse.Namespace) -> int:
    """Copy role files into the home's rbac/roles (st2: into /opt/stackstorm/rbac/roles, then
    st2-apply-rbac-definitions), refusing the lot when one of them is not valid."""
    import shutil

    from fleet_runtime import rbac

    home = RuntimeHome(args.home)
    source = Path(args.directory) / "roles"
    files = sorted(source.glob("*.yaml"))
    if not files:
        return fail(f"no role files in {source} (roles/*.yaml)")
    target = home.rbac_path / "roles"
    target.mkdir(parents=True, exist_ok=True)
    try:
        rbac.load(Path(args.directory))  # every file valid before any is copied
    except rbac.RbacError as e:
        return fail(e)
    for path in files:
        shutil.copyfile(path, target / path.name)
        print(f"role file {path.name} installed in {target}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from fleet_runtime.st2api.app import read_state

    state = read_state(RuntimeHome(args.home).path)
    if state is None:
        print("ERROR: no st2 API is running for this home (fleet-rollout api serve)",
              file=sys.stderr)
        return 1
    keys = ["ST2_BASE_URL", "ST2_AUTH_URL", "ST2_API_URL", "ST2_STREAM_URL"]
    if args.json:
        import json

        print(json.dumps({k: state[k] for k in keys}, indent=2))
    else:
        for key in keys:
            print(f"export {key}={state[key]}")
    return 0


def _start_engine(args: argparse.Namespace, rt: Any) -> Optional[subprocess.Popen]:
    from fleet_runtime import home_client

    if args.no_engine or rt.engine_alive():
        return None
    proc = subprocess.Popen(home_client.engine_argv(args, forever=True))
    deadline = time.time() + 60
    while not rt.engine_alive():
        if proc.poll() is not None:
            raise RuntimeErrorBase(f"the engine exited at start (code {proc.returncode})")
        if time.time() > deadline:
            proc.terminate()
            raise RuntimeErrorBase("the engine did not start in 60s")
        time.sleep(0.1)
    return proc


def cmd_serve(args: argparse.Namespace) -> int:
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"WARNING: the API listens on {args.host}, not only on loopback; put TLS in"
              " front of it (st2 does with nginx)", file=sys.stderr)
    from fleet_runtime import home_client
    from fleet_runtime.st2api.app import St2Api

    try:
        rt = home_client.open_runtime(args)
        api = St2Api(rt, _users_path(args, rt.home), args.host, args.port, args.admin)
    except (RuntimeErrorBase, users.UsersFileError, OSError) as e:
        return fail(e)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    engine = None
    try:
        engine = _start_engine(args, rt)
        api.start()
        print(f"st2 API on {api.base_url} (auth /auth/v1, api /api/v1, stream /stream/v1);"
              f" engine pid {rt.engine_pid()}", flush=True)
        while not stop.wait(1.0):
            if engine is not None and engine.poll() is not None:
                print(f"ERROR: the engine exited (code {engine.returncode})", file=sys.stderr)
                return 1
        return 0
    except RuntimeErrorBase as e:
        return fail(e)
    finally:
        api.close()
        if engine is not None and engine.poll() is None:
            engine.send_signal(signal.SIGTERM)
            try:
                engine.wait(30)
            except subprocess.TimeoutExpired:
                engine.kill()
