"""A warm ansible-playbook: each run forked from a server that has imported Ansible once.

Starting ansible-playbook costs the controller about a CPU-second before the first task
(imports, config, plugins), several times per batch. Here the pack still starts
"ansible-playbook" as always (playbook_process: the same arguments, callback plugin, events,
timeout and cancel), but the program it starts is a small client (written under the warm dir)
that hands its argv, environment, working directory and its stdin/stdout/stderr (SCM_RIGHTS) to
a server over a Unix socket. The server has imported Ansible's CLI, executor and the plugins the
pack's playbooks use; it forks one child per run, which takes the client's fds, environment and
cwd and runs the real `ansible-playbook` code (PlaybookCLI) in a session of its own. The client
exits with the child's status.

    <warm dir>/<key>.sock    the server of one key (0600, in a 0700 dir; peers of another uid
                             are refused)
    <warm dir>/<key>.lock    flock: one client at a time starts the server of a key
    <warm dir>/<key>.log     the server's own output

Equivalence with a cold start: Ansible reads parts of its configuration when it is imported,
so a server serves one key only: the sha256 of every ANSIBLE_* variable (but the per-run fact
cache path), HOME, the locale, PYTHONPATH entries that hold Ansible, the Python, the
ansible-playbook entry point, this file and warm_templates.py, and the user's and the
system's ansible.cfg (stat). Each run compiles its tasks' templates once, before the workers
fork (warm_templates). A run with ANSIBLE_CONFIG set, or an ansible.cfg in its working
directory, runs cold (exec of the real ansible-playbook), as does any run whose server cannot
be reached or started: warm is an optimisation, never a new way to fail.

Cancel and timeouts: a signal to the client (playbook_process's time limit) is passed to the
child's process group; a client that dies (SIGKILL) closes its socket and the server ends the
child's process group (SIGTERM, SIGKILL 10 s later). The server exits after IDLE seconds
without runs. It is single-threaded (a fork from a threaded process could inherit held locks).

The standard library only until `serve` imports Ansible: the client runs with `python -I -S`.
"""
from __future__ import annotations

import array
import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

IDLE = 300.0  # seconds a server without runs stays up (env FLEET_ROLLOUT_WARM_IDLE)
START_TIMEOUT = 20.0  # seconds a client waits for a server it started
KILL_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of an abandoned run
MAX_REQUEST = 4 * 1024 * 1024  # bytes of one request (argv + environment)
CLIENT_NAME = "ansible-playbook-warm"
PER_RUN_ENV = ("ANSIBLE_CACHE_PLUGIN_CONNECTION",)  # per run, read when used: not in the key
CONFIG_FILES = ("~/.ansible.cfg", "/etc/ansible/ansible.cfg")
# the server's compiled-template cache (imported by the server, not by the client)
TEMPLATES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_templates.py")
PRELOAD = (
    "ansible.cli.playbook", "ansible.executor.playbook_executor",
    "ansible.executor.task_queue_manager", "ansible.executor.task_executor",
    "ansible.executor.process.worker", "ansible.executor.module_common",
    "ansible.executor.powershell", "ansible.playbook.play", "ansible.playbook.task",
    "ansible.playbook.block", "ansible.inventory.manager", "ansible.vars.manager",
    "ansible.vars.hostvars", "ansible.template", "ansible.parsing.dataloader",
    "ansible.plugins.connection.ssh", "ansible.plugins.connection.local",
    "ansible.plugins.action.normal", "ansible.plugins.action.command",
    "ansible.plugins.action.script", "ansible.plugins.action.raw",
    "ansible.plugins.lookup.file", "ansible.plugins.strategy.free",
    "ansible.plugins.strategy.linear", "ansible.plugins.shell.sh",
    "ansible.plugins.become.sudo", "ansible.plugins.callback.default",
    "ansible.plugins.callback.minimal", "ansible.plugins.inventory.yaml",
    "ansible.plugins.inventory.ini", "ansible.plugins.inventory.host_list",
    "ansible.plugins.vars.host_group_vars", "ansible.plugins.cache.memory",
    "ansible.plugins.cache.jsonfile", "ansible.modules.command",
)


