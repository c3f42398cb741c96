"""`/stream/v1/stream`: st2stream's server-sent events.

A hub thread watches the runtime database and the announcement files and fans events out to
every connected client: `st2.execution__create` / `__update` (the execution as the API shows
it, secrets masked), `st2.liveaction__create` / `__update`, and `st2.announcement__<route>`
(`{"payload": <what chatops.post_message published: message, channel, user, whisper,
extra, context>, "trace_context": null}`, as st2's AnnouncementDispatcher sends it).
Clients filter with `events=` (globs, st2's default list when absent) and may stop the stream
with `end_event` + `end_execution_id` once that execution completes. An empty line is sent as
heartbeat when nothing happens, as st2stream does.
"""
from __future__ import annotations

import fnmatch
import json
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from fleet_runtime import chatlog
from fleet_runtime.st2api import views
from fleet_runtime.st2api.http import Request, Response, Router
from fleet_runtime.st2api.service import ApiService
from fleet_runtime.statuses import COMPLETED

LOG = logging.getLogger(__name__)

DEFAULT_EVENTS = ["st2.announcement__*", "st2.execution__create", "st2.execution__update",
                  "st2.execution__delete", "st2.liveaction__create", "st2.liveaction__update",
                  "st2.liveaction__delete"]
POLL_SECONDS = 0.25
HEARTBEAT_SECONDS = 10.0
QUEUE_LIMIT = 10000
ANNOUNCEMENT_FIELDS = ("message", "channel", "user", "whisper", "extra", "context")

Event = Tuple[str, Dict[str, Any]]


