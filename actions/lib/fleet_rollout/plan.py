"""Plan a rollout (a dry run: reads BMCs, changes nothing).

Targets by Ansible limit pattern; hosts already compliant are skipped; a control group of
unchanged hosts of the same hardware model and site (at least control_ratio x the canary size),
taken from non-target hosts first, else reserved from the targets for the final batch; a canary
batch, then batches growing by `growth`, never more than max_unavailable per site and per rack.
"""
from __future__ import annotations

import math
import time
import uuid
from collections import Counter, defaultdict, deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple

from fleet_rollout.errors import ConfigError, FleetRolloutError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.profile import Profile
from fleet_rollout.store import PlanView

# host -> {"compliant": bool} or {"error": "..."}
Compliance = Dict[str, Dict[str, Any]]


def new_rollout_id(profile: str) -> str:
    return f"{profile}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def _key(host: FleetHost) -> Tuple[str, str]:
    return host.hardware_model, host.site


def choose_controls(targets: List[FleetHost], others: List[FleetHost], canary: List[FleetHost],
                    ratio: float) -> Tuple[List[FleetHost], List[FleetHost]]:
    """(control hosts, targets reserved for the final batch because they serve as controls)."""
    wanted = max(2, int(round(ratio * max(1, len(canary)))))
    groups = sorted({_key(h) for h in canary}) or sorted({_key(h) for h in targets})
    controls: List[FleetHost] = []
    reserved: List[FleetHost] = []
    per_group = max(1, -(-wanted // max(1, len(groups))))
    canary_names = {h.name for h in canary}
    # same hardware model and site first; then same model anywhere; then any host
    matchers = [lambda h, g: _key(h) == g, lambda h, g: h.hardware_model == g[0],
                lambda h, g: True]
    for group in groups:
        take: List[FleetHost] = []
        for match in matchers:
            chosen = {h.name for h in controls + take}
            pool = [h for h in others if match(h, group) and h.name not in chosen]
            take += pool[:per_group - len(take)]
            if len(take) < per_group:
                spare = [h for h in targets if match(h, group) and h.name not in canary_names
                         and h.name not in chosen and h.name not in {r.name for r in reserved}]
                spare = sorted(spare, key=lambda h: h.name, reverse=True)[:per_group - len(take)]
                reserved.extend(spare)
                take += spare
            if len(take) >= per_group:
                break
        controls.extend(take)
    return controls, reserved


def make_batches(hosts: List[FleetHost], canary_size: int, growth: float, max_batch: int,
                 max_per_site: int, max_per_rack: int) -> List[List[FleetHost]]:
    """Greedy batches: sizes canary_size, x growth, ... <= max_batch; spread over sites/racks.

    Each batch takes the remaining hosts in order (round-robin over sites), each one unless the
    batch is full or its site or rack already has its maximum. Computed per rack: a rack gives
    at most max_per_rack hosts, the first of its queue, so only those are looked at (all of one
    site: once one is refused the rest of that rack is too); 20,000 hosts plan in well under a
    second."""
    by_site: Dict[str, List[FleetHost]] = defaultdict(list)
    for host in sorted(hosts, key=lambda h: (h.site, h.rack, h.name)):
        by_site[host.site].append(host)
    order: List[FleetHost] = []  # round-robin over sites, so batches mix sites
    queues = [by_site[site] for site in sorted(by_site)]
    for turn in range(max((len(q) for q in queues), default=0)):
        order.extend(q[turn] for q in queues if turn < len(q))
    racks: Dict[Tuple[str, str], Deque[Tuple[int, FleetHost]]] = {}
    for position, host in enumerate(order):
        racks.setdefault((host.site, host.rack), deque()).append((position, host))
    batches: List[List[FleetHost]] = []
    cap = max(1, int(max_batch))
    size = float(min(max(1, canary_size), cap))
    rack_cap = max(0, int(max_per_rack))
    while racks:
        limit = max(1, min(cap, int(size)))
        candidates: List[Tuple[int, Tuple[str, str]]] = []
        for rack, queue in racks.items():
            for i in range(min(rack_cap, len(queue))):
                candidates.append((queue[i][0], rack))
        candidates.sort()
        batch: List[FleetHost] = []
        sites: Counter = Counter()
        for _position, rack in candidates:
            if len(batch) >= limit:
                break
            if sites[rack[0]] >= max_per_site:
                continue
            host = racks[rack].popleft()[1]
            batch.append(host)
            sites[rack[0]] += 1
        for rack in [r for r, q in racks.items() if not q]:
            del racks[rack]
        batches.append(batch)
        size = next_batch_size(size, growth, cap)
    return batches


def next_batch_size(size: float, growth: float, cap: int) -> float:
    """The next batch's size: `size` x `growth`, never above `cap` (so never inf or NaN)."""
    grown = size * growth
    if not math.isfinite(grown) or grown > cap:
        return float(cap)
    return max(1.0, grown)


def build_plan(profile: Profile, inventory_source: str, limit: str, hosts: List[FleetHost],
               everyone: List[FleetHost], compliance: Compliance,
               rollout_id: Optional[str] = None, started_by: str = "") -> Dict[str, Any]:
    errors = {h: c["error"] for h, c in compliance.items() if c.get("error")}
    if errors:
        listing = "; ".join(f"{h}: {e}" for h, e in sorted(errors.items()))
        raise ConfigError(f"{len(errors)} target host(s) cannot take profile {profile.name}, "
                          f"nothing was changed: {listing}")
    missing = [h.name for h in hosts if h.name not in compliance]
    if missing:
        raise ConfigError(f"no precheck result for {', '.join(missing)}")
    compliant = sorted(h.name for h in hosts if compliance[h.name].get("compliant"))
    targets = [h for h in hosts if h.name not in compliant]
    b = profile.section("batches")
    target_names = {h.name for h in targets}
    others = [h for h in everyone if h.name not in target_names]
    first = make_batches(targets, b["canary_size"], b["growth"], b["max_batch"],
                         b["max_unavailable_per_site"], b["max_unavailable_per_rack"])
    canary = first[0] if first else []
    controls, reserved = choose_controls(targets, others, canary, b["control_ratio"])
    reserved_names = {h.name for h in reserved}
    main = [h for h in targets if h.name not in reserved_names]
    batches = make_batches(main, b["canary_size"], b["growth"], b["max_batch"],
                           b["max_unavailable_per_site"], b["max_unavailable_per_rack"])
    if reserved:
        batches += make_batches(reserved, len(reserved), 1, b["max_batch"],
                                b["max_unavailable_per_site"], b["max_unavailable_per_rack"])
    info = {h.name: h for h in everyone}
    plan = {
        "rollout_id": rollout_id or new_rollout_id(profile.name),
        "profile": profile.to_dict(),
        "inventory": inventory_source,
        "limit": limit,
        "created": time.time(),
        "started_by": started_by,
        "targets": len(targets),
        "skipped_compliant": compliant,
        "control": [h.name for h in controls],
        "control_reserved_for_last_batch": sorted(reserved_names),
        "batches": [{"index": i, "hosts": [h.name for h in batch],
                     "sites": sorted({h.site for h in batch}), "canary": i == 0}
                    for i, batch in enumerate(batches)],
        "hosts": {name: info[name].to_dict() for name in
                  sorted({h.name for h in targets} | {h.name for h in controls})},
    }
    return plan


def batch_of(plan: Mapping[str, Any], host: str) -> Optional[int]:
    """The index of the batch that changes `host`, None when no batch does. A stored plan
    (store.PlanView) answers from the host's own entry: no batch is read."""
    if isinstance(plan, PlanView):
        return plan.batch_of(host)
    return next((b["index"] for b in plan["batches"] if host in b["hosts"]), None)


def controls_for_batch(plan: Mapping[str, Any], index: int) -> List[str]:
    """Control hosts still unchanged when batch `index` is judged."""
    if isinstance(plan, PlanView):  # the controls' own entries, not every batch's hosts
        out = []
        for host in plan["control"]:
            where = plan.batch_of(host)
            if where is None or where > index:
                out.append(host)
        return out
    changed = {h for b in plan["batches"][:index + 1] for h in b["hosts"]}
    return [h for h in plan["control"] if h not in changed]


def render_plan(plan: Dict[str, Any]) -> str:
    lines = [f"rollout {plan['rollout_id']}: profile {plan['profile']['name']}, "
             f"{plan['targets']} host(s) to change in {len(plan['batches'])} batch(es); "
             f"{len(plan['skipped_compliant'])} already compliant",
             f"control group: {', '.join(plan['control']) or 'none'}"]
    lines.append(f"{'BATCH':<6}{'HOSTS':>6}  {'SITES':<20} MEMBERS")
    for batch in plan["batches"]:
        names = batch["hosts"]
        shown = ", ".join(names[:6]) + (f" ... (+{len(names) - 6})" if len(names) > 6 else "")
        label = f"{batch['index']}{'*' if batch['canary'] else ''}"
        lines.append(f"{label:<6}{len(names):>6}  {','.join(batch['sites']):<20} {shown}")
    lines.append("* canary batch")
    return "\n".join(lines)


def _checked(host: FleetHost, check: Callable[[FleetHost], Dict[str, Any]]) -> Dict[str, Any]:
    """One host's precheck result, or its error entry (never an exception)."""
    try:
        result = check(host)
    except FleetRolloutError as err:
        return {"error": str(err)}
    except Exception as err:  # the safety net: one host's surprise is that host's error
        text = str(err).splitlines()[0][:300] if str(err) else ""
        return {"error": f"internal error while reading the BMC: {type(err).__name__}: {text}"}
    if not isinstance(result, dict):
        return {"error": f"internal error while reading the BMC: precheck returned "
                         f"{type(result).__name__}, not a result"}
    return result


def precheck_hosts(hosts: Iterable[FleetHost], check: Callable[[FleetHost], Dict[str, Any]],
                   parallel: int = 20) -> Compliance:
    """Run `check` (read-only BMC look) on every host in parallel; errors become entries.

    No exception escapes: a FleetRolloutError is the host's error entry, and anything else (a bug
    or an answer nothing anticipated) becomes "internal error while reading the BMC", so the plan
    refuses with a per-host listing instead of a traceback."""
    from concurrent.futures import ThreadPoolExecutor

    def one(host: FleetHost) -> Tuple[str, Dict[str, Any]]:
        return host.name, _checked(host, check)

    items = list(hosts)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(items) or 1))) as pool:
        return dict(pool.map(one, items))
