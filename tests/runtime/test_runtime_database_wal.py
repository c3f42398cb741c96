"""Opening the runtime's SQLite database while another process holds it locked."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from fleet_runtime.database import _wal


def _locked_db(tmp_path: Path) -> tuple:
    path = str(tmp_path / "runtime.db")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # what a process recovering or writing holds
    return path, holder


def test_switching_to_wal_waits_for_a_lock_that_is_let_go(tmp_path: Path):
    """SQLite answered "database is locked" at once to the WAL pragma in a kill-and-resume test
    (no busy handler for it there); the switch is retried until the lock is gone. The other
    process is a second connection here; timeout=0 makes SQLite refuse at once, as it did."""
    path, holder = _locked_db(tmp_path)
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode=WAL")  # what it did before
    threading.Timer(0.3, holder.execute, ["COMMIT"]).start()
    _wal(conn)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_lock_that_stays_is_still_an_error(tmp_path: Path):
    path, holder = _locked_db(tmp_path)
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _wal(conn, patience=0.2)
    holder.execute("COMMIT")
