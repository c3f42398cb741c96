"""Resets and the wait for BIOS settings to apply.

reset(): exactly one reset per request. A reset whose answer is lost is not resent: we watch the
system for evidence that it restarted (power went off, POST ran, LastResetTime moved). A graceful
restart that shows no evidence within its timeout escalates to one ForceRestart.

wait_applied(): POST finished (BootProgress.LastState, or HPE's Oem PostState), then the BIOS
settings: @Redfish.Settings Time moved, Messages clean, config jobs completed, and the current
values equal the desired ones.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession, WriteOutcomeUnknown
from fleet_rollout.redfish.discovery import BmcContext, attributes_of

POST_DONE_STATES = ("OSRunning", "OSBootStarted", "SystemHardwareInitializationComplete")
HP_POST_DONE = ("FinishedPost", "InPostDiscoveryComplete")


@dataclass
class BootMarker:
    power_state: Optional[str]
    last_state: Optional[str]
    last_state_time: Optional[str]
    last_reset_time: Optional[str]
    post_state: Optional[str]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def boot_marker(system: Dict[str, Any], oem_key: Optional[str]) -> BootMarker:
    progress = system.get("BootProgress") or {}
    post = None
    if oem_key:
        post = ((system.get("Oem") or {}).get(oem_key) or {}).get("PostState")
    return BootMarker(system.get("PowerState"), progress.get("LastState"),
                      progress.get("LastStateTime"), system.get("LastResetTime"), post)


def restarted_since(before: BootMarker, now: BootMarker) -> bool:
    """Evidence that the system went through a reset after `before` was taken."""
    if now.power_state and now.power_state != "On":
        return True
    if now.last_reset_time and now.last_reset_time != before.last_reset_time:
        return True
    if now.last_state_time and now.last_state_time != before.last_state_time:
        return True
    return bool(now.post_state and now.post_state not in HP_POST_DONE)


def settled(now: BootMarker) -> bool:
    """The system is idle: powered off, or on with its OS running (not mid-boot)."""
    if now.power_state == "Off":
        return True
    if now.power_state != "On":
        return False
    if now.post_state is not None:
        return now.post_state in HP_POST_DONE
    return now.last_state in (None, "OSRunning", "None")


def post_finished(now: BootMarker) -> bool:
    if now.power_state != "On":
        return False
    if now.post_state is not None:
        return now.post_state in HP_POST_DONE
    if now.last_state is not None:
        return now.last_state in POST_DONE_STATES
    return True  # a BMC that reports neither: power on is all we can know


@dataclass
class ResetResult:
    host: str
    sent: List[str] = field(default_factory=list)  # reset types POSTed, in order
    answer_lost: int = 0  # resets whose answer never came (not resent)
    escalated: bool = False
    before: Optional[Dict[str, Any]] = None
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _marker(session: RedfishSession, ctx: BmcContext) -> BootMarker:
    return boot_marker(session.get(ctx.system_uri).body, ctx.personality.post_state_oem)


def _post_reset(session: RedfishSession, ctx: BmcContext, reset_type: str, result: ResetResult,
                sleep: Callable[[float], None]) -> None:
    attempt = 0
    while True:
        attempt += 1
        try:
            session.post(ctx.reset_uri, {"ResetType": reset_type})
            result.sent.append(reset_type)
            return
        except WriteOutcomeUnknown:
            result.sent.append(reset_type)
            result.answer_lost += 1
            return  # never resent: the evidence decides
        except RedfishError as err:
            if err.status in (502, 503, 504) and attempt <= session.endpoint.get_retries:
                sleep(min(30.0, 2.0 ** attempt))  # refused before acting: safe to send again
                continue
            raise


def _await_evidence(session: RedfishSession, ctx: BmcContext, before: BootMarker,
                    timeout: float, poll: float, sleep: Callable[[float], None]) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if restarted_since(before, _marker(session, ctx)):
                return True
        except RedfishError as err:
            if not err.transient:
                raise  # a BMC busy rebooting its host may be slow: keep looking
        if time.monotonic() >= deadline:
            return False
        sleep(poll)


def reset(session: RedfishSession, ctx: BmcContext, graceful_timeout: float = 300.0,
          force_timeout: float = 120.0, poll: float = 2.0, graceful: bool = True,
          sleep: Callable[[float], None] = time.sleep) -> ResetResult:
    started = time.monotonic()
    result = ResetResult(ctx.host)
    before = _marker(session, ctx)
    deadline = time.monotonic() + graceful_timeout
    while not settled(before) and time.monotonic() < deadline:
        sleep(poll)  # never reset a system mid-boot: its restart evidence would be ambiguous
        before = _marker(session, ctx)
    if not settled(before):
        graceful = False  # an OS that never finished booting will not act on an ACPI request
    result.before = before.to_dict()
    allowed = ctx.reset_types or ["GracefulRestart", "ForceRestart", "On"]
    if before.power_state == "Off":
        first = "On"
    elif graceful and "GracefulRestart" in allowed:
        first = "GracefulRestart"
    else:
        first = "ForceRestart"
    _post_reset(session, ctx, first, result, sleep)
    timeout = graceful_timeout if first == "GracefulRestart" else force_timeout
    if not _await_evidence(session, ctx, before, timeout, poll, sleep):
        if first != "GracefulRestart" or "ForceRestart" not in allowed:
            raise RedfishError(f"{first} sent but the system shows no sign of restarting after "
                               f"{timeout:.0f}s", ctx.host, transient=True)
        result.escalated = True
        _post_reset(session, ctx, "ForceRestart", result, sleep)
        if not _await_evidence(session, ctx, before, force_timeout, poll, sleep):
            raise RedfishError(f"GracefulRestart ignored for {graceful_timeout:.0f}s and "
                               f"ForceRestart showed no effect after {force_timeout:.0f}s",
                               ctx.host, transient=True)
    result.seconds = round(time.monotonic() - started, 3)
    return result


@dataclass
class AppliedResult:
    host: str
    ok: bool
    values: Dict[str, Any]
    settings_time: Optional[str]
    seconds: float
    problems: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def wait_post(session: RedfishSession, ctx: BmcContext, timeout: float, poll: float,
              sleep: Callable[[float], None] = time.sleep) -> BootMarker:
    deadline = time.monotonic() + timeout
    while True:
        try:
            marker = _marker(session, ctx)
            if post_finished(marker):
                return marker
        except RedfishError as err:
            if not err.transient:
                raise
            marker = None
        if time.monotonic() >= deadline:
            state = marker.to_dict() if marker else "unreachable"
            raise RedfishError(f"POST not finished after {timeout:.0f}s (last seen: {state})",
                               ctx.host, transient=True)
        sleep(poll)


def wait_applied(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                 settings_time_before: Optional[str] = None, job_ids: Optional[List[str]] = None,
                 timeout: float = 900.0, poll: float = 2.0,
                 sleep: Callable[[float], None] = time.sleep) -> AppliedResult:
    """Wait until POST is done, then check that the BIOS now holds `targets`.

    Raises RedfishError naming every problem (failed job, SettingsFailed message, values that did
    not apply silently) so the caller can restore the host.
    """
    started = time.monotonic()
    wait_post(session, ctx, timeout, poll, sleep)
    bios = session.get(ctx.bios_uri).body
    values = attributes_of(bios, ctx.personality.flat_body)
    annotation = bios.get("@Redfish.Settings") or {}
    settings_time = annotation.get("Time")
    problems: List[str] = []
    for job_id in job_ids or []:
        if ctx.jobs_uri:
            job = session.get(f"{ctx.jobs_uri.rstrip('/')}/{job_id}", ok=(200, 404)).body
            state = job.get("JobState")
            if state and state != "Completed":
                problems.append(f"config job {job_id} is {state}: {job.get('Message', '')}")
    for message in annotation.get("Messages") or []:
        message_id = str(message.get("MessageId", ""))
        if message_id.endswith(("Success", "SettingsApplied")):
            continue
        related = ", ".join(message.get("RelatedProperties") or []) or "no property named"
        problems.append(f"BMC reports {message_id} ({related}): {message.get('Message', '')}")
    wrong = {k: (values.get(k), v) for k, v in targets.items() if values.get(k) != v}
    if wrong:
        detail = ", ".join(f"{k} is {have!r}, wanted {want!r}" for k, (have, want) in
                           sorted(wrong.items()))
        silently = not problems and settings_time_before and settings_time == settings_time_before
        hint = " (settings Time unchanged: the BMC never applied them)" if silently else ""
        problems.append(f"settings not in effect after reset: {detail}{hint}")
    result = AppliedResult(ctx.host, not problems, {k: values.get(k) for k in targets},
                           settings_time, round(time.monotonic() - started, 3), problems)
    if problems:
        raise RedfishError("; ".join(problems), ctx.host)
    return result
