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
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Tuple,
    Union,
)

from fleet_rollout import site_limits
from fleet_rollout.errors import ConfigError, FleetRolloutError
from fleet_rollout.estimate import Assumptions, BatchModel, PlanClock
from fleet_rollout.inventory import FleetHost
from fleet_rollout.profile import DEFAULT_FORKS, Profile
from fleet_rollout.site_limits import Caps, fixed
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


class Scheduler(Protocol):
    """Picks the window group (site_limits.window_groups) the next batch takes its hosts from,
    and learns each batch made: the plan's clock (estimate.PlanClock)."""

    def pick(self, groups: List[int], size: int) -> int: ...

    def placed(self, hosts: List[FleetHost]) -> None: ...


def make_batches(hosts: List[FleetHost], canary_size: int, growth: float, max_batch: int,
                 max_per_site: Union[int, Caps], max_per_rack: int = 1,
                 group_of: Optional[Mapping[str, int]] = None,
                 scheduler: Optional[Scheduler] = None) -> List[List[FleetHost]]:
    """Greedy batches: sizes canary_size, x growth, ... <= max_batch; spread over sites/racks.

    Each batch takes the remaining hosts in order (round-robin over sites), each one unless the
    batch is full, its site or rack already has its cap (`max_per_site`: a count for every
    site, or site_limits.Caps with each site's and rack's own and the sites changing at once),
    or the batch has its sites already. With `group_of` (site -> window group) a batch takes
    hosts of one group only, the one `scheduler` picks. Computed per rack: a rack gives at most
    its cap, the first of its queue, so only those are looked at; 20,000 hosts plan in well
    under a second."""
    limits = max_per_site if isinstance(max_per_site, Caps) else fixed(max_per_site,
                                                                       max_per_rack)
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
    while racks:
        limit = max(1, min(cap, int(size)))
        group = None
        if group_of is not None and scheduler is not None:
            group = scheduler.pick(sorted({group_of[r[0]] for r in racks}), limit)
        candidates: List[Tuple[int, Tuple[str, str]]] = []
        for rack, queue in racks.items():
            if group is not None and group_of is not None and group_of[rack[0]] != group:
                continue
            for i in range(min(limits.rack_cap(*rack), len(queue))):
                candidates.append((queue[i][0], rack))
        candidates.sort()
        batch: List[FleetHost] = []
        sites: Counter = Counter()
        for _position, rack in candidates:
            if len(batch) >= limit:
                break
            if sites[rack[0]] >= limits.site_cap(rack[0]):
                continue
            if limits.max_sites and rack[0] not in sites and len(sites) >= limits.max_sites:
                continue
            host = racks[rack].popleft()[1]
            batch.append(host)
            sites[rack[0]] += 1
        for rack in [r for r, q in racks.items() if not q]:
            del racks[rack]
        if not batch:  # every cap at 0: the hosts left cannot be batched
            raise ConfigError(f"{sum(len(q) for q in racks.values())} host(s) fit in no batch: "
                              "their site or rack allows no host out at once")
        batches.append(batch)
        if scheduler is not None:
            scheduler.placed(batch)
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
               rollout_id: Optional[str] = None, started_by: str = "",
               forks: int = DEFAULT_FORKS, start: Optional[float] = None) -> Dict[str, Any]:
    """The plan: batches within the profile's limits (site_limits.py: counts or shares of each
    site's and rack's inventory hosts, sites at once) and, when sites have maintenance windows,
    each batch of sites whose windows open together, in the order they can start from `start`
    (now); also the batches the limits allow at most (`bound_batches`, for the estimate's
    capacity bound)."""
    errors = {h: c["error"] for h, c in compliance.items() if c.get("error")}
    if errors:
        listing = "; ".join(f"{h}: {e}" for h, e in sorted(errors.items()))
        raise ConfigError(f"{len(errors)} target host(s) cannot take profile {profile.name}, "
                          f"nothing was changed: {listing}")
    missing = [h.name for h in hosts if h.name not in compliance]
    if missing:
        raise ConfigError(f"no precheck result for {', '.join(missing)}")
    created = time.time() if start is None else float(start)
    compliant = sorted(h.name for h in hosts if compliance[h.name].get("compliant"))
    targets = [h for h in hosts if h.name not in compliant]
    b = profile.section("batches")
    limits = site_limits.caps(b, everyone)
    site_schedules = site_limits.schedules(profile.data, targets)
    target_names = {h.name for h in targets}
    others = [h for h in everyone if h.name not in target_names]
    first = make_batches(targets, b["canary_size"], b["growth"], b["max_batch"], limits)
    canary = first[0] if first else []
    controls, reserved = choose_controls(targets, others, canary, b["control_ratio"])
    reserved_names = {h.name for h in reserved}
    main = [h for h in targets if h.name not in reserved_names]

    def batched(chosen: List[FleetHost], canary_size: int, growth: float,
                required: bool = True) -> List[List[FleetHost]]:
        if not site_limits.restricted(site_schedules):
            return make_batches(chosen, canary_size, growth, b["max_batch"], limits)
        data = profile.data if required else dict(
            profile.data, approval=dict(profile.data["approval"], required=False))
        clock = PlanClock(BatchModel(data, Assumptions(), forks), site_schedules,
                          site_limits.window_groups(site_schedules, created), created,
                          len(controls))
        return make_batches(chosen, canary_size, growth, b["max_batch"], limits,
                            group_of=clock.group_of, scheduler=clock)

    batches = batched(main, b["canary_size"], b["growth"])
    if reserved:
        batches += batched(reserved, len(reserved), 1)
    # no canary ramp, no approval: every batch as large as the limits allow
    ideal = batched(targets, b["max_batch"], 1, required=False)
    info = {h.name: h for h in everyone}
    plan = {
        "rollout_id": rollout_id or new_rollout_id(profile.name),
        "profile": profile.to_dict(),
        "inventory": inventory_source,
        "limit": limit,
        "created": created,
        "started_by": started_by,
        "targets": len(targets),
        "skipped_compliant": compliant,
        "control": [h.name for h in controls],
        "control_reserved_for_last_batch": sorted(reserved_names),
        "batches": [{"index": i, "hosts": [h.name for h in batch],
                     "sites": sorted({h.site for h in batch}), "canary": i == 0}
                    for i, batch in enumerate(batches)],
        "bound_batches": [{"hosts": len(batch), "sites": sorted({h.site for h in batch})}
                          for batch in ideal],
        "limits": {"max_sites": limits.max_sites, "in_flight": limits.in_flight,
                   "site": {s: limits.site_cap(s) for s in sorted({h.site for h in targets})}},
        "hosts": {name: dict(info[name].to_dict(),
                             site_cap=limits.site_cap(info[name].site),
                             rack_cap=limits.rack_cap(info[name].site, info[name].rack))
                  for name in sorted({h.name for h in targets} | {h.name for h in controls})},
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


CHAT_ROWS = 12  # batch rows render_plan shows; the plan's batch_table and the report have all


def render_plan(plan: Dict[str, Any], estimate: Optional[Dict[str, Any]] = None) -> str:
    """The plan in short, for chat: the first CHAT_ROWS batches, and the estimate's totals
    and capacity bound when given."""
    lines = [f"rollout {plan['rollout_id']}: profile {plan['profile']['name']}, "
             f"{plan['targets']} host(s) to change in {len(plan['batches'])} batch(es); "
             f"{len(plan['skipped_compliant'])} already compliant",
             f"control group: {', '.join(plan['control'][:10]) or 'none'}"
             + (f" (+{len(plan['control']) - 10})" if len(plan["control"]) > 10 else "")]
    lines.append(f"{'BATCH':<6}{'HOSTS':>6}  {'SITES':<20} MEMBERS")
    for batch in plan["batches"][:CHAT_ROWS]:
        names = batch["hosts"]
        shown = ", ".join(names[:6]) + (f" ... (+{len(names) - 6})" if len(names) > 6 else "")
        label = f"{batch['index']}{'*' if batch['canary'] else ''}"
        sites = ",".join(batch["sites"][:4]) + (f",+{len(batch['sites']) - 4}"
                                               if len(batch["sites"]) > 4 else "")
        lines.append(f"{label:<6}{len(names):>6}  {sites:<20} {shown}")
    if len(plan["batches"]) > CHAT_ROWS:
        rest = plan["batches"][CHAT_ROWS:]
        lines.append(f"... {len(rest)} more batch(es) of {sum(len(b['hosts']) for b in rest)} "
                     "host(s): the plan's batch_table and the report list them all")
    lines.append("* canary batch")
    if estimate is not None:
        t = estimate["totals"]
        lines.append(f"estimate: {t['expected_hours']:.1f} h (approval waits "
                     f"{t['approval_wait'] / 3600.0:.1f} h, maintenance window waits "
                     f"{t['window_wait'] / 3600.0:.1f} h)"
                     + (f"; capacity bound {t['bound_hours']:.1f} h, ratio "
                        f"{t['bound_ratio']:.2f}" if t.get("bound") else ""))
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