# ------------------------------------------------------------------------------ pack side
def client_path(warm_dir: str, real: str) -> str:
    """The program the pack starts instead of ansible-playbook `real` (written once per
    Python and per copy of this file; 0700)."""
    os.makedirs(warm_dir, mode=0o700, exist_ok=True)
    os.chmod(warm_dir, 0o700)
    here = os.path.abspath(__file__)
    digest = hashlib.sha256((sys.executable + "\0" + here).encode()).hexdigest()[:12]
    path = os.path.join(warm_dir, f"{CLIENT_NAME}-{digest}")
    text = (f"#!/bin/sh\n# fleet_rollout: ansible-playbook forked from a warm server\n"
            f"exec {_sh(sys.executable)} -I -S {_sh(here)} client {_sh(warm_dir)} "
            f"{_sh(real)} \"$@\"\n")
    try:
        with open(path) as handle:
            if handle.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o700)
    os.rename(tmp, path)
    return path


def _sh(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def server_pids(warm_dir: str) -> list:
    """The pids of the servers under `warm_dir` that are alive (tests, benchmarks, cleanup)."""
    pids = []
    try:
        names = os.listdir(warm_dir)
    except OSError:
        return pids
    for name in names:
        if name.endswith(".pid"):
            try:
                with open(os.path.join(warm_dir, name)) as handle:
                    pid = int(handle.read().strip())
                os.kill(pid, 0)
                pids.append(pid)
            except (OSError, ValueError):
                continue
    return pids


# ------------------------------------------------------------------------------ key
def server_key(environ: dict, real: str) -> str:
    """What a server's imported configuration depends on (see the module's docstring).
    PYTHONPATH counts only where it could change what is imported as Ansible (an entry that
    holds an ansible or ansible_runner package): actions and the runs they share differ there."""
    parts = [sys.executable, os.path.abspath(__file__), real]
    for path in [real, os.path.abspath(__file__), TEMPLATES_FILE] + [
            os.path.expanduser(p) for p in CONFIG_FILES]:
        try:
            st = os.stat(path)
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
        except OSError:
            parts.append(f"{path}:-")
    for name in sorted(environ):
        if (name.startswith("ANSIBLE_") and name not in PER_RUN_ENV) or \
                name in ("HOME", "PYTHONHASHSEED", "LANG", "LC_ALL"):
            parts.append(f"{name}={environ[name]}")
    for entry in str(environ.get("PYTHONPATH") or "").split(os.pathsep):
        if entry and any(os.path.exists(os.path.join(entry, package))
                         for package in ("ansible", "ansible_runner")):
            parts.append(f"PYTHONPATH+={entry}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def runs_cold(environ: dict, cwd: str) -> bool:
    """A run whose configuration a server cannot have: ANSIBLE_CONFIG, or ./ansible.cfg."""
    return bool(environ.get("ANSIBLE_CONFIG")) or os.path.exists(
        os.path.join(cwd, "ansible.cfg"))


# ------------------------------------------------------------------------------ wire
def _send_msg(sock: socket.socket, doc: dict, fds: tuple = ()) -> None:
    data = json.dumps(doc).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        sock.sendmsg([payload[:4]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                       array.array("i", fds).tobytes())])
        sock.sendall(payload[4:])
    else:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 65536))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _recv_msg(sock: socket.socket) -> dict:
    (size,) = struct.unpack("!I", _recv_exact(sock, 4))
    if size > MAX_REQUEST:
        raise ValueError(f"message of {size} bytes refused")
    doc = json.loads(_recv_exact(sock, size).decode())
    if not isinstance(doc, dict):
        raise ValueError("message is not an object")
    return doc


def _recv_request(sock: socket.socket) -> tuple:
    """(request document, received fds)."""
    fds = array.array("i")
    head, ancdata, _flags, _addr = sock.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(head) < 4:
        head += _recv_exact(sock, 4 - len(head))
    (size,) = struct.unpack("!I", head)
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes refused")
    return json.loads(_recv_exact(sock, size).decode()), list(fds)


