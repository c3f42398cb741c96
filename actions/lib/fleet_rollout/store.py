"""Rollout state in a key-value store: the st2 datastore in production, a file or memory here.

Keys (all under `fleet_rollout.<rollout id>.`):
  plan.head             the plan's head: profile, inventory, limit, counts, control group, one
                        short entry per batch and the layout of the keys below (written last:
                        its presence means the whole plan is stored)
  plan.batch.<n>.<k>    batch n's host names (and sites), PLAN_PART names a key
  plan.hosts.<b>        per-host plan info (FleetHost fields, batch index) of the hosts that
                        hash (crc32) to bucket b: at most ~PLAN_BUCKET hosts a key
  plan.compliant.<k>    names of the hosts skipped as already compliant, PLAN_PART a key
  plan                  the whole plan as one document: rollouts planned before the split
                        (still read; never written any more)
No plan key grows with the fleet: a host step reads the head and its host's bucket.
  meta.<field>          status, current batch, who started it, timestamps: a key a field
  halt                  present = stop touching hosts (abort, over budget, canary FAIL)
  host.<name>           per-host state: step reached, snapshots, result, errors (written only
                        by the host's own actions, which StackStorm runs one at a time)
  batch.<n>.state.<f>   per-batch state: approval, verdict, timings: a key a field
  batch.<n>.counters.<label>  the batch's drop counters (gate.py)
  fingerprint.<host>    the probe fingerprint of a verified host
  stale.<id>.<field>    what the watchdog did about a host action whose runner died
  audit.<time>-<id>     one audit trail entry a key (audit.py)
Global keys (under `fleet_rollout._hosts.<host>.`, claims.py): which rollout holds a host.
Workflow context only carries the rollout id and counts; any action runner can pick up a host
from here, and a resumed workflow knows where each host is.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
import zlib
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from fleet_rollout import states
from fleet_rollout.names import check_rollout_id

PREFIX = "fleet_rollout"
# End states of a rollout, by precedence: when two paths end it (the rollout's own rollback and
# the canary-regression rule's), the worse one stays.
END_RANK = states.END_RANK
_LOCAL_LOCKS: Dict[str, threading.Lock] = {}
_LOCAL_GUARD = threading.Lock()
_ABSENT = object()


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


# keys one datastore listing answers at most (st2's api.max_page_size default); a store lists
# page by page
PAGE = 100


class ActionServiceStore(Store):
    """The st2 datastore through a python-script action's `self.action_service`."""

    def __init__(self, action_service: Any) -> None:
        self.service = action_service

    def get(self, key: str) -> Optional[str]:
        value = self.service.get_value(key, local=False)
        if value is not None:
            return value
        # st2's get_value answers None for every failure too (a refused grant, a busy st2api);
        # a listing raises them: a key that could not be read is never taken for an absent one
        return self.list(key).get(key)

    def set(self, key: str, value: str) -> None:
        self.service.set_value(key, value, local=False)

    def delete(self, key: str) -> None:
        self.service.delete_value(key, local=False)

    def list(self, prefix: str) -> Dict[str, str]:
        """Every key under `prefix`: st2 answers a page (api.max_page_size) per request."""
        out: Dict[str, str] = {}
        offset = 0
        while True:
            items = self.service.list_values(local=False, prefix=prefix, limit=PAGE,
                                             offset=offset) or []
            for item in items:
                name = getattr(item, "name", None) or (
                    item.get("name") if isinstance(item, dict) else None)
                value = getattr(item, "value", None) if not isinstance(item, dict) else \
                    item.get("value")
                if name is not None and value is not None:
                    out[name] = value
            if len(items) < PAGE:
                return out
            offset += len(items)


def key(rollout_id: str, *parts: str) -> str:
    return ".".join([PREFIX, rollout_id, *parts])


