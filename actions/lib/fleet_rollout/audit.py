"""The audit trail: every change (host, setting, old -> new, when, by which execution, approved
by whom) appended to a JSON-lines file per rollout, and summarised in the report."""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

_LOCK = threading.Lock()


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
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with _LOCK:
            with open(self.path, "a") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())

    def entries(self) -> List[Dict[str, Any]]:
        try:
            with open(self.path) as handle:
                return [json.loads(line) for line in handle if line.strip()]
        except OSError:
            return []

    def summary(self) -> Dict[str, Any]:
        entries = self.entries()
        hosts = sorted({e["host"] for e in entries})
        by_action: Dict[str, int] = {}
        for e in entries:
            by_action[e["action"]] = by_action.get(e["action"], 0) + 1
        return {"entries": len(entries), "hosts": len(hosts), "by_action": by_action,
                "path": self.path}
