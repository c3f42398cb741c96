"""Warm ansible-playbook (fleet_rollout.hostside.warm_ansible): the real playbooks, each run
forked from a server that imported Ansible once, against `sim` hosts (Ansible's local
connection with a sysroot). Every server a test starts is under its tmp_path
and is stopped by PID at the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest
from hostside_support import (
    HOSTS,
    LabHostSide,
    end_with_marker,
    pids_with,
    run_local,
    sim_lab,
    sleeping_playbook,
)
from process_support import gone, wait_for

from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import ConfigError
from fleet_rollout.hostside import warm_ansible


@pytest.fixture()
def lab(tmp_path: Path, monkeypatch) -> Iterator[dict]:
    monkeypatch.setenv("FLEET_ROLLOUT_ANSIBLE_LOG", str(tmp_path / "runs.jsonl"))
    yield from sim_lab(tmp_path)


def _runs(lab: dict) -> List[dict]:
    path = lab["tmp"] / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_warm_runs_give_what_cold_runs_give_from_one_server(lab):
    cold = LabHostSide(lab["inventory"], forks=2, cache_dir=lab["cache"])
    warm = LabHostSide(lab["inventory"], forks=2, cache_dir=lab["cache"],
                    warm_dir=lab["warm_dir"])
    expected = cold.health(HOSTS)
    first = warm.health(HOSTS)
    servers = warm_ansible.server_pids(lab["warm_dir"])
    assert len(servers) == 1
    second = warm.drain(HOSTS, timeout=5)
    for name in HOSTS:
        assert first[name].ok and expected[name].ok, (first[name], expected[name])
        assert first[name].result == expected[name].result
        assert first[name].tasks == expected[name].tasks
        assert second[name].ok and second[name].result["drained"] is True
    assert warm_ansible.server_pids(lab["warm_dir"]) == servers  # the same server, reused
    runs = _runs(lab)
    assert [r["warm"] for r in runs] == [False, True, True]
    assert all(r["warm_cpu"] > 0 for r in runs[1:])  # the forked child's CPU, from the server
    # the server (a script, not the package) preloaded all it should: warm_templates included
    logs = [path.read_text() for path in Path(lab["warm_dir"]).glob("*.log")]
    assert logs and not any("preload" in text for text in logs), logs


def test_a_failing_task_and_an_unknown_host_read_the_same_warm(lab):
    """Errors come from the run's events either way: the failed task's own message."""
    results = {}
    for warm_dir in (None, lab["warm_dir"]):
        side = LabHostSide(lab["inventory"], cache_dir=lab["cache"], warm_dir=warm_dir)
        with pytest.raises(ValueError):
            side.kernel(HOSTS, "apply; id")
        results[warm_dir] = run_local("kernel", lab["inventory"], ["sim-001", "nosuch"],
                                         {"fleet_kernel_action": "apply",
                                          "fleet_kernel_settings": {}},
                                         cache_dir=lab["cache"], warm_dir=warm_dir)
    cold, warm = results[None], results[lab["warm_dir"]]
    assert not warm["sim-001"].ok and warm["sim-001"].error == cold["sim-001"].error
    assert "snapshot" in warm["sim-001"].error  # apply is refused without a snapshot
    assert "not in inventory" in warm["nosuch"].error
    assert warm_ansible.server_pids(lab["warm_dir"])


def test_a_timed_out_warm_run_ends_its_forked_child(lab):
    side = LabHostSide(lab["inventory"], cache_dir=lab["cache"], warm_dir=lab["warm_dir"])
    assert side.health(["sim-001"])["sim-001"].ok  # the server is up before the timed run
    servers = warm_ansible.server_pids(lab["warm_dir"])
    assert len(servers) == 1
    marker = f"600.{os.getpid()}1"
    playbook = sleeping_playbook(lab, marker)
    seen = threading.Event()

    def watch() -> None:
        if wait_for(lambda: bool(pids_with(marker)), 30):
            seen.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    results = run_local(playbook, lab["inventory"], ["sim-001"], timeout=8,
                           cache_dir=lab["cache"], warm_dir=lab["warm_dir"])
    assert not results["sim-001"].ok and results["sim-001"].error
    assert time.monotonic() - started < 60
    watcher.join(30)
    assert seen.is_set(), "the hanging task never ran in a forked child"
    assert wait_for(lambda: not pids_with(marker), 20), "the hanging task outlived its run"
    assert warm_ansible.server_pids(lab["warm_dir"]) == servers  # the server goes on serving
    assert side.health(["sim-001"])["sim-001"].ok


def test_a_killed_client_takes_its_run_with_it(lab):
    """SIGKILL of the program the pack started (the client): the server sees its socket
    close and ends the forked run's process group."""
    marker = f"600.{os.getpid()}2"
    playbook = sleeping_playbook(lab, marker)
    client = warm_ansible.client_path(
        lab["warm_dir"], os.path.join(os.path.dirname(sys.executable), "ansible-playbook"))
    proc = subprocess.Popen([client, "-i", lab["direct_inventory"], "--limit", "sim-001",
                             playbook],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=str(lab["tmp"]), start_new_session=True)
    try:
        assert wait_for(lambda: bool(pids_with(marker)), 60), "the task never started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert wait_for(lambda: not pids_with(marker), warm_ansible.KILL_GRACE + 15)
    finally:
        end_with_marker(proc, marker)


