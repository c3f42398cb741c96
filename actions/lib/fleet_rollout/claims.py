"""Which rollout holds a host: one at a time.

A rollout claims a host at its first step (before anything changes) and releases it when the
host is done or restored. Another rollout's step on a claimed host is refused, and its restore
leaves the host alone (it changed nothing there). A host whose restore failed stays claimed until
a restore of its rollout succeeds (`st2 run fleet_rollout.host_restore`, or the rollback again).
The rollout that claimed a host last is kept after its release: a later restore of an older
rollout leaves that host alone (it would undo the later rollout's change).
Claims are files under the pack's state_dir (a FileStore keyed by host name: names are checked
plain names), changed only under the host's lock (locks.host_lock).
"""
from __future__ import annotations

import json
import os
import time
from typing import Optional

from fleet_rollout.errors import HostError
from fleet_rollout.store import FileStore

CLAIM_DIR = "claims"
# the rollout that claimed each host last (kept after its release): a restore of an older
# rollout leaves a host that a later rollout changed as it is
LAST_DIR = "claims-last"


class HostClaimed(HostError):
    """Another rollout holds this host."""


def _claims(state_dir: str) -> FileStore:
    return FileStore(os.path.join(state_dir, CLAIM_DIR))


def owner(state_dir: str, host: str) -> Optional[str]:
    """The rollout holding `host`, None when free (an unreadable claim counts as free)."""
    try:
        data = _claims(state_dir).get_json(host)
    except ValueError:
        return None
    held = data.get("rollout_id") if isinstance(data, dict) else None
    return held if isinstance(held, str) and held else None


def claim(state_dir: str, host: str, rollout_id: str) -> None:
    """Hold `host` for `rollout_id`; HostClaimed when another rollout holds it."""
    held = owner(state_dir, host)
    if held == rollout_id:
        return
    if held is not None:
        raise HostClaimed(f"held by rollout {held} (one rollout per host at a time); finish, "
                          f"roll back or restore it there first", host)
    record = json.dumps({"host": host, "rollout_id": rollout_id, "at": time.time()})
    FileStore(os.path.join(state_dir, LAST_DIR)).set(host, record)
    _claims(state_dir).set(host, record)


def last_claimant(state_dir: str, host: str) -> Optional[str]:
    """The rollout that claimed `host` last (None: none recorded, or unreadable)."""
    try:
        data = FileStore(os.path.join(state_dir, LAST_DIR)).get_json(host)
    except ValueError:
        return None
    held = data.get("rollout_id") if isinstance(data, dict) else None
    return held if isinstance(held, str) and held else None


def release(state_dir: str, host: str, rollout_id: str) -> None:
    """Let go of `host` if `rollout_id` holds it."""
    if owner(state_dir, host) == rollout_id:
        _claims(state_dir).delete(host)