PLAN_SCHEMA = 2
PLAN_BUCKET = 256  # hosts per plan.hosts.<b> key (on average; crc32 spreads them)
PLAN_PART = 1000  # host names per plan.batch.<n>.<k> and plan.compliant.<k> key
_SPLIT = ("batches", "hosts", "skipped_compliant")  # the parts that grow with the fleet


def host_bucket(name: str, buckets: int) -> int:
    """The plan.hosts.<b> key that holds host `name` (stable across processes and versions)."""
    return zlib.crc32(name.encode("utf-8")) % max(1, int(buckets))


def _parts(items: Sequence[Any], size: int) -> List[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [items[:0]]


def split_plan(plan: Dict[str, Any]) -> Dict[str, Any]:
    """The datastore values of `plan`, key part (after `<id>.`) -> JSON value; `plan.head` is
    the last item (written last). Nothing but the head's per-batch entries grows with the
    number of batches, and nothing grows with the number of hosts."""
    values: Dict[str, Any] = {}
    head = {k: v for k, v in plan.items() if k not in _SPLIT}
    layout: Dict[str, Any] = {"schema": PLAN_SCHEMA, "present": [k for k in _SPLIT if k in plan]}
    if "batches" in plan:
        summaries = []
        for position, batch in enumerate(plan["batches"]):
            names = list(batch.get("hosts") or [])
            chunks = _parts(names, PLAN_PART)
            for k, chunk in enumerate(chunks):
                doc: Dict[str, Any] = {"hosts": list(chunk)}
                if k == 0 and "sites" in batch:
                    doc["sites"] = batch["sites"]
                values[f"plan.batch.{position}.{k}"] = doc
            summaries.append({"entry": {f: v for f, v in batch.items()
                                        if f not in ("hosts", "sites")},
                              "size": len(names), "parts": len(chunks),
                              "fields": [f for f in batch if f in ("hosts", "sites")]})
        layout["batches"] = summaries
    if "hosts" in plan:
        infos = plan["hosts"] or {}
        batch_of: Dict[str, int] = {}
        for position, batch in enumerate(plan.get("batches") or []):
            for name in batch.get("hosts") or []:
                batch_of.setdefault(name, batch.get("index", position))
        buckets = max(1, int(math.ceil(len(infos) / float(PLAN_BUCKET))))
        docs: List[Dict[str, Any]] = [{} for _ in range(buckets)]
        for name, info in infos.items():
            docs[host_bucket(name, buckets)][name] = {"host": info, "batch": batch_of.get(name)}
        for b, doc in enumerate(docs):
            values[f"plan.hosts.{b}"] = doc
        layout.update(host_buckets=buckets, host_count=len(infos))
    if "skipped_compliant" in plan:
        names = list(plan["skipped_compliant"] or [])
        chunks = _parts(names, PLAN_PART)
        for k, chunk in enumerate(chunks):
            values[f"plan.compliant.{k}"] = list(chunk)
        layout.update(compliant_parts=len(chunks), compliant_count=len(names))
    head["_layout"] = layout
    values["plan.head"] = head
    return values


class _LazyBatch(Mapping):
    """One batch of a stored plan: index, canary (the head's entry) at once; hosts and sites
    read from its keys when asked for."""

    def __init__(self, view: PlanView, position: int, summary: Dict[str, Any]) -> None:
        self._view = view
        self._position = position
        self._summary = summary
        self._loaded: Optional[Dict[str, Any]] = None

    def _fields(self) -> List[str]:
        return list(self._summary["entry"]) + list(self._summary["fields"])

    def _load(self) -> Dict[str, Any]:
        if self._loaded is None:
            self._loaded = self._view.state.plan_batch_doc(self._position, self._summary)
        return self._loaded

    def __getitem__(self, name: str) -> Any:
        entry = self._summary["entry"]
        if name in entry:
            return entry[name]
        if name in self._summary["fields"]:
            return self._load()[name]
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields())

    def __len__(self) -> int:
        return len(self._fields())

    @property
    def size(self) -> int:
        return int(self._summary["size"])


