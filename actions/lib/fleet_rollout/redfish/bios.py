"""BIOS settings over Redfish: snapshot, plan, stage, commit and restore.

Staging is idempotent: it writes only what differs from the value the BIOS will have after the
pending settings apply, refuses pending changes it does not own (unless told to clear them), and
checks every attribute and value against the host's registry before the first write.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from fleet_rollout.errors import KnobError, RedfishError
from fleet_rollout.redfish.client import RedfishSession, WriteOutcomeUnknown
from fleet_rollout.redfish.discovery import BmcContext, attributes_of
from fleet_rollout.redfish.personalities import KNOBS, knob_attribute, resolve, to_logical
from fleet_rollout.redfish.shape import Resource

ACTIVE_JOB_STATES = ("Scheduled", "Running", "New", "Starting", "Waiting", "Downloaded",
                     "ReadyForExecution", "Pending")


@dataclass
class BiosState:
    current: Dict[str, Any]
    pending: Dict[str, Any]  # attribute -> value that will apply at the next reset
    settings_etag: Optional[str]
    settings_time: Optional[str]
    messages: List[Dict[str, Any]]
    active_jobs: List[Dict[str, Any]]
    apply_time_supported: bool


def settings_messages(annotation: Resource) -> List[Dict[str, Any]]:
    """@Redfish.Settings Messages, each checked: MessageId/Message strings, RelatedProperties
    strings."""
    out = []
    for message in annotation.objects("Messages"):
        message.text("MessageId")
        message.text("Message")
        message.texts("RelatedProperties")
        out.append(dict(message.body))
    return out


def _active_job(session: RedfishSession, ctx: BmcContext, uri: str) -> Optional[Dict[str, Any]]:
    job = session.recent(uri).resource()
    target = job.text("TargetSettingsURI") or ""
    bios_job = "BIOS" in (job.text("JobType") or "").upper() or (
        target.rstrip("/") == ctx.settings_uri.rstrip("/"))
    state = job.text("JobState")
    if not (bios_job and state in ACTIVE_JOB_STATES):
        return None
    job_id = job.text("Id")
    if not job_id:
        raise job.missing("Id", "the job id string")
    return {"id": job_id, "uri": uri, "state": state, "message": job.text("Message")}


def active_jobs(session: RedfishSession, ctx: BmcContext, limit: int = 50) -> List[Dict[str, Any]]:
    """Scheduled or running BIOS configuration jobs (Dell job queue).

    What this session read of the queue since its last write is reused (session.recent)."""
    if not ctx.jobs_uri:
        return []
    out = []
    for uri in session.recent(ctx.jobs_uri).resource().members()[-limit:]:
        job = _active_job(session, ctx, uri)
        if job is not None:
            out.append(job)
    return out


def _apply_time_supported(settings: Resource) -> bool:
    if not settings.has("@Redfish.SettingsApplyTime"):
        return False
    apply_time = settings.obj("@Redfish.SettingsApplyTime")
    allowed = apply_time.texts("ApplyTime@Redfish.AllowableValues")
    return "OnReset" in allowed or apply_time.text("ApplyTime") == "OnReset"


def pending_values(ctx: BmcContext, view: Dict[str, Any], current: Dict[str, Any]
                   ) -> Dict[str, Any]:
    """What the settings object `view` holds pending: all of it where it lists only pending
    values (iDRAC, whatever /Bios shows), else the values that differ from `current`."""
    if ctx.personality.settings_pending_only:
        return dict(view)
    return {k: v for k, v in view.items() if current.get(k) != v}


def read_state(session: RedfishSession, ctx: BmcContext, jobs: bool = True) -> BiosState:
    """The BIOS as the BMC shows it: current values, pending ones, settings ETag, config jobs
    (jobs=False: the job queue is not read, active_jobs is empty).

    Documents this session read since its last write (discovery's Bios, a snapshot's reads just
    before staging) are reused, not read again (session.recent); after any write all is read
    afresh."""
    flat = ctx.personality.flat_body
    bios = session.recent(ctx.bios_uri).resource()
    current = attributes_of(bios.body, flat, ctx.host, ctx.bios_uri)
    settings_resp = session.recent(ctx.settings_uri)
    settings = settings_resp.resource()
    view = attributes_of(settings.body, flat, ctx.host, ctx.settings_uri)
    pending = pending_values(ctx, view, current)
    annotation = bios.obj("@Redfish.Settings")
    return BiosState(
        current=current, pending=pending,
        settings_etag=settings_resp.etag or annotation.text("ETag"),
        settings_time=annotation.text("Time"), messages=settings_messages(annotation),
        active_jobs=active_jobs(session, ctx) if jobs else [],
        apply_time_supported=_apply_time_supported(settings))


@dataclass
class BiosSnapshot:
    """What the BIOS looked like before we touched it; enough to put it back."""

    host: str
    vendor: str
    registry_id: str
    taken_at: float
    attributes: Dict[str, Any]  # current raw values of every knob attribute the host has
    logical: Dict[str, Optional[str]]
    pending: Dict[str, Any]
    settings_etag: Optional[str]
    settings_time: Optional[str]
    active_jobs: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> BiosSnapshot:
        return cls(**data)


def snapshot(session: RedfishSession, ctx: BmcContext,
             state: Optional[BiosState] = None) -> BiosSnapshot:
    """The BIOS as it is (`state`: one this session has just read)."""
    state = state or read_state(session, ctx)
    attrs: Dict[str, Any] = {}
    logical: Dict[str, Optional[str]] = {}
    for knob in KNOBS:
        name = knob_attribute(ctx.personality, ctx.registry, knob)
        if name is not None and name in state.current:
            attrs[name] = state.current[name]
            logical[knob] = to_logical(ctx.personality, ctx.registry, knob, state.current[name])
    return BiosSnapshot(
        host=ctx.host, vendor=ctx.personality.key, registry_id=ctx.registry.id,
        taken_at=time.time(), attributes=attrs, logical=logical, pending=state.pending,
        settings_etag=state.settings_etag, settings_time=state.settings_time,
        active_jobs=[str(j["id"]) for j in state.active_jobs])


def plan(ctx: BmcContext, desired: Dict[str, str],
         current: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """Attribute -> ValueName for the desired logical state; KnobError before any write.

    Checks the attribute exists, the value is one the registry allows (type, values, bounds,
    lengths, pattern), and that the attribute is neither ReadOnly, Immutable nor GrayOut (also
    through registry dependencies, evaluated on the values the BIOS will have after the change).
    """
    targets: Dict[str, str] = {}
    for knob, logical in desired.items():
        target = resolve(ctx.personality, ctx.registry, knob, logical, ctx.host)
        targets[target.attribute] = target.value
    check_writable(ctx, targets, current or {})
    return targets


def check_writable(ctx: BmcContext, targets: Dict[str, Any], current: Dict[str, Any]) -> None:
    after = dict(current)
    after.update(targets)
    for name, value in targets.items():
        if ctx.registry.get(name) is None:
            raise KnobError(f"attribute {name} is not in registry {ctx.registry.id}", ctx.host)
        attr = ctx.registry.effective(name, after)
        if attr.read_only or attr.gray_out or attr.immutable:
            why = "read-only" if attr.read_only else (
                "immutable" if attr.immutable else "grayed out")
            causes = ctx.registry.locked_by(name, after)
            because = f" while {' and '.join(causes)} (a registry dependency)" if causes else ""
            raise KnobError(f"attribute {name} is {why} on this host{because} (registry "
                            f"{ctx.registry.id}); nothing was written", ctx.host)
        problem = attr.check_value(value)
        if problem:
            raise KnobError(f"attribute {name} ({attr.type}, registry {ctx.registry.id}): "
                            f"{problem}; nothing was written", ctx.host)


@dataclass
class StageResult:
    host: str
    writes: int = 0
    changed: Dict[str, Any] = field(default_factory=dict)  # attribute -> value written
    already: Dict[str, Any] = field(default_factory=dict)  # attribute -> value already in effect
    cleared: Dict[str, Any] = field(default_factory=dict)  # foreign pending values cancelled
    deleted_jobs: List[str] = field(default_factory=list)
    apply_time: bool = False
    needs_reset: bool = False  # pending settings (ours) wait for a reset
    # ids of the scheduled BIOS config jobs as staging last saw them (None: not looked at);
    # commit() relies on it instead of reading the job queue again
    active_jobs: Optional[List[str]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _foreign(state: BiosState, targets: Dict[str, Any], owned: Iterable[str]) -> Dict[str, Any]:
    owned = set(owned)
    return {k: v for k, v in state.pending.items()
            if k not in owned and not (k in targets and targets[k] == v)}


def _wrap(ctx: BmcContext, attributes: Dict[str, Any], apply_time: bool) -> Dict[str, Any]:
    body: Dict[str, Any] = dict(attributes) if ctx.personality.flat_body else {
        "Attributes": dict(attributes)}
    if apply_time:
        body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
    return body


def _use_apply_time(ctx: BmcContext, state: BiosState) -> bool:
    mode = ctx.personality.commit
    return mode in ("apply_time_or_job", "apply_time_if_supported") and state.apply_time_supported


def stage(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
          clear_foreign: bool = False, owned: Iterable[str] = ()) -> StageResult:
    """Make the pending settings hold `targets` (attribute -> ValueName), writing only if needed.

    Pending values on attributes in `owned` (ours, e.g. from an interrupted earlier attempt) may
    be overwritten; any other pending change is foreign: refused, or cancelled if clear_foreign.
    """
    result = StageResult(ctx.host)
    owned = set(owned) | set(targets)
    for _attempt in range(3):
        state = read_state(session, ctx)
        check_writable(ctx, targets, state.current)
        foreign = _foreign(state, targets, owned)
        if foreign and not clear_foreign:
            listing = ", ".join(f"{k}={v}" for k, v in sorted(foreign.items()))
            raise RedfishError(f"foreign pending BIOS changes ({listing}); refusing to stage "
                               "over them (run with clear_foreign to cancel them)", ctx.host)
        after = dict(state.current)
        after.update(state.pending)
        needed = {k: v for k, v in targets.items() if after.get(k) != v}
        cancel = {k: state.current[k] for k in state.pending
                  if k not in targets and k in state.current and (k in foreign or k in owned)}
        result.already = {k: v for k, v in targets.items() if k not in needed}
        if not needed and not cancel:
            result.needs_reset = any(state.pending.get(k) == v for k, v in targets.items())
            result.active_jobs = [str(j["id"]) for j in state.active_jobs]
            return result
        if state.active_jobs:
            if not ctx.clear_pending_uri:
                raise RedfishError("a BIOS configuration job is scheduled; pending settings are "
                                   "locked until it runs", ctx.host)
            if not clear_foreign and not set(state.pending) <= owned:
                raise RedfishError("a foreign BIOS configuration job is scheduled "
                                   f"({', '.join(str(j['id']) for j in state.active_jobs)})",
                                   ctx.host)
            for job in state.active_jobs:
                session.delete(str(job["uri"]))
                result.writes += 1
                result.deleted_jobs.append(str(job["id"]))
        if state.active_jobs or (ctx.clear_pending_uri and cancel):
            if ctx.clear_pending_uri and state.pending:
                session.post(ctx.clear_pending_uri, {})
                result.writes += 1
                result.cleared.update({k: v for k, v in state.pending.items() if k in foreign})
                continue  # re-read: the pending set is now empty
        body_attrs = dict(cancel)
        body_attrs.update(needed)
        use_apply_time = _use_apply_time(ctx, state)
        try:
            response = session.patch(ctx.settings_uri, _wrap(ctx, body_attrs, use_apply_time),
                                     etag=state.settings_etag, ok=(200, 202, 204))
        except WriteOutcomeUnknown:
            result.writes += 1
            continue  # look again: a PATCH of values is safe to re-evaluate (If-Match guards it)
        except RedfishError as err:
            if err.status == 412:
                continue  # someone changed the settings since we read them: re-read, re-check
            raise
        result.writes += 1
        session.wait_task(response)
        result.changed.update(needed)
        result.cleared.update({k: state.pending[k] for k in cancel if k in state.pending})
        result.apply_time = use_apply_time
        # check the BMC shows them pending (or applied: some services, sushy-tools, apply at
        # once): the BIOS and its settings object again; not the job queue, which this PATCH
        # cannot have changed (its jobs were deleted above, or there were none)
        check = read_state(session, ctx, jobs=False)  # the PATCH forgot what was read: fresh
        after = dict(check.current)
        after.update(check.pending)
        missing = {k: v for k, v in targets.items() if after.get(k) != v}
        if missing:
            said = response.notices()
            raise RedfishError(f"BMC accepted the BIOS settings but does not show them pending: "
                               f"{', '.join(f'{k}={v}' for k, v in sorted(missing.items()))}"
                               + (f"; its answer said: {'; '.join(said)}" if said else "")
                               + "; nothing was reset (restoring the host cancels what was "
                               "staged)", ctx.host)
        result.needs_reset = any(check.pending.get(k) == v for k, v in targets.items())
        # the jobs seen were deleted above (a settings PATCH is refused while one is scheduled)
        result.active_jobs = []
        return result
    raise RedfishError("BIOS settings kept changing under us (3 attempts); another tool is "
                       "writing them", ctx.host)


@dataclass
class CommitResult:
    host: str
    method: str  # job | apply_time | reset | none
    job_id: Optional[str] = None
    writes: int = 0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def commit(session: RedfishSession, ctx: BmcContext, staged: StageResult) -> CommitResult:
    """Make staged settings take effect at the next reset (Dell: a config job)."""
    if not staged.needs_reset:
        return CommitResult(ctx.host, "none")
    mode = ctx.personality.commit
    if staged.apply_time:
        return CommitResult(ctx.host, "apply_time")
    if mode in ("job", "apply_time_or_job"):
        assert ctx.jobs_uri
        # staging just looked at the queue (or emptied it): no second read
        existing = staged.active_jobs if staged.active_jobs is not None else \
            [str(j["id"]) for j in active_jobs(session, ctx)]
        if existing:
            return CommitResult(ctx.host, "job", existing[0])
        try:
            response = session.post(ctx.jobs_uri, {"TargetSettingsURI": ctx.settings_uri})
        except WriteOutcomeUnknown:
            existing = active_jobs(session, ctx)  # did the BMC create it before the drop?
            if existing:
                return CommitResult(ctx.host, "job", str(existing[0]["id"]), writes=1)
            response = session.post(ctx.jobs_uri, {"TargetSettingsURI": ctx.settings_uri})
            writes = 2
        else:
            writes = 1
        job_uri = response.location or ""
        return CommitResult(ctx.host, "job", job_uri.rstrip("/").rsplit("/", 1)[-1] or None,
                            writes=writes)
    return CommitResult(ctx.host, "reset")


def restore_targets(ctx: BmcContext, snap: BiosSnapshot) -> Dict[str, Any]:
    """Attribute values to go back to (only knob attributes the snapshot recorded)."""
    if snap.vendor != ctx.personality.key:
        raise RedfishError(f"snapshot was taken as vendor {snap.vendor}, host now looks like "
                           f"{ctx.personality.key}; refusing to restore across personalities",
                           ctx.host)
    return dict(snap.attributes)
