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

import contextlib
import json
import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from fleet_rollout.names import check_rollout_id

PREFIX = "fleet_rollout"
# End states of a rollout, by precedence: when two paths end it (the rollout's own rollback and
# the canary-regression rule's), the worse one stays.
END_RANK = {"completed": 0, "rejected": 1, "aborted": 1, "rolled_back": 2, "failed": 3}
_LOCAL_LOCKS: Dict[str, threading.Lock] = {}
_LOCAL_GUARD = threading.Lock()


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
        os.makedirs(directory, mode=0o700, exist_ok=True)

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
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
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
    """Typed access to one rollout's keys.

    Keys several actions update (meta, halt, batch.<n>, fingerprints) are read-modified-written
    under a lock: a file lock under `lock_dir` (the pack's state_dir: across processes), else a
    lock of this process."""

    def __init__(self, store: Store, rollout_id: str, lock_dir: Optional[str] = None) -> None:
        self.store = store
        self.id = check_rollout_id(rollout_id)
        self.lock_dir = lock_dir

    @contextlib.contextmanager
    def locked(self, part: str) -> Iterator[None]:
        if self.lock_dir:
            from fleet_rollout.locks import rollout_lock

            with rollout_lock(self.lock_dir, self.id, part):
                yield
            return
        with _LOCAL_GUARD:
            lock = _LOCAL_LOCKS.setdefault(f"{self.id}:{part}", threading.Lock())
        with lock:
            yield

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
        with self.locked("meta"):
            meta = self.meta()
            meta.update(values)
            self.store.set_json(key(self.id, "meta"), meta)
            return meta

    def end(self, status: str, **values: Any) -> Dict[str, Any]:
        """Record an end state; returns the meta and whether this call changed the status (only
        that caller announces it). A worse end state replaces a better one, never the reverse."""
        with self.locked("meta"):
            meta = self.meta()
            old = meta.get("status")
            new = status
            if old in END_RANK and END_RANK[old] >= END_RANK.get(status, 0):
                new = old
            changed = new != old
            meta["status"] = new
            if changed:
                meta.update(values)
            self.store.set_json(key(self.id, "meta"), meta)
            return {"meta": meta, "changed": changed}

    def halted(self) -> Optional[Dict[str, Any]]:
        return self.store.get_json(key(self.id, "halt"))

    def halt(self, reason: str, by: str = "") -> None:
        with self.locked("halt"):
            if self.halted() is None:
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
        """Keep the record unless per_model hosts of its CPU model are kept already."""
        with self.locked("fingerprints"):
            kept = self.fingerprints()
            if any(r.get("host") == record.get("host") for r in kept) or sum(
                    1 for r in kept if r.get("cpu_model") == record.get("cpu_model")) >= \
                    per_model:
                return False
            self.store.set_json(key(self.id, "fingerprints"), kept + [record])
            return True

    def batch(self, index: int) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "batch", str(index)), {}) or {}

    def save_batch(self, index: int, state: Dict[str, Any]) -> None:
        self.store.set_json(key(self.id, "batch", str(index)), state)

    def update_batch(self, index: int,
                     change: Callable[[Dict[str, Any]], Any]) -> Dict[str, Any]:
        """Read batch `index`, let `change` modify it, write it back: under the batch's lock."""
        with self.locked(f"batch.{index}"):
            state = self.batch(index)
            change(state)
            self.save_batch(index, state)
            return state