class _LazyHosts(Mapping):
    """plan["hosts"] of a stored plan: `get(name)` reads only that host's bucket."""

    def __init__(self, view: PlanView) -> None:
        self._view = view

    def __getitem__(self, name: str) -> Any:
        entry = self._view.host_entry(name)
        if entry is None:
            raise KeyError(name)
        return entry["host"]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._view.host_entry(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._view.all_hosts())

    def __len__(self) -> int:
        return int(self._view.layout.get("host_count", 0))


class PlanView(Mapping):
    """A stored plan, read lazily: the head at once (profile, inventory, counts, control group,
    batch count), a batch's hosts, a host's info or the compliant list only when asked for.
    Reads like the plan document (`view["batches"][i]["hosts"]`, `view["hosts"].get(name)`);
    `dict(view)`/`view.full()` assembles all of it. A plan stored before the split (one
    document) is served from that document."""

    def __init__(self, state: RolloutState, head: Dict[str, Any],
                 legacy: Optional[Dict[str, Any]] = None) -> None:
        self.state = state
        self.legacy = legacy
        self.head = head
        self.layout: Dict[str, Any] = head.get("_layout") or {}
        self._buckets: Dict[int, Dict[str, Any]] = {}
        self._batches: Optional[List[_LazyBatch]] = None
        self._compliant: Optional[List[str]] = None
        self._where: Optional[Dict[str, Optional[int]]] = None

    def __bool__(self) -> bool:
        return True

    def _keys(self) -> List[str]:
        if self.legacy is not None:
            return list(self.legacy)
        return [k for k in self.head if k != "_layout"] + list(self.layout.get("present", []))

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, name: object) -> bool:
        return name in self._keys()

    def __getitem__(self, name: str) -> Any:
        if self.legacy is not None:
            return self.legacy[name]
        if name == "_layout":
            raise KeyError(name)
        if name in self.head:
            return self.head[name]
        if name not in self.layout.get("present", []):
            raise KeyError(name)
        if name == "batches":
            if self._batches is None:
                self._batches = [_LazyBatch(self, i, s)
                                 for i, s in enumerate(self.layout["batches"])]
            return self._batches
        if name == "hosts":
            return _LazyHosts(self)
        if self._compliant is None:
            self._compliant = self.state.plan_compliant(self.layout)
        return self._compliant

    # -- cheap questions
    def batch_count(self) -> int:
        if self.legacy is not None:
            return len(self.legacy.get("batches") or [])
        return len(self.layout.get("batches") or [])

    def batch_size(self, position: int) -> int:
        if self.legacy is not None:
            return len(self.legacy["batches"][position]["hosts"])
        return int(self.layout["batches"][position]["size"])

    def compliant_count(self) -> int:
        """How many hosts were skipped as compliant (without reading their names)."""
        if self.legacy is not None or "compliant_count" not in self.layout:
            return len(self.get("skipped_compliant") or [])
        return int(self.layout["compliant_count"])

    def host_entry(self, name: str) -> Optional[Dict[str, Any]]:
        """{"host": FleetHost fields, "batch": index or None}; None when not in the plan."""
        if self.legacy is not None:
            info = (self.legacy.get("hosts") or {}).get(name)
            if self._where is None:
                self._where = {}
                for position, b in enumerate(self.legacy.get("batches") or []):
                    for h in b.get("hosts") or []:
                        self._where.setdefault(h, b.get("index", position))
            if info is None:
                return None
            return {"host": info, "batch": self._where.get(name)}
        if "hosts" not in self.layout.get("present", []):
            return None
        bucket = host_bucket(name, self.layout["host_buckets"])
        if bucket not in self._buckets:
            self._buckets[bucket] = self.state.plan_bucket(bucket)
        return self._buckets[bucket].get(name)

    def batch_of(self, name: str) -> Optional[int]:
        """The index of the batch that changes `name`: one bucket read, no batch read."""
        if self.legacy is not None:
            self.host_entry(name)
            return (self._where or {}).get(name)
        entry = self.host_entry(name)
        return None if entry is None else entry.get("batch")

    def all_hosts(self) -> Dict[str, Any]:
        if self.legacy is not None:
            return dict(self.legacy.get("hosts") or {})
        out: Dict[str, Any] = {}
        for b in range(int(self.layout.get("host_buckets", 0))):
            if b not in self._buckets:
                self._buckets[b] = self.state.plan_bucket(b)
            out.update({n: e["host"] for n, e in self._buckets[b].items()})
        return dict(sorted(out.items()))

    def full(self) -> Dict[str, Any]:
        """The whole plan document (as stored before the split)."""
        if self.legacy is not None:
            return self.legacy
        plan: Dict[str, Any] = {}
        for name in self._keys():
            value = self[name]
            if name == "batches":
                value = [dict(b) for b in value]
            elif name == "hosts":
                value = self.all_hosts()
            elif name == "skipped_compliant":
                value = list(value)
            plan[name] = value
        return plan


