"""The audit trail: every change (host, setting, old -> new, when, by which execution, approved
by whom) appended to a JSON-lines file per rollout, and summarised in the report."""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

_LOCK = threading.Lock()
ROLLOUT = "(rollout)"  # the host of entries about the rollout itself (answers)


class Audit:
    def __init__(self, state_dir: str, rollout_id: str) -> None:
        self.path = os.path.join(state_dir, rollout_id, "audit.jsonl")
        self.rollout_id = rollout_id
        self.approved_by: Optional[str] = None

    def record(self, host: str, setting: str, old: Any, new: Any, execution: str = "",
               by: str = "", action: str = "change", approved_by: Optional[str] = None) -> None:
        entry = {"time": time.time(), "rollout": self.rollout_id, "host": host,
                 "setting": setting, "old": old, "new": new, "action": action,
                 "execution": execution, "by": by,
                 "approved_by": approved_by or self.approved_by}
        line = json.dumps(entry, sort_keys=True, default=str) + "\n"
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        with _LOCK:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # one whole line at a time, across processes
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def read(self) -> Tuple[List[Dict[str, Any]], int]:
        """(entries, count of unreadable lines): a line half-written when a process was killed,
        or damaged, is counted and skipped, never fatal to the summary, report or finish."""
        entries: List[Dict[str, Any]] = []
        bad = 0
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        bad += 1
                        continue
                    if isinstance(entry, dict) and isinstance(entry.get("host"), str) and \
                            isinstance(entry.get("action"), str):
                        entries.append(entry)
                    else:
                        bad += 1
        except OSError:
            pass
        return entries, bad

    def entries(self) -> List[Dict[str, Any]]:
        return self.read()[0]

    def summary(self) -> Dict[str, Any]:
        entries, bad = self.read()
        hosts = sorted({e["host"] for e in entries if e["host"] != ROLLOUT})
        by_action: Dict[str, int] = {}
        for e in entries:
            by_action[e["action"]] = by_action.get(e["action"], 0) + 1
        return {"entries": len(entries), "hosts": len(hosts), "by_action": by_action,
                "unreadable_lines": bad, "path": self.path}