def _connect(warm_dir: str, key: str) -> socket.socket:
    """Connected to the server of `key` (the path is relative: a state dir's absolute path may
    be longer than a socket address allows)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(warm_dir)
        sock.connect(f"{key}.sock")
    except OSError:
        sock.close()
        raise
    finally:
        os.fchdir(here)
        os.close(here)
    return sock


# ------------------------------------------------------------------------------ client
def client(warm_dir: str, real: str, args: list) -> int:
    """Run ansible-playbook `args` in a child of the warm server; exec the real program when
    that cannot be done. Returns the exit status."""
    environ = dict(os.environ)
    cwd = os.getcwd()
    if runs_cold(environ, cwd):
        _exec_cold(real, args)
    key = server_key(environ, real)
    try:
        sock = _server(warm_dir, key, environ)
    except OSError as err:
        sys.stderr.write(f"fleet_rollout: warm ansible unavailable ({err}); cold start\n")
        _exec_cold(real, args)
    with sock:
        try:  # until the server says it forked the run, nothing ran: a cold start is safe
            _send_msg(sock, {"argv": [real] + list(args), "env": environ, "cwd": cwd},
                      (0, 1, 2))
            if "started" not in _recv_msg(sock):
                raise ValueError("no run started")
        except (EOFError, OSError, ValueError) as err:
            sys.stderr.write(f"fleet_rollout: warm ansible refused the run ({err}); cold "
                             "start\n")
            sock.close()
            _exec_cold(real, args)

        def forward(signum: int, _frame: object) -> None:
            try:
                _send_msg(sock, {"signal": int(signum)})
            except OSError:
                pass

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, forward)
        try:
            reply = _recv_msg(sock)
        except (EOFError, OSError, ValueError) as err:
            sys.stderr.write(f"fleet_rollout: warm ansible server lost the run ({err})\n")
            return 1
    _record_cpu(reply.get("cpu"))
    status = int(reply.get("status", 1))
    return 128 - status if status < 0 else status


def _record_cpu(cpu: object) -> None:
    """The run's CPU (the forked child and what it waited for), for the pack's run log: the
    child is the server's, not this process's."""
    path = os.environ.get("FLEET_ROLLOUT_WARM_CPU")
    if path and isinstance(cpu, (int, float)):
        try:
            with open(path, "a") as handle:
                handle.write(f"{cpu}\n")
        except OSError:
            pass


def _exec_cold(real: str, args: list) -> None:
    os.execv(real, [real] + list(args))


def _server(warm_dir: str, key: str, environ: dict) -> socket.socket:
    """A connection to the server of `key`, started if none answers (one starter at a time)."""
    try:
        return _connect(warm_dir, key)
    except OSError:
        pass
    os.makedirs(warm_dir, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(warm_dir, f"{key}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _connect(warm_dir, key)  # started while this one waited for the lock
        except OSError:
            pass
        for stale in (f"{key}.sock", f"{key}.pid"):
            try:
                os.unlink(os.path.join(warm_dir, stale))
            except FileNotFoundError:
                pass
        log = os.open(os.path.join(warm_dir, f"{key}.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "serve", warm_dir, key],
                cwd=warm_dir, env=environ, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, close_fds=True)
        finally:
            os.close(log)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                return _connect(warm_dir, key)
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise OSError(errno.ECONNREFUSED, f"warm server {key} did not start "
                                  f"(see {os.path.join(warm_dir, key + '.log')})") from err
                time.sleep(0.05)
    finally:
        os.close(lock)


# ------------------------------------------------------------------------------ server
class Server:
    """Accepts runs, forks a child per run, reports each child's status to its client."""

    def __init__(self, warm_dir: str, key: str) -> None:
        self.warm_dir = warm_dir
        self.key = key
        self.runs: dict = {}  # child pid -> [connection, kill deadline or None]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.last = time.monotonic()
        self.idle = float(os.environ.get("FLEET_ROLLOUT_WARM_IDLE") or IDLE)

    def preload(self) -> None:
        import importlib

        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except Exception as err:  # a plugin this ansible-core lacks
                sys.stdout.write(f"preload {name}: {err}\n")
        try:
            _warm_plugins()
        except Exception as err:  # a cold child still works
            sys.stdout.write(f"preload plugins: {err}\n")
        try:
            _uncopied_fresh_loads()
        except Exception as err:  # runs copy what they parse, as cold
            sys.stdout.write(f"preload loader: {err}\n")
        try:
            if not _templates().install():
                sys.stdout.write("preload templates: not this ansible-core's Jinja layout\n")
        except Exception as err:  # runs compile every template in every worker, as cold
            sys.stdout.write(f"preload templates: {err}\n")
        sys.stdout.flush()

    def listen(self) -> None:
        os.chdir(self.warm_dir)
        path = f"{self.key}.sock"
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        # the pid file before listen(): a client connects as soon as the server listens, and
        # whoever then looks for the server (server_pids) must find it. A CI run found none
        # between the two
        with open(f"{self.key}.pid.tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.rename(f"{self.key}.pid.tmp", f"{self.key}.pid")
        self.listener.listen(128)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._stop())
        self.last = time.monotonic()  # idle from now: the preload may take longer than IDLE
        while self.runs or time.monotonic() - self.last < self.idle:
            if not os.path.exists(os.path.join(self.warm_dir, f"{self.key}.sock")):
                break  # removed (the state dir is gone): nobody can reach this server
            open_runs = {run[0].fileno(): pid for pid, run in self.runs.items()
                         if not isinstance(run[0], _Closed)}
            poller = select.poll()  # no FD_SETSIZE limit on how many runs are open
            for fd in [self.listener.fileno()] + list(open_runs):
                poller.register(fd, select.POLLIN)
            for fd, _event in poller.poll(200):
                if fd == self.listener.fileno():
                    self._accept()
                elif fd in open_runs and open_runs[fd] in self.runs and \
                        not isinstance(self.runs[open_runs[fd]][0], _Closed):
                    self._from_client(open_runs[fd])
            self._reap()
            self._kill_overdue()
        self._stop()

    def _stop(self) -> None:
        for pid in list(self.runs):
            self._signal(pid, signal.SIGTERM)
        for name in (f"{self.key}.sock", f"{self.key}.pid"):
            try:
                os.unlink(os.path.join(self.warm_dir, name))
            except OSError:
                pass
        os._exit(0)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                raise PermissionError(f"peer uid {uid} refused")
            conn.settimeout(10)
            request, fds = _recv_request(conn)
            conn.settimeout(None)
            if len(fds) != 3:
                raise ValueError(f"{len(fds)} file descriptors received, 3 expected")
            pid = self._fork(conn, request, fds)
        except (OSError, ValueError, EOFError, KeyError, TypeError) as err:
            sys.stdout.write(f"refused a run: {err}\n")
            sys.stdout.flush()
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.runs[pid] = [conn, None]
        self.last = time.monotonic()
        try:
            _send_msg(conn, {"started": pid})
        except OSError:
            self._abandon(pid)

    def _fork(self, conn: socket.socket, request: dict, fds: list) -> int:
        argv = [str(a) for a in request["argv"]]
        env = {str(k): str(v) for k, v in dict(request["env"]).items()}
        cwd = str(request["cwd"])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        try:  # the child: nothing of the server's is kept
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for sock in [self.listener, conn] + [r[0] for r in self.runs.values()]:
                sock.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            sys.argv = argv
            status = _run_playbook(argv)
        except BaseException as err:  # a child never returns into the server
            try:
                os.write(2, f"fleet_rollout: warm ansible child: {err}\n".encode())
            except OSError:
                pass
            status = 1
        os._exit(status)

    def _from_client(self, pid: int) -> None:
        conn = self.runs[pid][0]
        try:
            signum = int(_recv_msg(conn).get("signal", signal.SIGTERM))
            if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self._signal(pid, signum)
                if self.runs[pid][1] is None:
                    self.runs[pid][1] = time.monotonic() + KILL_GRACE
        except (EOFError, OSError, ValueError):  # the client is gone: so is its run
            self._abandon(pid)

    def _abandon(self, pid: int) -> None:
        """End the run of a client that went away (SIGTERM now, SIGKILL after the grace)."""
        self._signal(pid, signal.SIGTERM)
        self.runs[pid][1] = self.runs[pid][1] or time.monotonic() + KILL_GRACE
        self.runs[pid][0].close()
        self.runs[pid][0] = _Closed()

    def _signal(self, pid: int, signum: int) -> None:
        try:
            os.killpg(pid, signum)
        except OSError:
            pass

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for pid, (_conn, deadline) in list(self.runs.items()):
            if deadline is not None and now > deadline:
                self._signal(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.runs:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.runs.pop(pid, None)
            self.last = time.monotonic()
            if entry is None:
                continue
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            try:
                _send_msg(entry[0], {"status": code,
                                     "cpu": round(usage.ru_utime + usage.ru_stime, 3)})
            except (OSError, AttributeError):
                pass
            entry[0].close()


class _Closed:
    """The connection of a client that went away (its run is being ended)."""

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


def _uncopied_fresh_loads() -> None:
    """Ansible's DataLoader deep-copies what it returns from a file, so that a caller cannot
    change its file cache. A load with cache='none' (the run's inventory) is parsed for that
    caller alone and never cached: its copy only costs the run CPU (its tagged strings copy
    slowly). Such a load returns what it parsed."""
    from ansible.parsing.dataloader import DataLoader

    load = DataLoader.load_from_file
    if getattr(load, "fleet_uncopied", False):
        return

    def load_from_file(self: object, file_name: str, cache: str = "all", unsafe: bool = False,
                       *args: object, **kwargs: object) -> object:
        return load(self, file_name, cache, unsafe or cache == "none", *args, **kwargs)

    load_from_file.fleet_uncopied = True  # type: ignore[attr-defined]
    DataLoader.load_from_file = load_from_file  # type: ignore[method-assign]


def _warm_plugins() -> None:
    """What every run's plugin loading reads (the collection loader, the plugins' option
    definitions from their documentation, the builtin collection's metadata), done once."""
    import warnings

    from ansible.plugins import loader

    # each run's CLI configures the collection loader again: the same one, already in place
    warnings.filterwarnings("ignore", message="AnsibleCollectionFinder has already been")
    loader.init_plugin_loader()
    for plugins, names in ((loader.connection_loader, ("ssh", "local")),
                           (loader.shell_loader, ("sh",)),
                           (loader.become_loader, ("sudo", "su")),
                           (loader.strategy_loader, ("free", "linear")),
                           (loader.action_loader, ("normal", "command", "script", "raw")),
                           # by the name the playbooks use too: else the full name's option
                           # definitions (parsed from its documentation) are each worker's
                           (loader.lookup_loader, ("file", "ansible.builtin.file")),
                           (loader.cache_loader, ("memory", "jsonfile")),
                           # Ansible's own only: the pack's fleet_events is loaded per run from
                           # the run's ANSIBLE_CALLBACK_PLUGINS
                           (loader.callback_loader, ("default", "minimal", "oneline", "tree",
                                                     "junit"))):
        for name in names:
            plugins.get(name, class_only=True)
    # every run's executor loads all connection, shell and become plugins (their config
    # definitions come from each plugin's documentation, parsed as YAML): loaded here once, a
    # run finds them known
    for plugins in (loader.inventory_loader, loader.vars_loader, loader.connection_loader,
                    loader.shell_loader, loader.become_loader):
        list(plugins.all(class_only=True))
    # Jinja filters and tests: the first lookup in a process indexes Ansible's own plugin
    # files; done here, the task workers forked for every host and task inherit the index
    for jinja, name in ((loader.filter_loader, "quote"), (loader.test_loader, "failed")):
        jinja.get(name)


def _templates():  # the module warm_templates
    try:
        from . import warm_templates  # imported as part of the pack's library
    except ImportError:
        import warm_templates  # the server script: its own directory is on sys.path
    return warm_templates


def _run_playbook(argv: list) -> int:
    from ansible.cli.playbook import PlaybookCLI

    _templates().begin_run()
    try:
        PlaybookCLI.cli_executor(argv)
    except SystemExit as done:
        code = done.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
    else:
        status = 0
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def serve(warm_dir: str, key: str) -> None:
    server = Server(warm_dir, key)
    server.preload()
    server.listen()
    server.serve()


def main(argv: list) -> int:
    if len(argv) >= 3 and argv[0] == "client":
        return client(argv[1], argv[2], argv[3:])
    if len(argv) == 3 and argv[0] == "serve":
        serve(argv[1], argv[2])
        return 0
    sys.stderr.write("usage: warm_ansible.py client WARM_DIR ANSIBLE_PLAYBOOK ARGS... | "
                     "serve WARM_DIR KEY\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
