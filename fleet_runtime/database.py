"""SQLite persistence: executions, task executions, workflow state, events, datastore, triggers.

WAL journal with `synchronous=NORMAL`: a committed transaction survives the process being
killed at any moment (it is in the WAL file); only an OS crash can lose the last commits.
Every connection is per thread (sqlite3 objects must not cross threads).
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence

SCHEMA_VERSION = 1

# the datastore table; fleet_runtime.datastore creates it on its own too
KV_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT,
    secret INTEGER NOT NULL DEFAULT 0,
    expire_ts REAL,
    updated_ts REAL NOT NULL,
    PRIMARY KEY (scope, name)
);
-- the masker asks "did an encrypted key change?" before every output it masks: a look at the
-- few secret rows, not a scan of every key (a rollout stores a key per host)
CREATE INDEX IF NOT EXISTS ix_kv_secret ON kv(updated_ts) WHERE secret=1;
"""

_SCHEMA = KV_SCHEMA + """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    runner TEXT NOT NULL,
    status TEXT NOT NULL,
    parent_id TEXT,
    root_id TEXT NOT NULL,
    task_ex_id TEXT,
    task_id TEXT,
    task_route INTEGER,
    item_id INTEGER,
    parameters TEXT NOT NULL,
    context TEXT NOT NULL,
    result TEXT,
    created_ts REAL NOT NULL,
    start_ts REAL,
    end_ts REAL,
    due_ts REAL,
    log TEXT NOT NULL DEFAULT '[]',
    runner_info TEXT
);
CREATE INDEX IF NOT EXISTS ix_ex_parent ON executions(parent_id);
CREATE INDEX IF NOT EXISTS ix_ex_status ON executions(status);
CREATE INDEX IF NOT EXISTS ix_ex_task ON executions(task_ex_id);
CREATE TABLE IF NOT EXISTS task_executions (
    id TEXT PRIMARY KEY,
    wf_ex_id TEXT NOT NULL,
    action_ex_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task_route INTEGER NOT NULL,
    status TEXT NOT NULL,
    itemized INTEGER NOT NULL,
    items_count INTEGER,
    concurrency INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    start_ts REAL NOT NULL,
    end_ts REAL
);
CREATE INDEX IF NOT EXISTS ix_tex_wf ON task_executions(wf_ex_id, task_id, task_route);
CREATE TABLE IF NOT EXISTS workflows (
    id TEXT PRIMARY KEY,
    action_ex_id TEXT NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    graph TEXT NOT NULL,
    input TEXT NOT NULL,
    context TEXT NOT NULL,
    state TEXT NOT NULL,
    errors TEXT NOT NULL,
    log TEXT NOT NULL,
    output TEXT,
    status TEXT NOT NULL,
    notify TEXT,
    applied_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_events_target ON events(target_id, seq);
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'new',
    response TEXT,
    ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trigger_instances (
    id TEXT PRIMARY KEY,
    trigger TEXT NOT NULL,
    payload TEXT NOT NULL,
    occurrence_ts REAL NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rule_enforcements (
    id TEXT PRIMARY KEY,
    rule TEXT NOT NULL,
    trigger_instance_id TEXT NOT NULL,
    execution_id TEXT,
    status TEXT NOT NULL,
    failure_reason TEXT,
    ts REAL NOT NULL
);
"""

EXECUTION_COLUMNS = (
    "id",
    "action",
    "runner",
    "status",
    "parent_id",
    "root_id",
    "task_ex_id",
    "task_id",
    "task_route",
    "item_id",
    "parameters",
    "context",
    "result",
    "created_ts",
    "start_ts",
    "end_ts",
    "due_ts",
    "log",
    "runner_info",
)
_JSON_EXECUTION_FIELDS = ("parameters", "context", "result", "log", "runner_info")
# columns added after a home's database was created: added to it when it is opened
_ADDED_COLUMNS = {"executions": {"runner_info": "TEXT"}}

_counter_lock = threading.Lock()
_counter = int.from_bytes(os.urandom(3), "big")
_PROCESS_RANDOM = os.urandom(5).hex()


