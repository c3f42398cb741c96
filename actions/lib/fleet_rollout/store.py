"""Rollout state in a key-value store: the st2 datastore in production, a file or memory here.

Keys (all under `fleet_rollout.<rollout id>.`):
  plan                  the plan: batches, control group, profile, inventory
  meta                  status, current batch, who started it, timestamps
  halt                  present = stop touching hosts (abort, over budget, canary FAIL)
  host.<name>           per-host state: step reached, snapshots, result, errors
  batch.<n>             per-batch state: approval, verdict, timings
Workflow context only carries the rollout id and counts; any action runner can pick up a host
from here, and a resumed workflow knows where each host is.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Optional

PREFIX = "fleet_rollout"


class Store:
    """Minimal KV interface: string values, prefix listing."""

    def get(self, key: str) -> Optional[str]:
        raise NotImplementedError

    def set(self, key: str, value: str) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def list(self, prefix: str) -> Dict[str, str]:
        raise NotImplementedError

    # JSON helpers
    def get_json(self, key: str, default: Any = None) -> Any:
        value = self.get(key)
        return default if value is None else json.loads(value)

    def set_json(self, key: str, value: Any) -> None:
        self.set(key, json.dumps(value, sort_keys=True))


class MemoryStore(Store):
    def __init__(self) -> None:
        self.data: Dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Optional[str]:
        with self._lock:
            return self.data.get(key)

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self.data[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self.data.pop(key, None)

    def list(self, prefix: str) -> Dict[str, str]:
        with self._lock:
            return {k: v for k, v in self.data.items() if k.startswith(prefix)}


class FileStore(Store):
    """One JSON file per key under a directory (atomic replace): survives process kills."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, key: str) -> str:
        safe = key.replace("/", "%2F")
        return os.path.join(self.directory, safe)

    def get(self, key: str) -> Optional[str]:
        try:
            with open(self._path(key)) as handle:
                return handle.read()
        except OSError:
            return None

    def set(self, key: str, value: str) -> None:
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def delete(self, key: str) -> None:
        try:
            os.remove(self._path(key))
        except OSError:
            pass

    def list(self, prefix: str) -> Dict[str, str]:
        out: Dict[str, str] = {}
        for name in os.listdir(self.directory):
            key = name.replace("%2F", "/")
            if key.startswith(prefix) and not name.endswith(".tmp"):
                value = self.get(key)
                if value is not None:
                    out[key] = value
        return out


class ActionServiceStore(Store):
    """The st2 datastore through a python-script action's `self.action_service`."""

    def __init__(self, action_service: Any) -> None:
        self.service = action_service

    def get(self, key: str) -> Optional[str]:
        return self.service.get_value(key, local=False)

    def set(self, key: str, value: str) -> None:
        self.service.set_value(key, value, local=False)

    def delete(self, key: str) -> None:
        self.service.delete_value(key, local=False)

    def list(self, prefix: str) -> Dict[str, str]:
        items = self.service.list_values(local=False, prefix=prefix) or []
        out: Dict[str, str] = {}
        for item in items:
            name = getattr(item, "name", None) or (item.get("name") if isinstance(item, dict)
                                                   else None)
            value = getattr(item, "value", None) if not isinstance(item, dict) else item.get(
                "value")
            if name is not None and value is not None:
                out[name] = value
        return out


def key(rollout_id: str, *parts: str) -> str:
    return ".".join([PREFIX, rollout_id, *parts])


class RolloutState:
    """Typed access to one rollout's keys."""

    def __init__(self, store: Store, rollout_id: str) -> None:
        self.store = store
        self.id = rollout_id

    def plan(self) -> Dict[str, Any]:
        plan = self.store.get_json(key(self.id, "plan"))
        if plan is None:
            from fleet_rollout.errors import ConfigError

            raise ConfigError(f"rollout {self.id}: no plan in the datastore (unknown id?)")
        return plan

    def save_plan(self, plan: Dict[str, Any]) -> None:
        self.store.set_json(key(self.id, "plan"), plan)

    def meta(self) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "meta"), {}) or {}

    def update_meta(self, **values: Any) -> Dict[str, Any]:
        meta = self.meta()
        meta.update(values)
        self.store.set_json(key(self.id, "meta"), meta)
        return meta

    def halted(self) -> Optional[Dict[str, Any]]:
        return self.store.get_json(key(self.id, "halt"))

    def halt(self, reason: str, by: str = "") -> None:
        if self.halted() is None:
            import time

            self.store.set_json(key(self.id, "halt"), {"reason": reason, "by": by,
                                                       "at": time.time()})

    def clear_halt(self) -> None:
        self.store.delete(key(self.id, "halt"))

    def host(self, name: str) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "host", name), {}) or {}

    def save_host(self, name: str, state: Dict[str, Any]) -> None:
        self.store.set_json(key(self.id, "host", name), state)

    def hosts(self) -> Dict[str, Dict[str, Any]]:
        prefix = key(self.id, "host") + "."
        return {k[len(prefix):]: json.loads(v) for k, v in self.store.list(prefix).items()}

    def fingerprints(self) -> List[Dict[str, Any]]:
        """Probe fingerprints of hosts this rollout changed and verified (the references for
        later batches' verification)."""
        return self.store.get_json(key(self.id, "fingerprints"), []) or []

    def add_fingerprint(self, record: Dict[str, Any], per_model: int = 16) -> bool:
        """Keep the record unless per_model hosts of its CPU model are kept already. A sample:
        two hosts adding at the same moment may keep only one of them."""
        kept = self.fingerprints()
        if any(r.get("host") == record.get("host") for r in kept) or sum(
                1 for r in kept if r.get("cpu_model") == record.get("cpu_model")) >= per_model:
            return False
        self.store.set_json(key(self.id, "fingerprints"), kept + [record])
        return True

    def batch(self, index: int) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "batch", str(index)), {}) or {}

    def save_batch(self, index: int, state: Dict[str, Any]) -> None:
        self.store.set_json(key(self.id, "batch", str(index)), state)