class RolloutState:
    """Typed access to one rollout's keys.

    Nothing here needs a file shared between action runners. Keys with several writers are
    split so that no writer reads, modifies and writes back what another writes: the meta, a
    batch's state and a stale record keep each field in a key of its own (`meta.<field>`,
    `batch.<n>.state.<field>`, `stale.<execution>.<field>`), fingerprints one key per host. A
    field two actions may change at the same moment is changed by
    an action that a StackStorm concurrency policy serialises (finish: one per rollout; host
    steps: one per host; the watchdog: one at a time). Within one process the updates also
    hold a thread lock (tests and tools run several at once)."""

    def __init__(self, store: Store, rollout_id: str) -> None:
        self.store = store
        self.id = check_rollout_id(rollout_id)
        self._view: Optional[PlanView] = None

    @contextlib.contextmanager
    def locked(self, part: str) -> Iterator[None]:
        """This process's lock of one part of the rollout's state."""
        with _LOCAL_GUARD:
            lock = _LOCAL_LOCKS.setdefault(f"{self.id}:{part}", threading.Lock())
        with lock:
            yield

    def _fields(self, part: str) -> Dict[str, Any]:
        """The document `part` (meta, batch.<n>, ...) put together from its field keys
        `part.<field>`."""
        doc: Dict[str, Any] = {}
        prefix = key(self.id, part) + "."
        for name, value in self.store.list(prefix).items():
            field_name = name[len(prefix):]
            if field_name and "." not in field_name:
                doc[field_name] = json.loads(value)
        return doc

    def _set_fields(self, part: str, values: Dict[str, Any]) -> None:
        for name, value in values.items():
            if not isinstance(name, str) or not name or "." in name:
                raise ValueError(f"{part}: field name {name!r}")
            self.store.set_json(key(self.id, part, name), value)

    def _update_fields(self, part: str, change: Callable[[Dict[str, Any]], Any]
                       ) -> Dict[str, Any]:
        """Let `change` modify the document, write back only the fields it changed."""
        with self.locked(part):
            doc = self._fields(part)
            before = json.loads(json.dumps(doc, sort_keys=True, default=str))
            change(doc)
            changed = {k: v for k, v in doc.items() if before.get(k, _ABSENT) != v}
            self._set_fields(part, changed)
            for gone in set(before) - set(doc):
                self.store.delete(key(self.id, part, gone))
            return doc

    def plan(self) -> Dict[str, Any]:
        """The whole plan document (every batch, every host's info): for what shows all of it.
        A host step reads plan_view() instead."""
        return self.plan_view().full()

    def plan_exists(self) -> bool:
        return self.store.get(key(self.id, "plan", "head")) is not None or \
            self.store.get(key(self.id, "plan")) is not None

    def plan_view(self) -> PlanView:
        """The plan, read lazily (PlanView): one small key now, the rest when asked for (kept:
        a plan does not change once stored)."""
        if self._view is not None:
            return self._view
        head = self.store.get_json(key(self.id, "plan", "head"))
        if head is not None:
            self._view = PlanView(self, head)
            return self._view
        legacy = self.store.get_json(key(self.id, "plan"))  # planned before the split
        if legacy is None:
            from fleet_rollout.errors import ConfigError

            raise ConfigError(f"rollout {self.id}: no plan in the datastore (unknown id?)")
        self._view = PlanView(self, {k: v for k, v in legacy.items() if k not in _SPLIT},
                              legacy)
        return self._view

    def plan_head(self) -> Dict[str, Any]:
        """The plan without its batches' hosts, host infos and compliant list (one key)."""
        return {k: v for k, v in self.plan_view().head.items() if k != "_layout"}

    def plan_batch(self, index: int) -> List[str]:
        """The host names of batch `index` (its keys only)."""
        view = self.plan_view()
        batches = view["batches"]
        for batch in batches:
            if batch["index"] == index:
                return list(batch["hosts"])
        raise IndexError(f"rollout {self.id} has batches 0..{len(batches) - 1}")

    def plan_host(self, name: str) -> Optional[Dict[str, Any]]:
        """{"host": FleetHost fields, "batch": index or None} of `name` (the head and its
        bucket only); None when the plan does not name it."""
        return self.plan_view().host_entry(name)

    def plan_batch_doc(self, position: int, summary: Dict[str, Any]) -> Dict[str, Any]:
        doc: Dict[str, Any] = {}
        names: List[str] = []
        for k in range(int(summary["parts"])):
            part = self.store.get_json(key(self.id, "plan", "batch", str(position), str(k)))
            if part is None:
                raise KeyError(f"rollout {self.id}: plan batch {position} part {k} missing")
            names.extend(part.pop("hosts", []))
            doc.update(part)
        doc["hosts"] = names
        return doc

    def plan_bucket(self, bucket: int) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "plan", "hosts", str(bucket)), {}) or {}

    def plan_compliant(self, layout: Dict[str, Any]) -> List[str]:
        names: List[str] = []
        for k in range(int(layout.get("compliant_parts", 0))):
            names.extend(self.store.get_json(key(self.id, "plan", "compliant", str(k)), []) or [])
        return names

    def save_plan(self, plan: Dict[str, Any]) -> None:
        """Store `plan` split (split_plan): the head last, so a reader finds all or nothing.
        (Once per rollout: plan_rollout refuses an id that has a plan.)"""
        self._view = None
        for part, value in split_plan(plan).items():
            self.store.set(key(self.id, part), json.dumps(value, sort_keys=True,
                                                          separators=(",", ":")))

    def meta(self) -> Dict[str, Any]:
        return self._fields("meta")

    def update_meta(self, **values: Any) -> Dict[str, Any]:
        with self.locked("meta"):
            self._set_fields("meta", values)
        return self.meta()

    def end(self, status: str, **values: Any) -> Dict[str, Any]:
        """Record an end state; returns the meta and whether this call changed the status (only
        that caller announces it). A worse end state replaces a better one, never the reverse.
        Its only caller, `fleet_rollout.finish`, runs one at a time per rollout (its
        concurrency policy), so two ends never read the status at the same moment."""
        with self.locked("meta"):
            old = self.meta().get("status")
            new = status
            if old in END_RANK and END_RANK[old] >= END_RANK.get(status, 0):
                new = old
            changed = new != old
            if changed:
                self._set_fields("meta", dict(values, status=new))
            return {"meta": self.meta(), "changed": changed}

    def halted(self) -> Optional[Dict[str, Any]]:
        return self.store.get_json(key(self.id, "halt"))

    def halt(self, reason: str, by: str = "") -> None:
        """Set the halt flag unless it is set (two halts at the same moment: the last one's
        reason stays; either halts the rollout)."""
        with self.locked("halt"):
            if self.halted() is None:
                self.store.set_json(key(self.id, "halt"), {"reason": reason, "by": by,
                                                           "at": time.time()})

    def clear_halt(self) -> None:
        self.store.delete(key(self.id, "halt"))

    def host(self, name: str) -> Dict[str, Any]:
        return self.store.get_json(key(self.id, "host", name), {}) or {}

    def stale(self, execution_id: str) -> Optional[Dict[str, Any]]:
        """What the watchdog did about a host action whose runner died (None: nothing)."""
        doc = self._fields(f"stale.{execution_id}")
        return doc or None

    def mark_stale(self, execution_id: str, record: Dict[str, Any]) -> bool:
        """Record a stale host action once (False: recorded already, by another watchdog; the
        watchdog runs one at a time, by its concurrency policy)."""
        with self.locked(f"stale.{execution_id}"):
            if self.stale(execution_id) is not None:
                return False
            self._set_fields(f"stale.{execution_id}", record)
            return True

    def update_stale(self, execution_id: str, change: Callable[[Dict[str, Any]], Any]
                     ) -> Dict[str, Any]:
        return self._update_fields(f"stale.{execution_id}", change)

    def end_wave(self, execution_id: str, outcome: Dict[str, Any]) -> None:
        """A wave step's end, with its outcome (done, failed, ... host lists): what the
        watchdog reads when the wave step's execution outlives its action runner."""
        self.store.set_json(key(self.id, "wave", execution_id),
                            {"at": time.time(), "outcome": outcome})

    def wave_end(self, execution_id: str) -> Optional[Dict[str, Any]]:
        return self.store.get_json(key(self.id, "wave", execution_id))

    def save_host(self, name: str, state: Dict[str, Any]) -> None:
        self.store.set_json(key(self.id, "host", name), state)

    def hosts(self) -> Dict[str, Dict[str, Any]]:
        prefix = key(self.id, "host") + "."
        return {k[len(prefix):]: json.loads(v) for k, v in self.store.list(prefix).items()}

    def fingerprints(self) -> List[Dict[str, Any]]:
        """Probe fingerprints of hosts this rollout changed and verified (the references for
        later batches' verification), oldest first; one key per host."""
        prefix = key(self.id, "fingerprint") + "."
        kept = [json.loads(v) for v in self.store.list(prefix).values()]
        return sorted((r for r in kept if isinstance(r, dict)),
                      key=lambda r: (float(r.get("at") or 0), str(r.get("host"))))

    def add_fingerprint(self, record: Dict[str, Any], per_model: int = 16) -> bool:
        """Keep the record unless per_model hosts of its CPU model are kept already (hosts
        verified at the same moment may each be kept: a few more references, never fewer)."""
        kept = self.fingerprints()
        if any(r.get("host") == record.get("host") for r in kept) or sum(
                1 for r in kept if r.get("cpu_model") == record.get("cpu_model")) >= per_model:
            return False
        record = dict(record)
        record.setdefault("at", time.time())
        self.store.set_json(key(self.id, "fingerprint", str(record.get("host"))), record)
        return True

    def batch(self, index: int) -> Dict[str, Any]:
        return self._fields(f"batch.{index}.state")

    def save_batch(self, index: int, state: Dict[str, Any]) -> None:
        with self.locked(f"batch.{index}.state"):
            self._set_fields(f"batch.{index}.state", state)

    def update_batch(self, index: int,
                     change: Callable[[Dict[str, Any]], Any]) -> Dict[str, Any]:
        """Read batch `index`, let `change` modify it, write back the fields it changed."""
        return self._update_fields(f"batch.{index}.state", change)