def test_runs_cold_where_no_server_can_be(lab, monkeypatch):
    """A configuration the server cannot have read (ANSIBLE_CONFIG), or a server that cannot
    start: the run starts cold and gives the same results; never a new way to fail."""
    side = LabHostSide(lab["inventory"], cache_dir=lab["cache"], warm_dir=lab["warm_dir"])
    cfg = lab["tmp"] / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    assert all(r.ok for r in side.health(HOSTS).values())
    assert warm_ansible.server_pids(lab["warm_dir"]) == []
    monkeypatch.delenv("ANSIBLE_CONFIG")
    monkeypatch.setenv("FLEET_ROLLOUT_WARM_IDLE", "not-a-number")  # the server dies at start
    assert all(r.ok for r in side.health(HOSTS).values())
    assert warm_ansible.server_pids(lab["warm_dir"]) == []
    logs = list(Path(lab["warm_dir"]).glob("*.log"))
    assert logs and "not-a-number" in "".join(p.read_text() for p in logs)


def _started_server(lab: dict) -> int:
    """A server of this test's environment, started as a client starts one; its pid (the
    connection that started it is closed without a run)."""
    environ = dict(os.environ)
    real = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    sock = warm_ansible._server(lab["warm_dir"], warm_ansible.server_key(environ, real),
                                environ)
    (pid,) = warm_ansible.server_pids(lab["warm_dir"])
    sock.close()
    return pid


def test_a_server_leaves_when_its_socket_is_gone_or_it_is_idle(lab, monkeypatch):
    monkeypatch.setenv("FLEET_ROLLOUT_WARM_IDLE", "2")
    idle = _started_server(lab)
    assert wait_for(lambda: gone(idle), 30), "an idle server stayed"
    monkeypatch.setenv("FLEET_ROLLOUT_WARM_IDLE", "600")
    busy = _started_server(lab)
    assert busy != idle
    for sock in Path(lab["warm_dir"]).glob("*.sock"):
        sock.unlink()
    assert wait_for(lambda: gone(busy), 20), "a server without its socket stayed"
    assert warm_ansible.server_pids(lab["warm_dir"]) == []


def test_the_server_key_follows_what_ansible_reads_at_import(tmp_path):
    real = "/nonexistent/ansible-playbook"
    base = {"PATH": "/usr/bin", "HOME": "/root", "ANSIBLE_PIPELINING": "True"}
    key = warm_ansible.server_key(base, real)
    assert warm_ansible.server_key(dict(base), real) == key
    assert warm_ansible.server_key(dict(base, ANSIBLE_FORKS="7"), real) != key
    assert warm_ansible.server_key(dict(base, ANSIBLE_PIPELINING="False"), real) != key
    assert warm_ansible.server_key(dict(base, HOME="/home/x"), real) != key
    # per run, read when used: one server serves every run
    assert warm_ansible.server_key(dict(base, ANSIBLE_CACHE_PLUGIN_CONNECTION="/a"), real) == key
    assert warm_ansible.server_key(dict(base, AWX_ISOLATED_DATA_DIR="/b"), real) == key
    # PYTHONPATH: only where it could import another Ansible
    assert warm_ansible.server_key(dict(base, PYTHONPATH="/nonexistent/lib"), real) == key
    other = tmp_path / "site"
    (other / "ansible").mkdir(parents=True)
    assert warm_ansible.server_key(dict(base, PYTHONPATH=str(other)), real) != key


def test_runs_cold_with_a_configuration_file_of_its_own(tmp_path):
    assert not warm_ansible.runs_cold({}, str(tmp_path))
    assert warm_ansible.runs_cold({"ANSIBLE_CONFIG": "/etc/x.cfg"}, str(tmp_path))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    assert warm_ansible.runs_cold({}, str(tmp_path))


