"""Which rollout holds a host: one at a time.

A rollout claims a host at its first step (before anything changes) and releases it when the
host is done or restored. Another rollout's step on a claimed host is refused, and its restore
leaves the host alone (it changed nothing there). A host whose restore failed stays claimed until
a restore of its rollout succeeds (`st2 run fleet_rollout.host_step step=restore`, or the
rollback again). The rollout that claimed a host last is kept after its release: a later restore
of an older rollout leaves that host alone (it would undo the later rollout's change).

Claims are datastore keys, global to all rollouts: `fleet_rollout._hosts.<host>.claim` (held
now) and `.last` (claimed last). They change only inside `fleet_rollout.host_step`, which
StackStorm runs one at a time per host across every action runner (its
`action.concurrency.attr` policy on `host`): a read and the write after it are never
interleaved with another action's for the same host, on any machine. A wave step (one action
over many hosts, outside that policy) only reads them (`check`): its precheck changes nothing,
the host's snapshot step (a host_step) claims it, and every wave step after that needs the
claim held.
"""
from __future__ import annotations

import time
from typing import Dict, Iterable, Optional

from fleet_rollout.errors import HostError
from fleet_rollout.store import PREFIX, Store

# under the pack's prefix, a part no rollout id can take (ids start with a letter or digit)
HOSTS = "_hosts"


class HostClaimed(HostError):
    """Another rollout holds this host."""


def _key(host: str, part: str) -> str:
    return f"{PREFIX}.{HOSTS}.{host}.{part}"


def _rollout_in(store: Store, host: str, part: str) -> Optional[str]:
    try:
        data = store.get_json(_key(host, part))
    except ValueError:
        return None  # an unreadable record counts as none
    held = data.get("rollout_id") if isinstance(data, dict) else None
    return held if isinstance(held, str) and held else None


def owner(store: Store, host: str) -> Optional[str]:
    """The rollout holding `host`, None when free."""
    return _rollout_in(store, host, "claim")


def held_elsewhere(store: Store, hosts: Iterable[str], rollout_id: str) -> Dict[str, str]:
    """The hosts of `hosts` another rollout holds now, each with that rollout (reads only)."""
    held = {h: owner(store, h) for h in hosts}
    return {h: str(o) for h, o in held.items() if o is not None and o != rollout_id}


def claim(store: Store, host: str, rollout_id: str) -> None:
    """Hold `host` for `rollout_id`; HostClaimed when another rollout holds it."""
    if check(store, host, rollout_id, held=False) == rollout_id:
        return
    record = {"host": host, "rollout_id": rollout_id, "at": time.time()}
    store.set_json(_key(host, "last"), record)
    store.set_json(_key(host, "claim"), record)


def check(store: Store, host: str, rollout_id: str, held: bool) -> Optional[str]:
    """Outside the host policy, writing nothing: HostClaimed when another rollout holds
    `host`; HostError when `held` and `rollout_id` does not hold it. Returns the holder."""
    owned = owner(store, host)
    if owned is not None and owned != rollout_id:
        raise HostClaimed(f"held by rollout {owned} (one rollout per host at a time); finish, "
                          f"roll back or restore it there first", host)
    if held and owned is None:
        raise HostError(f"not claimed by rollout {rollout_id} (its snapshot step claims it); "
                        "nothing done", host)
    return owned


def last_claimant(store: Store, host: str) -> Optional[str]:
    """The rollout that claimed `host` last (None: none recorded)."""
    return _rollout_in(store, host, "last")


def release(store: Store, host: str, rollout_id: str) -> None:
    """Let go of `host` if `rollout_id` holds it."""
    if owner(store, host) == rollout_id:
        store.delete(_key(host, "claim"))