def _reseed_ids() -> None:
    """A forked process must not repeat its parent's ids (like ObjectId's fork handling)."""
    global _counter, _PROCESS_RANDOM
    _counter = int.from_bytes(os.urandom(3), "big")
    _PROCESS_RANDOM = os.urandom(5).hex()


os.register_at_fork(after_in_child=_reseed_ids)


def new_id() -> str:
    """A 24-hex-digit id shaped like a MongoDB ObjectId (time, random, counter), sortable."""
    global _counter
    with _counter_lock:
        _counter = (_counter + 1) % 0xFFFFFF
        count = _counter
    return f"{int(time.time()) & 0xFFFFFFFF:08x}{_PROCESS_RANDOM}{count:06x}"


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def loads(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)


def make_db_private(path: str) -> None:
    """The database and its -wal/-shm files are 0600: created so before SQLite opens it (SQLite
    gives the -wal and -shm files the database file's mode), tightened when found looser."""
    if path == ":memory:":
        return
    # Never open (and close) an existing database file here: closing any descriptor of it
    # drops the POSIX locks SQLite's other connections of this process hold on it.
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:
        return
    for name in (path, path + "-wal", path + "-shm", path + "-journal"):
        try:
            mode = os.stat(name).st_mode
            if mode & 0o077:
                os.chmod(name, mode & 0o700)
        except OSError:
            continue


def _wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Switch `conn`'s database to WAL. SQLite can answer this pragma "database is locked" at
    once, without its busy handler (another process recovering the WAL of one that was killed:
    a kill-and-resume test met it), so it is retried here for up to `patience` seconds."""
    deadline = time.monotonic() + patience
    pause = 0.02
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(0.5, pause * 2)


def _add_columns(conn: sqlite3.Connection) -> None:
    """Columns of _ADDED_COLUMNS a database made before them lacks (another process may add
    one at the same moment)."""
    for table, columns in _ADDED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name in have:
                continue
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise


def thread_connection(local: threading.local, path: str) -> sqlite3.Connection:
    """The calling thread's SQLite connection to `path` (WAL, autocommit), opened on first use."""
    conn = getattr(local, "conn", None)
    if conn is None:
        make_db_private(path)
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        _wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        local.conn = conn
    return conn


