"""Faults on the rollout's own state: a half-written audit line, two rollbacks finishing at
once, concurrent read-modify-write of the datastore, file modes, and action timeouts shorter
than the waits they contain."""
from __future__ import annotations

import os
import stat
import threading

import locations
import pytest
import yaml

from fleet_rollout import timeouts
from fleet_rollout.audit import Audit
from fleet_rollout.profile import DEFAULTS, validate_profile
from fleet_rollout.store import FileStore, MemoryStore, RolloutState

ROOT = locations.ROOT


def test_a_damaged_audit_entry_is_counted_not_fatal():
    store = MemoryStore()
    audit = Audit(store, "r-audit")
    audit.record("h1", "bios.SnoopMode", "Early", "Home")
    store.set(audit.prefix + "00000000000000000001-damaged",
              '{"time": 1, "host": "h2", "setting": "bios.Sno')  # a broken value
    store.set(audit.prefix + "00000000000000000002-list", "[1, 2]")
    audit.record("h3", "service", "in service", "drained")
    summary = audit.summary()
    assert summary["entries"] == 2 and summary["unreadable_entries"] == 2
    assert [e["host"] for e in audit.entries()] == ["h1", "h3"]
    from fleet_rollout.report import render_report

    state = RolloutState(store, "r-audit")
    state.save_plan({"rollout_id": "r-audit", "profile": dict(DEFAULTS, name="p", bios={}),
                     "batches": [], "control": [], "hosts": {}, "targets": 0,
                     "skipped_compliant": [], "inventory": "x", "limit": "all",
                     "created": 0, "started_by": "a"})
    assert "h3" in render_report(state, audit)


def test_entries_written_at_once_from_many_writers_are_all_kept_in_time_order(tmp_path):
    """Action runners on different machines each write their own entries: none is lost, and
    the trail reads in time order."""
    store = FileStore(str(tmp_path / "kv"))

    def write(n: int) -> None:
        audit = Audit(store, "r-many")
        for i in range(25):
            audit.record(f"h{n}", "step", i, i + 1)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = Audit(store, "r-many").entries()
    assert len(entries) == 8 * 25
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)
    for n in range(8):
        assert [e["old"] for e in entries if e["host"] == f"h{n}"] == list(range(25))


def test_state_files_are_private(tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    store.set("fleet_rollout.r-modes.meta.status", '"running"')
    assert stat.S_IMODE(os.stat(tmp_path / "kv").st_mode) == 0o700
    for name in os.listdir(tmp_path / "kv"):
        assert stat.S_IMODE(os.stat(tmp_path / "kv" / name).st_mode) == 0o600


def test_concurrent_updates_lose_nothing(tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    states = [RolloutState(store, "r-race") for _ in range(8)]

    def bump(state: RolloutState, n: int) -> None:
        for i in range(25):
            state.update_meta(**{f"k{n}-{i}": i})
            state.update_batch(0, lambda b, n=n, i=i: b.setdefault("marks", []).append(
                f"{n}-{i}"))

    threads = [threading.Thread(target=bump, args=(s, n)) for n, s in enumerate(states)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(states[0].meta()) == 8 * 25
    assert len(states[0].batch(0)["marks"]) == 8 * 25


def _write_fields(where: str, n: int) -> None:
    state = RolloutState(FileStore(where), "r-procs")
    for i in range(20):
        state.update_batch(0, lambda b, n=n, i=i: b.update({f"field{n}": i}))
        state.update_meta(**{f"meta{n}": i})


def test_processes_sharing_no_lock_lose_no_field_of_each_other(tmp_path):
    """Action runners on different machines share no lock: each writer's fields are keys of
    their own, so updates of different fields at the same moment never undo each other."""
    import multiprocessing

    where = str(tmp_path / "kv")
    mp = multiprocessing.get_context("fork")
    procs = [mp.Process(target=_write_fields, args=(where, n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    state = RolloutState(FileStore(where), "r-procs")
    assert state.batch(0) == {f"field{n}": 19 for n in range(4)}
    assert {k: v for k, v in state.meta().items() if k.startswith("meta")} == \
        {f"meta{n}": 19 for n in range(4)}


def test_two_rollbacks_finishing_at_once_announce_once_and_failed_wins(tmp_path):
    store = FileStore(str(tmp_path / "kv"))
    results = []

    def end(status: str) -> None:
        results.append(RolloutState(store, "r-end").end(status))

    threads = [threading.Thread(target=end, args=(s,))
               for s in ("rolled_back", "rolled_back", "failed", "rolled_back")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    changed = [r for r in results if r["changed"]]
    assert RolloutState(store, "r-end").meta()["status"] == "failed"
    assert 1 <= len(changed) <= 2  # rolled_back first then failed, or failed alone
    assert sum(1 for r in changed if r["meta"]["status"] == "rolled_back") <= 1
    again = RolloutState(store, "r-end").end("completed")
    assert not again["changed"] and again["meta"]["status"] == "failed"


def _profiles():
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        yield path.stem, validate_profile(yaml.safe_load(path.read_text()), str(path))


@pytest.mark.parametrize("name,profile", list(_profiles()))
def test_action_timeouts_outlast_the_waits_inside_them(name, profile):
    r = profile["redfish"]
    got = timeouts.action_timeouts(profile, 30)
    # the waits each action does itself, stated here independently of the module
    assert got["reboot"] > r["graceful_timeout"] + r["force_timeout"]
    assert got["wait"] > r["boot_timeout"]   # settings applied
    assert got["probe"] > r["boot_timeout"]  # the OS back, then the checks and the probe
    assert got["drain"] > profile["drain"]["timeout"]
    assert got["restore"] > 2 * (r["graceful_timeout"] + r["force_timeout"]) + \
        2 * r["boot_timeout"]
    assert got["wait"] > 600  # st2's python runner default would kill it mid-boot


def test_a_profile_with_long_boots_gets_longer_timeouts():
    base = validate_profile({"name": "p", "bios": {"snoop_mode": "home"}}, "p")
    slow = validate_profile({"name": "p", "bios": {"snoop_mode": "home"},
                             "redfish": {"boot_timeout": 3600}}, "p")
    longer = 3600 - base["redfish"]["boot_timeout"]
    for step in ("wait", "probe"):  # settings applied, then the OS back
        assert timeouts.action_timeouts(slow)[step] >= \
            timeouts.action_timeouts(base)[step] + longer


def test_the_state_dir_itself_is_made_private(tmp_path):
    from fleet_rollout.paths import private_dir

    loose = tmp_path / "var" / "lib" / "fleet_rollout"
    loose.mkdir(parents=True)
    os.chmod(loose, 0o755)
    private_dir(str(loose))
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700
    fresh = private_dir(str(tmp_path / "new" / "state"))
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700
