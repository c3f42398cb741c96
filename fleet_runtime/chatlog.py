"""What `chatops.post_message` publishes, and what of it reaches chat.

st2's announcement runner (contrib/runners/announcement_runner) publishes the action's
parameters on the `st2.announcement` exchange with the `route` runner parameter as routing key
(st2common/transport/announcement.py); the stream API turns it into the event
`st2.announcement__<route>` (st2common/stream/listener.py). A chat bot posts only what arrives
on the event it listens to: hubot-stackstorm (the bot of st2chatops) `st2.announcement__chatops`,
err-stackstorm `st2.announcement__errbot`. The runtime plays hubot: route `chatops` reaches chat.

In the runtime home:
- `chat.jsonl`: what reaches chat (route `chatops`: post_message, the `chat` command's lines);
- `announcements.jsonl`: announcements on every other route, which no chat bot receives.
Each line: ts, event, route, channel, user, whisper, message, extra, context.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

CHAT_ROUTE = "chatops"
CHAT_FILE = "chat.jsonl"
ANNOUNCEMENTS_FILE = "announcements.jsonl"

_LOCK = threading.Lock()


def event_name(route: str) -> str:
    return f"st2.announcement__{route}"


def publish(home: Union[str, Path], payload: Dict[str, Any], route: str,
            transcript_only: bool = False,
            mask: Optional[Callable[[Any], Any]] = None) -> Dict[str, Any]:
    """Record one announcement; returns the entry (with `reaches_chat`). `transcript_only`:
    a line of the `chat` command's own conversation, not an announcement (the st2 stream
    does not carry it). `mask` (the runtime's secret masker) is applied to the whole entry:
    a config or datastore secret never reaches chat or the announcement files (0600)."""
    entry: Dict[str, Any] = {
        "ts": time.time(),
        "event": event_name(route),
        "route": route,
        "channel": payload.get("channel"),
        "user": payload.get("user"),
        "whisper": bool(payload.get("whisper")),
        "message": payload.get("message"),
        "extra": payload.get("extra") or {},
        "context": payload.get("context") or {},
    }
    if transcript_only:
        entry["transcript_only"] = True
    if mask is not None:
        entry = dict(mask(entry))
    name = CHAT_FILE if route == CHAT_ROUTE else ANNOUNCEMENTS_FILE
    line = json.dumps(entry, default=str) + "\n"
    with _LOCK:
        fd = os.open(str(Path(home) / name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(line)
    return dict(entry, reaches_chat=route == CHAT_ROUTE)


def _read(path: Path) -> List[Dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def chat_messages(home: Union[str, Path], channel: Optional[str] = None) -> List[Dict[str, Any]]:
    """What reached chat (oldest first), optionally of one channel."""
    entries = _read(Path(home) / CHAT_FILE)
    return [e for e in entries if channel is None or e.get("channel") == channel]


def announcements(home: Union[str, Path], route: Optional[str] = None) -> List[Dict[str, Any]]:
    """Announcements on routes no chat bot listens to (oldest first), optionally of one route."""
    entries = _read(Path(home) / ANNOUNCEMENTS_FILE)
    return [e for e in entries if route is None or e.get("route") == route]