class StreamHub:
    def __init__(self, service: ApiService) -> None:
        self.service = service
        self.rt = service.rt
        self._clients: List[queue.Queue[Event]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._known: Dict[str, str] = {}
        self._max_rowid = int(self.rt.store.conn.execute(
            "SELECT COALESCE(MAX(rowid), 0) FROM executions").fetchone()[0])
        self._since = time.time()
        self._offsets: Dict[Path, int] = {}
        home = Path(self.rt.home.path)
        for name in (chatlog.CHAT_FILE, chatlog.ANNOUNCEMENTS_FILE):
            path = home / name
            self._offsets[path] = path.stat().st_size if path.exists() else 0
        self._snapshot()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="st2stream")

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self._stop.set()

    def register(self, router: Router) -> None:
        router.add("GET", "/stream/v1/stream", self.stream)

    # ------------------------------------------------------------------ clients
    def subscribe(self) -> queue.Queue[Event]:
        q: queue.Queue[Event] = queue.Queue(maxsize=QUEUE_LIMIT)
        with self._lock:
            self._clients.append(q)
        return q

    def unsubscribe(self, q: queue.Queue[Event]) -> None:
        with self._lock:
            if q in self._clients:
                self._clients.remove(q)

    def emit(self, name: str, body: Dict[str, Any]) -> None:
        with self._lock:
            for q in list(self._clients):
                try:
                    q.put_nowait((name, body))
                except queue.Full:  # a client that does not read: dropped, not buffered
                    self._clients.remove(q)
                    LOG.warning("stream client dropped: %d events unread", QUEUE_LIMIT)

    def stream(self, req: Request) -> Response:
        self.service.check(self.service.rbac.may(req.user, "stream_view"), req.user,
                           "stream_view")
        events = [e for e in (req.query.get("events") or "").split(",") if e] or DEFAULT_EVENTS
        end_event = req.query.get("end_event") or None
        end_id = req.query.get("end_execution_id") or None
        return Response(200, stream=self._generate(events, end_event, end_id))

    def _generate(self, events: List[str], end_event: Optional[str], end_id: Optional[str]
                  ) -> Iterator[bytes]:
        q = self.subscribe()
        try:
            yield b"\n"
            while not self._stop.is_set():
                try:
                    name, body = q.get(timeout=HEARTBEAT_SECONDS)
                except queue.Empty:
                    with self._lock:
                        if q not in self._clients:  # dropped for not reading
                            return
                    yield b"\n"
                    continue
                stop = (name == end_event and end_id is not None and body.get("id") == end_id
                        and body.get("status") in COMPLETED)
                if any(fnmatch.fnmatch(name, glob) for glob in events):
                    data = json.dumps(body, default=str)
                    yield f"event: {name}\ndata: {data}\n\n".encode()
                if stop:
                    return
        finally:
            self.unsubscribe(q)

    # ------------------------------------------------------------------ watching
    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.poll()
            except Exception:  # keep streaming whatever one poll hit
                LOG.exception("stream poll failed")

    def poll(self) -> None:
        """Emit what changed since the last poll (the hub thread calls this every 0.25 s)."""
        self._poll_executions()
        self._poll_announcements()

    def _changed_rows(self) -> List[Any]:
        """Every execution that may have changed since the last poll: those not yet seen
        completed (an execution's status never changes once completed) and those created
        recently or after the newest row seen. Nothing here depends on when a write is
        committed, so an engine that commits late under load loses no event."""
        conn = self.rt.store.conn
        done = ",".join("?" * len(COMPLETED))
        rows = conn.execute(
            f"SELECT rowid, id, status FROM executions WHERE status NOT IN ({done})"
            " OR created_ts >= ? OR rowid > ? ORDER BY created_ts, rowid",
            (*COMPLETED, self._since - 5.0, self._max_rowid)).fetchall()
        open_ids = [i for i, status in self._known.items() if status not in COMPLETED]
        seen = {row["id"] for row in rows}
        missing = [i for i in open_ids if i not in seen]
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows.extend(conn.execute(
                f"SELECT rowid, id, status FROM executions WHERE id IN ({marks})",
                chunk).fetchall())
        for row in rows:
            self._max_rowid = max(self._max_rowid, row["rowid"])
        return rows

    def _snapshot(self) -> None:
        for row in self._changed_rows():
            self._known[row["id"]] = row["status"]

    def _poll_executions(self) -> None:
        now = time.time()
        rows = self._changed_rows()
        for row in rows:
            before = self._known.get(row["id"])
            if before == row["status"]:
                continue
            self._known[row["id"]] = row["status"]
            record = self.rt.store.get_execution(row["id"])
            if record is None:
                continue
            children = None
            if record["runner"] == "orquesta":
                children = [r["id"] for r in self.rt.store.find_executions(
                    "parent_id=?", (record["id"],))]
            body = views.execution(self.rt.registry, record, children)
            # st2 emits create (requested) then an update per status; a poll may see an
            # execution first when it has moved on: create, then its current status
            kinds = ["update"]
            if before is None:
                kinds = ["create"] if record["status"] == "requested" else ["create", "update"]
            for kind in kinds:
                self.emit(f"st2.execution__{kind}", body)
                self.emit(f"st2.liveaction__{kind}", body["liveaction"])
        self._since = now
        if len(self._known) > 10000:  # completed and out of the window: no event can come
            polled = {row["id"] for row in rows}
            self._known = {k: v for k, v in self._known.items()
                           if v not in COMPLETED or k in polled}

    def _poll_announcements(self) -> None:
        for path, offset in list(self._offsets.items()):
            if not path.exists():
                continue
            size = path.stat().st_size
            if size < offset:
                offset = 0
            if size == offset:
                continue
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read(size - offset)
            complete = chunk.rfind(b"\n") + 1
            self._offsets[path] = offset + complete
            for line in chunk[:complete].splitlines():
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    LOG.warning("unreadable announcement line in %s", path.name)
                    continue
                if entry.get("transcript_only"):  # lines of `fleet-rollout chat`
                    continue
                # st2's AnnouncementDispatcher wraps the action's parameters
                payload = {key: entry.get(key) for key in ANNOUNCEMENT_FIELDS}
                body = {"payload": self.rt.masker.mask(payload), "trace_context": None}
                self.emit(entry.get("event") or chatlog.event_name(entry.get("route", "")), body)
