"""Adversarial: the runtime's state is private to its user. The home and every directory in it
are 0700, every file 0600: runtime.db and its -wal/-shm files, the chat transcript, what the
pack's actions write under the home; a home left world-readable by an older version is
tightened when it is opened."""
from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import runtime_support as testing
import yaml
from adv_support import write, write_announce_action, write_pack_yaml

from fleet_runtime.database import Store
from fleet_runtime.home import RuntimeHome


def make_pack(root: Path) -> Path:
    pack = root / "files_pack"
    write_pack_yaml(pack, "files",
                    "actions that write state files like the fleet_rollout pack does")
    write(pack / "actions" / "audit.yaml", """
        name: audit
        runner_type: python-script
        entry_point: audit.py
        """)
    write(pack / "actions" / "audit.py", """
        import os

        from st2common.runners.base_action import Action


        class Audit(Action):
            def run(self):
                state = os.path.join(os.environ["FLEET_ROLLOUT_HOME"], "rollouts", "r1")
                os.makedirs(state, exist_ok=True)
                with open(os.path.join(state, "audit.jsonl"), "a") as fh:
                    fh.write("{}\\n")
                with open(os.path.join(state, "report.html"), "w") as fh:
                    fh.write("<html></html>")
                return {"state": state}
        """)
    write_announce_action(pack, "announce", "chatops", 'hello')
    write_announce_action(pack, "other_route", "pager", 'hello')
    return pack


@pytest.fixture()
def loose_umask() -> Iterator[None]:
    """The test process as a user's shell usually is (umask 022): the fix may not rely on it."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def loose_entries(root: Path) -> List[str]:
    found = []
    for folder, dirs, files in os.walk(str(root)):
        for name in [folder] + [os.path.join(folder, n) for n in dirs + files]:
            mode = os.lstat(name).st_mode
            if stat.S_ISLNK(mode):
                continue
            if stat.S_IMODE(mode) & 0o077:
                found.append(f"{name} {stat.S_IMODE(mode):o}")
    return sorted(set(found))


def modes(root: Path) -> Dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}


def test_in_process_engine_writes_private_files(tmp_path: Path, monkeypatch: Any,
                                                loose_umask: None) -> None:
    pack = make_pack(tmp_path)
    home = testing.fixture_home(tmp_path / "home", monkeypatch)
    rt = testing.engine(home, [str(pack)])
    try:
        for ref in ("files.audit", "files.announce", "files.other_route"):
            assert testing.run(rt, ref)["status"] == "succeeded"
        # the connection is open: runtime.db-wal and -shm exist now
        assert (home / "runtime.db-wal").exists() and (home / "runtime.db-shm").exists()
        assert loose_entries(home) == []
        found = modes(home)
        assert found["rollouts/r1/audit.jsonl"] == 0o600
        assert found["rollouts/r1/report.html"] == 0o600
        assert found["chat.jsonl"] == 0o600 and found["announcements.jsonl"] == 0o600
        assert found["runtime.db-wal"] == 0o600 and found["runtime.db-shm"] == 0o600
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
    finally:
        rt.close()


def test_cli_run_leaves_a_private_home(tmp_path: Path, monkeypatch: Any,
                                       loose_umask: None) -> None:
    pack = make_pack(tmp_path)
    home = tmp_path / "fresh-home"  # created by the CLI itself
    for ref in ("files.audit", "files.announce"):
        proc = testing.cli(home, "run", ref, packs=[str(pack)])
        assert proc.returncode == 0, proc.stderr
    proc = testing.cli(home, "run", "-a", "files.audit", packs=[str(pack)])
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert loose_entries(home) == []
    assert (home / "rollouts" / "r1" / "audit.jsonl").exists()


def test_a_world_readable_home_is_tightened_when_opened(tmp_path: Path,
                                                        loose_umask: None) -> None:
    home = tmp_path / "old-home"
    (home / "configs").mkdir(parents=True)
    (home / "rollouts" / "r0").mkdir(parents=True)
    (home / "configs" / "adv.yaml").write_text(yaml.safe_dump({"password": "x"}))
    (home / "rollouts" / "r0" / "audit.jsonl").write_text("{}\n")
    (home / "chat.jsonl").write_text("")
    os.chmod(home, 0o755)
    # a database an older version left with its -wal/-shm world-readable
    conn = sqlite3.connect(str(home / "runtime.db"))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    try:
        assert (home / "runtime.db-wal").exists()
        assert loose_entries(home)  # the attack surface before the fix
        opened = RuntimeHome(str(home))
        store = Store(str(opened.db_path))
        try:
            assert loose_entries(home) == []
        finally:
            store.close()
    finally:
        conn.close()