class Store:
    """Thread-aware access to the runtime database."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._local = threading.local()
        conn = self.conn
        conn.executescript(_SCHEMA)
        _add_columns(conn)
        with self.transaction() as c:
            row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                c.execute(
                    "INSERT INTO meta(key, value) VALUES('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass

    # ------------------------------------------------------------------ connections
    @property
    def conn(self) -> sqlite3.Connection:
        return thread_connection(self._local, self.path)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield conn
            finally:
                self._local.depth -= 1
            return
        conn.execute("BEGIN IMMEDIATE")
        self._local.depth = 1
        try:
            yield conn
        except BaseException:
            self._local.depth = 0
            conn.execute("ROLLBACK")
            raise
        self._local.depth = 0
        conn.execute("COMMIT")

    # ------------------------------------------------------------------ executions
    @staticmethod
    def _execution_from_row(row: sqlite3.Row) -> Dict[str, Any]:
        record = dict(row)
        for key in _JSON_EXECUTION_FIELDS:
            record[key] = loads(record[key])
        return record

    def insert_execution(self, record: Dict[str, Any]) -> None:
        values = [
            dumps(record.get(k)) if k in _JSON_EXECUTION_FIELDS else record.get(k)
            for k in EXECUTION_COLUMNS
        ]
        for key in ("result", "runner_info"):
            if record.get(key) is None:
                values[EXECUTION_COLUMNS.index(key)] = None
        placeholders = ",".join("?" for _ in EXECUTION_COLUMNS)
        self.conn.execute(
            f"INSERT INTO executions({','.join(EXECUTION_COLUMNS)}) VALUES({placeholders})",
            values,
        )

    def update_execution(self, ex_id: str, **fields: Any) -> None:
        if not fields:
            return
        sets = []
        values: List[Any] = []
        for key, value in fields.items():
            if key not in EXECUTION_COLUMNS:
                raise KeyError(key)
            sets.append(f"{key}=?")
            values.append(dumps(value) if key in _JSON_EXECUTION_FIELDS else value)
        values.append(ex_id)
        self.conn.execute(f"UPDATE executions SET {','.join(sets)} WHERE id=?", values)

    def get_execution(self, ex_id: str) -> Optional[Dict[str, Any]]:
        row = self.conn.execute("SELECT * FROM executions WHERE id=?", (ex_id,)).fetchone()
        return self._execution_from_row(row) if row else None

    def find_executions(
        self,
        where: str = "1=1",
        args: Sequence[Any] = (),
        order: str = "created_ts, rowid",
        limit: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        sql = f"SELECT * FROM executions WHERE {where} ORDER BY {order}"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._execution_from_row(r) for r in self.conn.execute(sql, tuple(args))]

    def resolve_execution_id(self, prefix: str) -> Optional[str]:
        """Full id from an id or a unique prefix of at least 6 characters."""
        row = self.conn.execute("SELECT id FROM executions WHERE id=?", (prefix,)).fetchone()
        if row:
            return str(row["id"])
        if len(prefix) < 6:
            return None
        rows = self.conn.execute(
            "SELECT id FROM executions WHERE id LIKE ? LIMIT 2", (prefix + "%",)
        ).fetchall()
        return str(rows[0]["id"]) if len(rows) == 1 else None

    # ------------------------------------------------------------------ task executions
    def insert_task_execution(self, record: Dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO task_executions(id, wf_ex_id, action_ex_id, task_id, task_route, status,"
            " itemized, items_count, concurrency, attempt, result, start_ts, end_ts)"
            " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record["id"],
                record["wf_ex_id"],
                record["action_ex_id"],
                record["task_id"],
                record["task_route"],
                record["status"],
                1 if record.get("itemized") else 0,
                record.get("items_count"),
                record.get("concurrency"),
                record.get("attempt", 0),
                dumps(record.get("result")) if record.get("result") is not None else None,
                record["start_ts"],
                record.get("end_ts"),
            ),
        )

    def update_task_execution(self, tex_id: str, **fields: Any) -> None:
        sets, values = [], []
        for key, value in fields.items():
            sets.append(f"{key}=?")
            values.append(dumps(value) if key == "result" and value is not None else value)
        values.append(tex_id)
        self.conn.execute(f"UPDATE task_executions SET {','.join(sets)} WHERE id=?", values)

    def task_executions(self, where: str, args: Sequence[Any] = ()) -> List[Dict[str, Any]]:
        rows = self.conn.execute(
            f"SELECT * FROM task_executions WHERE {where} ORDER BY start_ts, rowid", tuple(args)
        ).fetchall()
        out = []
        for row in rows:
            rec = dict(row)
            rec["result"] = loads(rec["result"])
            out.append(rec)
        return out

    # ------------------------------------------------------------------ workflows
    def insert_workflow(self, record: Dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO workflows(id, action_ex_id, spec, graph, input, context, state, errors,"
            " log, output, status, notify, applied_seq) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record["id"],
                record["action_ex_id"],
                dumps(record["spec"]),
                dumps(record["graph"]),
                dumps(record["input"]),
                dumps(record["context"]),
                dumps(record["state"]),
                dumps(record["errors"]),
                dumps(record["log"]),
                dumps(record.get("output")),
                record["status"],
                dumps(record.get("notify")),
                record.get("applied_seq", 0),
            ),
        )

    def save_workflow_state(
        self,
        wf_id: str,
        state: Any,
        errors: List[Any],
        log: List[Any],
        output: Any,
        status: str,
        applied_seq: int,
    ) -> None:
        self.conn.execute(
            "UPDATE workflows SET state=?, errors=?, log=?, output=?, status=?, applied_seq=?"
            " WHERE id=?",
            (
                state if isinstance(state, str) else dumps(state),
                dumps(errors),
                dumps(log),
                dumps(output),
                status,
                applied_seq,
                wf_id,
            ),
        )

    def get_workflow(
        self, wf_id: Optional[str] = None, action_ex_id: Optional[str] = None
    ) -> Optional[Dict[str, Any]]:
        if wf_id:
            row = self.conn.execute("SELECT * FROM workflows WHERE id=?", (wf_id,)).fetchone()
        else:
            row = self.conn.execute(
                "SELECT * FROM workflows WHERE action_ex_id=?", (action_ex_id,)
            ).fetchone()
        if not row:
            return None
        rec = dict(row)
        for key in ("spec", "graph", "input", "context", "state", "errors", "log", "output"):
            rec[key] = loads(rec[key])
        rec["notify"] = loads(rec["notify"])
        return rec

    # ------------------------------------------------------------------ events
    def append_event(self, target_id: str, kind: str, payload: Dict[str, Any]) -> int:
        cur = self.conn.execute(
            "INSERT INTO events(target_id, kind, payload, ts) VALUES(?,?,?,?)",
            (target_id, kind, dumps(payload), time.time()),
        )
        return int(cur.lastrowid)

    def events_after(self, target_id: str, seq: int) -> List[Dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT * FROM events WHERE target_id=? AND seq>? ORDER BY seq", (target_id, seq)
        ).fetchall()
        return [
            {"seq": r["seq"], "kind": r["kind"], "payload": loads(r["payload"]), "ts": r["ts"]}
            for r in rows
        ]

    # ------------------------------------------------------------------ requests
    def add_request(self, op: str, payload: Dict[str, Any]) -> int:
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO requests(op, payload, ts) VALUES(?,?,?)",
                (op, dumps(payload), time.time()),
            )
            return int(cur.lastrowid)

    def pending_requests(self) -> List[Dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT * FROM requests WHERE status='new' ORDER BY seq"
        ).fetchall()
        return [{"seq": r["seq"], "op": r["op"], "payload": loads(r["payload"])} for r in rows]

    def finish_request(self, seq: int, status: str, response: Any) -> None:
        with self.transaction() as c:
            c.execute(
                "UPDATE requests SET status=?, response=? WHERE seq=?",
                (status, dumps(response), seq),
            )

    def get_request(self, seq: int) -> Optional[Dict[str, Any]]:
        row = self.conn.execute("SELECT * FROM requests WHERE seq=?", (seq,)).fetchone()
        if not row:
            return None
        return {"seq": row["seq"], "status": row["status"], "response": loads(row["response"])}

    # ------------------------------------------------------------------ size
    def size_report(self, root_id: str) -> Dict[str, int]:
        """Bytes persisted for one root execution (rows of every table that refer to it)."""
        ids = [
            r["id"]
            for r in self.conn.execute("SELECT id FROM executions WHERE root_id=?", (root_id,))
        ]
        report = {"executions": 0, "task_executions": 0, "workflows": 0, "events": 0}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" for _ in chunk)
            report["executions"] += int(
                self.conn.execute(
                    "SELECT COALESCE(SUM(LENGTH(parameters)+LENGTH(context)+"
                    "COALESCE(LENGTH(result),0)+LENGTH(log)+LENGTH(action)+LENGTH(id)*3+64),0)"
                    f" FROM executions WHERE id IN ({marks})",
                    chunk,
                ).fetchone()[0]
            )
            report["task_executions"] += int(
                self.conn.execute(
                    "SELECT COALESCE(SUM(COALESCE(LENGTH(result),0)+LENGTH(task_id)+96),0)"
                    f" FROM task_executions WHERE action_ex_id IN ({marks})",
                    chunk,
                ).fetchone()[0]
            )
            wf_ids = [
                r["id"]
                for r in self.conn.execute(
                    f"SELECT id FROM workflows WHERE action_ex_id IN ({marks})", chunk
                )
            ]
            for wf_id in wf_ids:
                report["workflows"] += int(
                    self.conn.execute(
                        "SELECT LENGTH(spec)+LENGTH(graph)+LENGTH(input)+LENGTH(context)+"
                        "LENGTH(state)+LENGTH(errors)+LENGTH(log)+COALESCE(LENGTH(output),0)"
                        " FROM workflows WHERE id=?",
                        (wf_id,),
                    ).fetchone()[0]
                )
                report["events"] += int(
                    self.conn.execute(
                        "SELECT COALESCE(SUM(LENGTH(payload)+40),0) FROM events WHERE target_id=?",
                        (wf_id,),
                    ).fetchone()[0]
                )
        report["total"] = sum(report.values())
        return report