def test_pack_config_ansible_warm_gives_every_host_step_its_warm_dir(tmp_path):
    """`ansible_warm` (default true): the host steps' HostSide forks ansible-playbook from a
    server under state_dir/ansible/warm; false: cold starts; anything else is refused."""
    from test_batch_info import stored_plan

    from fleet_rollout import service

    base = {"credentials": {"lab": {"username": "u", "password": "p"}},
            "state_dir": str(tmp_path / "state")}
    assert load_pack_config(base).ansible_warm is True
    assert load_pack_config(dict(base, ansible_warm=False)).ansible_warm is False
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match="ansible_warm"):
            load_pack_config(dict(base, ansible_warm=bad))
    _plan, store = stored_plan("warm-1", 4)
    side = service.context(base, store, "warm-1").hostside
    assert side.warm_dir == str(tmp_path / "state" / "ansible" / "warm")
    assert service.context(dict(base, ansible_warm=False), store, "warm-1").hostside.warm_dir \
        is None


def test_a_server_is_findable_before_it_accepts_a_client(tmp_path: Path) -> None:
    """The pid file exists before the socket listens: a client that connects may look the
    server up at once (a CI run once found no pid file between the two). In-process: no server
    process is started, only its listen() is called."""
    warm_dir = tmp_path / "warm"
    warm_dir.mkdir(mode=0o700)
    here = os.getcwd()
    server = warm_ansible.Server(str(warm_dir), "k" * 20)
    seen: List[bool] = []
    real = server.listener

    class Listener:
        def __getattr__(self, name: str):
            return getattr(real, name)

        def listen(self, backlog: int) -> None:
            seen.append((warm_dir / f"{'k' * 20}.pid").read_text() == str(os.getpid()))
            real.listen(backlog)

    server.listener = Listener()
    try:
        server.listen()
    finally:
        os.chdir(here)
        real.close()
    assert seen == [True]


def test_the_server_preload_leaves_runs_no_plugin_documentation_to_parse() -> None:
    """What every run's executor loads (all connection, shell and become plugins, whose config
    definitions come from their documentation) is known after the server's preload, so a run
    forked from it parses none of it again. A plain interpreter (no server is started)."""
    # ansible-core's own plugins beyond the ssh, local, sh and sudo the playbooks use
    wanted = {"connection": ["paramiko_ssh", "winrm", "psrp"], "shell": ["powershell", "cmd"],
              "become": ["su", "runas"]}
    code = (
        "import json, sys\n"
        "from fleet_rollout.hostside import warm_ansible\n"
        "from ansible import constants as C\n"
        "warm_ansible._warm_plugins()\n"
        "wanted = json.loads(sys.argv[1])\n"
        "print(json.dumps([[k, n] for k, ns in wanted.items() for n in ns"
        " if not C.config.has_configuration_definition(k, n)]))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(wanted)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [], out.stdout


def test_a_runs_inventory_is_read_by_the_yaml_plugin_only() -> None:
    from fleet_rollout.hostside.ansible_run import runner_env

    assert runner_env(None)["ANSIBLE_INVENTORY_ENABLED"] == "yaml"


def test_a_fresh_load_is_not_copied_and_a_cached_one_still_is(tmp_path: Path) -> None:
    """The run's inventory is parsed for its caller alone (cache='none'): after the server's
    preload it is returned as parsed, not deep-copied; a cached file is still copied, so that
    no caller changes the cache. A plain interpreter (no server is started)."""
    path = tmp_path / "inventory.yml"
    path.write_text("all:\n  hosts:\n    lab-001:\n      fleet_kernel_settings: {a: [1, 2]}\n")
    code = (
        "import json, sys\n"
        "from ansible.parsing import dataloader\n"
        "from fleet_rollout.hostside import warm_ansible\n"
        "warm_ansible._uncopied_fresh_loads()\n"
        "warm_ansible._uncopied_fresh_loads()  # once only\n"
        "copies = []\n"
        "real = dataloader.copy.deepcopy\n"
        "dataloader.copy.deepcopy = lambda value: copies.append(1) or real(value)\n"
        "loader = dataloader.DataLoader()\n"
        "seen = {}\n"
        "for cache in ('none', 'all'):\n"
        "    first = loader.load_from_file(sys.argv[1], cache=cache)\n"
        "    first['all']['hosts']['lab-001']['fleet_kernel_settings']['a'].append(3)\n"
        "    second = loader.load_from_file(sys.argv[1], cache=cache)\n"
        "    seen[cache] = [len(copies), second['all']['hosts']['lab-001']"
        "['fleet_kernel_settings']['a']]\n"
        "    copies.clear()\n"
        "print(json.dumps(seen))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    assert seen["none"] == [0, [1, 2]]  # parsed twice, never copied, nothing shared
    assert seen["all"] == [2, [1, 2]]  # from the cache, copied: the change stays the caller's
