"""One ansible-playbook process (fleet_rollout.hostside.playbook_process) with the pack's
`fleet_events` callback: real ansible-playbook against `sim` hosts (Ansible's local connection
with a sysroot). What a run says on failure, its time limit and a killed caller reach every
process of the run. Each test's processes carry a marker of its own and are looked for by it;
nothing outside the test's tmp_path is touched."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from hostside_support import (
    HOSTS,
    LabHostSide,
    end_with_marker,
    pids_with,
    run_local,
    sim_lab,
    sleeping_playbook,
)
from process_support import wait_for

from fleet_rollout.hostside import playbook_process


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[dict]:
    yield from sim_lab(tmp_path)


def test_results_come_from_the_callback_one_line_per_host(lab, capfd):
    side = LabHostSide(lab["inventory"], forks=2, cache_dir=lab["cache"])
    results = side.health(HOSTS)
    for name in HOSTS:
        assert results[name].ok, results[name]
        assert results[name].result["boot_id"]  # the host script's JSON document
        assert results[name].tasks == ["Read host state"]
    assert capfd.readouterr().out == ""  # quiet unless verbose
    verbose = run_local("health", lab["inventory"], ["sim-001"], cache_dir=lab["cache"],
                           verbose=True)
    assert verbose["sim-001"].ok
    assert "ok: [sim-001] fleet_result: Read host state" in capfd.readouterr().out


def test_the_event_file_keeps_only_what_the_pack_reads(lab, tmp_path):
    events = tmp_path / "events.jsonl"
    extravars = tmp_path / "extravars.json"
    extravars.write_text(json.dumps({"fleet_note": "data"}))
    playbook = tmp_path / "facts.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "fleet_result: set", "ansible.builtin.set_fact":
                   {"fleet_result": {"a": 1}, "other": "not carried"}},
                  {"name": "fails", "ansible.builtin.command": "false",
                   "ignore_errors": True}]}]))
    env = dict(os.environ, **playbook_process.callback_env(str(events)))
    argv = playbook_process.command(
        os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), [str(playbook)],
        lab["direct_inventory"], ["sim-001"], str(extravars), 1)
    ended = playbook_process.run(argv, env, str(tmp_path), 120)
    assert ended.status == "successful" and ended.rc == 0, ended
    kinds = [(e["event"], e["event_data"]["task"]) for e in ended.events]
    assert kinds == [("runner_on_ok", "fleet_result: set"), ("runner_on_failed", "fails")]
    first, second = (e["event_data"] for e in ended.events)
    assert first["res"]["ansible_facts"] == {"fleet_result": {"a": 1}}
    assert second["ignore_errors"] is True and second["res"]["rc"] == 1
    assert "invocation" not in second["res"]  # module arguments stay out


def test_a_run_ansible_refuses_says_why_for_every_host(lab, tmp_path):
    playbook = tmp_path / "broken.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "fleet_result: x", "no.such_collection.module": {}}]}]))
    results = run_local(str(playbook), lab["inventory"], HOSTS, cache_dir=lab["cache"])
    for name in HOSTS:
        assert not results[name].ok
        assert results[name].error.startswith("ansible run failed before reaching this host: ")
        assert "no.such_collection.module" in results[name].error, results[name].error


def test_a_timed_out_run_leaves_no_process_behind(lab):
    marker = f"600.{os.getpid()}3"
    started = time.monotonic()
    results = run_local(sleeping_playbook(lab, marker), lab["inventory"], ["sim-001"],
                           timeout=6, cache_dir=lab["cache"])
    assert time.monotonic() - started < 6 + playbook_process.KILL_GRACE + 20
    assert not results["sim-001"].ok
    assert "ansible run timeout" in results["sim-001"].error
    assert pids_with(marker) == []  # ansible-playbook, its worker, the task's command: gone


def test_a_killed_caller_takes_its_run_with_it(lab):
    """What the embedded runtime does to an action it cancels: SIGKILL to its process group.
    The run's first process gets SIGTERM as its caller dies and passes it on to the run's
    process group; ansible-playbook ends its workers and their commands, in that group or in
    sessions of their own (ansible-core 2.19); killed outright, it would leave them running."""
    marker = f"600.{os.getpid()}4"
    code = ("import sys; from fleet_rollout.hostside.ansible_run import run_playbook; "
            "from fleet_rollout.connection import Connection; "
            "run_playbook(sys.argv[1], sys.argv[2], ['sim-001'], cache_dir=sys.argv[3], "
            "connection=Connection(allow_local=True))")
    caller = subprocess.Popen([sys.executable, "-c", code, sleeping_playbook(lab, marker),
                               lab["inventory"], lab["cache"]], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: bool(pids_with(marker)), 60), "the task never started"
        os.killpg(caller.pid, signal.SIGKILL)
        caller.wait(10)
        assert wait_for(lambda: not pids_with(marker), 15), pids_with(marker)
    finally:
        end_with_marker(caller, marker)


def test_the_users_callback_plugin_dirs_stay_searched(monkeypatch, tmp_path):
    monkeypatch.delenv("ANSIBLE_CALLBACK_PLUGINS", raising=False)
    env = playbook_process.callback_env(str(tmp_path / "events.jsonl"))
    assert env["ANSIBLE_CALLBACK_PLUGINS"] == playbook_process.CALLBACK_DIR
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "fleet_events"
    monkeypatch.setenv("ANSIBLE_CALLBACK_PLUGINS", "/opt/site/callbacks")
    env = playbook_process.callback_env(str(tmp_path / "events.jsonl"))
    assert env["ANSIBLE_CALLBACK_PLUGINS"] == \
        playbook_process.CALLBACK_DIR + os.pathsep + "/opt/site/callbacks"
