"""The audit trail: every change (host, setting, old -> new, when, by which execution, approved
by whom), one datastore key per entry, and its summary for the report and the rollout's end.

An entry is never read back and rewritten: each is a key of its own,
`fleet_rollout.<rollout>.audit.<time in ns>-<random>`, so entries written at the same moment
by actions on different action runners are all kept, and the trail reads in time order
wherever it is read (the keys sort by time)."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.store import Store, key

ROLLOUT = "(rollout)"  # the host of entries about the rollout itself (answers)


class Audit:
    def __init__(self, store: Store, rollout_id: str) -> None:
        self.store = store
        self.rollout_id = rollout_id
        self.prefix = key(rollout_id, "audit") + "."
        self.approved_by: Optional[str] = None

    def record(self, host: str, setting: str, old: Any, new: Any, execution: str = "",
               by: str = "", action: str = "change", approved_by: Optional[str] = None) -> None:
        now = time.time_ns()
        entry = {"time": now / 1e9, "rollout": self.rollout_id, "host": host,
                 "setting": setting, "old": old, "new": new, "action": action,
                 "execution": execution, "by": by,
                 "approved_by": approved_by or self.approved_by}
        name = f"{self.prefix}{now:020d}-{uuid.uuid4().hex[:12]}"
        self.store.set(name, json.dumps(entry, sort_keys=True, default=str))

    def read(self) -> Tuple[List[Dict[str, Any]], int]:
        """(entries in time order, count of unreadable entries): a damaged entry is counted and
        skipped, never fatal to the summary, report or finish."""
        entries: List[Dict[str, Any]] = []
        bad = 0
        for _name, value in sorted(self.store.list(self.prefix).items()):
            try:
                entry = json.loads(value)
            except ValueError:
                bad += 1
                continue
            if isinstance(entry, dict) and isinstance(entry.get("host"), str) and \
                    isinstance(entry.get("action"), str):
                entries.append(entry)
            else:
                bad += 1
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
                "unreadable_entries": bad, "keys": self.prefix + "*"}
