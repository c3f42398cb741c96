"""Resets and the wait for BIOS settings to apply.

reset(): exactly one reset per request, and never a second one while the first may be in
progress. A reset whose answer is lost is not resent. Whether the system restarted is decided by
evidence, from two sides:

- the BMC's own: power went off, LastResetTime or BootProgress.LastStateTime moved, HPE's
  PostState left FinishedPost. Only a BMC that reports LastResetTime, BootProgress or PostState
  can show a warm restart; PowerState alone cannot (a warm reboot keeps it On, a quick one shows
  Off between two polls or never).
- the host's: the OS boot id (the rollout has it through Ansible), given as a callback. A new boot
  id is a restart; no answer means the host may be booting; the old boot id means the OS runs on
  from before the reset.

A GracefulRestart escalates to one ForceRestart only on positive evidence that the OS is running
on unrestarted after the graceful timeout: the host answers with its old boot id, or (no host
callback) a BMC that reports reset evidence shows none. Without any evidence (a BMC without those
properties and no host callback, or a host that does not answer) the reset is reported as
`restart not confirmed` and nothing more is sent.

Polling: one look (a GET of the system) per wait, spaced by `Pacer`. With an expected reboot
time the first look after a reset comes when part of it has passed, and each next one after a
fraction of what remains (never sooner than `poll`); without one, and once the expected time
has passed, the spacing grows from `poll`. A wait's deadline is never overslept by more than
`poll`, and what the last look showed is handed on (wait_post starts from it) instead of being
read again.

wait_applied(): POST finished (BootProgress.LastState, or HPE's Oem PostState), then the BIOS
settings: @Redfish.Settings Time moved, Messages clean, config jobs completed, and the current
values equal the desired ones.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.bios import pending_values, settings_messages
from fleet_rollout.redfish.client import RedfishSession, WriteOutcomeUnknown
from fleet_rollout.redfish.discovery import BmcContext, attributes_of
from fleet_rollout.redfish.shape import Resource, fetch

POST_DONE_STATES = ("OSRunning", "OSBootStarted", "SystemHardwareInitializationComplete")
HP_POST_DONE = ("FinishedPost", "InPostDiscoveryComplete")

# what the host side says: the OS boot id, or None when the host does not answer
HostBootId = Callable[[], Optional[str]]

REMAINING_FRACTION = 0.75  # of the expected reboot time still to come, slept before a look
BACKOFF_FACTOR = 1.5  # growth of the spacing without (or beyond) an expected reboot time
MAX_BACKOFF = 30.0  # seconds: the spacing's ceiling (never below poll)

RESTARTED = "restarted"
NOT_RESTARTED = "not_restarted"  # positive evidence: the system runs on from before the reset
UNKNOWN = "unknown"  # no evidence either way: a restart may be in progress


class RestartNotConfirmed(RedfishError):
    """A reset was sent (once) but nothing shows whether the system restarted. Not resent."""

    def __init__(self, message: str, host: Optional[str], result: Optional[ResetResult] = None
                 ) -> None:
        super().__init__(message, host, transient=True)
        self.result = result


class Pacer:
    """How long to sleep before the next look while a system reboots.

    expected: seconds the reboot is expected to take, counted from `elapsed` seconds ago (when
    the reset was sent); None when unknown. deadline: the wait's end (monotonic)."""

    def __init__(self, poll: float, expected: Optional[float] = None, elapsed: float = 0.0,
                 deadline: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.poll = max(0.0, float(poll))
        self.expected = float(expected) if expected and expected > 0 else None
        self.clock = clock
        self.start = clock() - max(0.0, elapsed)
        self.deadline = deadline
        self._backoff = self.poll
        self._ceiling = max(self.poll, min(MAX_BACKOFF, 8 * self.poll))

    def next_sleep(self) -> float:
        now = self.clock()
        remaining = self.expected - (now - self.start) if self.expected is not None else 0.0
        if remaining > 0:
            delay = max(self.poll, REMAINING_FRACTION * remaining)
        else:
            delay = self._backoff
            self._backoff = min(self._ceiling, max(self.poll, self._backoff * BACKOFF_FACTOR))
        if self.deadline is not None:
            delay = min(delay, max(self.poll, self.deadline - now))
        return delay


@dataclass
class BootMarker:
    power_state: Optional[str]
    last_state: Optional[str]
    last_state_time: Optional[str]
    last_reset_time: Optional[str]
    post_state: Optional[str]
    boot_id: Optional[str] = None  # the host's OS boot id, when the caller has a host side

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @property
    def bmc_evidence(self) -> bool:
        """The BMC reports properties that move at every restart, warm ones included."""
        return any(v is not None for v in (self.last_reset_time, self.last_state_time,
                                           self.post_state))


def boot_marker(system: Dict[str, Any], oem_key: Optional[str], host: Optional[str] = None,
                uri: str = "system") -> BootMarker:
    """The restart evidence a ComputerSystem shows; RedfishError when a field has a wrong type."""
    res = Resource(system, host, uri)
    progress = res.obj("BootProgress")
    post = res.obj("Oem").obj(oem_key).text("PostState") if oem_key else None
    return BootMarker(res.text("PowerState"), progress.text("LastState"),
                      progress.text("LastStateTime"), res.text("LastResetTime"), post)


def bmc_evidence(before: BootMarker, now: BootMarker) -> Optional[str]:
    """The BMC's evidence that the system went through a reset after `before`, or None."""
    if now.power_state and now.power_state != "On" and before.power_state == "On":
        return f"PowerState {now.power_state}"
    if before.power_state not in (None, "On") and now.power_state == "On":
        return f"PowerState {before.power_state} -> On"
    if now.last_reset_time and now.last_reset_time != before.last_reset_time:
        return "LastResetTime moved"
    if now.last_state_time and now.last_state_time != before.last_state_time:
        return "BootProgress.LastStateTime moved"
    if now.post_state and now.post_state not in HP_POST_DONE:
        return f"PostState {now.post_state}"
    return None


def restarted_since(before: BootMarker, now: BootMarker) -> bool:
    """Evidence from the BMC that the system went through a reset after `before` was taken."""
    return bmc_evidence(before, now) is not None


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
    evidence: Optional[str] = None  # what showed the restart
    after: Optional[Dict[str, Any]] = None  # the system as the look that showed it saw it
    since_sent: float = 0.0  # seconds from the last reset sent to that look

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _marker(session: RedfishSession, ctx: BmcContext) -> BootMarker:
    return boot_marker(session.get(ctx.system_uri).body, ctx.personality.post_state_oem,
                       ctx.host, ctx.system_uri)


def _ask_host(host_boot_id: Optional[HostBootId]) -> Optional[str]:
    if host_boot_id is None:
        return None
    try:
        value = host_boot_id()
    except Exception:  # the host side failing to answer is "no answer", never a crash here
        return None
    return str(value) if value else None


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


class _Watch:
    """Looks for evidence of a restart since `before`, from the BMC and the host side."""

    def __init__(self, session: RedfishSession, ctx: BmcContext, before: BootMarker,
                 host_boot_id: Optional[HostBootId]) -> None:
        self.session = session
        self.ctx = ctx
        self.before = before
        self.host_boot_id = host_boot_id if before.boot_id else None
        self.evidence: Optional[str] = None
        self.last: Optional[BootMarker] = None  # what the last look at the BMC showed
        self.host_answered = False  # last host answer: the old boot id (OS up, not restarted)

    def _host(self) -> Optional[str]:
        now = _ask_host(self.host_boot_id)
        self.host_answered = now is not None and now == self.before.boot_id
        if now is not None and now != self.before.boot_id:
            return "host boot id changed"
        return None

    def poll(self) -> bool:
        self.last = None
        try:
            self.last = _marker(self.session, self.ctx)
            self.evidence = bmc_evidence(self.before, self.last)
        except RedfishError as err:
            if not err.transient:
                raise  # a BMC busy rebooting its host may be slow: keep looking
        if self.evidence is None and not self.before.bmc_evidence:
            self.evidence = self._host()  # the BMC cannot show a warm restart: ask the host
        return self.evidence is not None

    def verdict(self) -> str:
        """At the end of the wait: restarted, not restarted (positive evidence) or unknown."""
        if self.evidence:
            return RESTARTED
        if self.host_boot_id is not None:
            self.evidence = self._host()
            if self.evidence:
                return RESTARTED
            return NOT_RESTARTED if self.host_answered else UNKNOWN
        return NOT_RESTARTED if self.before.bmc_evidence else UNKNOWN


def await_restart(session: RedfishSession, ctx: BmcContext, before: BootMarker, timeout: float,
                  poll: float, sleep: Callable[[float], None] = time.sleep,
                  host_boot_id: Optional[HostBootId] = None) -> str:
    """Wait up to `timeout` for evidence of a restart since `before`.

    Returns RESTARTED, NOT_RESTARTED (the system positively runs on from before) or UNKNOWN.
    The first look is immediate (a restart may be long over); the next ones are paced.
    """
    return _await(session, ctx, before, timeout, poll, sleep, host_boot_id)[0]


def _await(session: RedfishSession, ctx: BmcContext, before: BootMarker, timeout: float,
           poll: float, sleep: Callable[[float], None], host_boot_id: Optional[HostBootId],
           expected: Optional[float] = None, look_first: bool = True) -> tuple:
    """(verdict, evidence, last marker seen or None). look_first=False: a reset was just sent,
    so the first look waits for the pacer (nothing to see the instant after)."""
    watch = _Watch(session, ctx, before, host_boot_id)
    deadline = time.monotonic() + timeout
    pacer = Pacer(poll, expected, deadline=deadline)
    if not look_first:
        sleep(pacer.next_sleep())
    while True:
        if watch.poll():
            return RESTARTED, watch.evidence, watch.last
        if time.monotonic() >= deadline:
            verdict = watch.verdict()
            return verdict, watch.evidence, watch.last
        sleep(pacer.next_sleep())


def _no_evidence_text(before: BootMarker, host: bool) -> str:
    parts = []
    if not before.bmc_evidence:
        parts.append("the BMC reports no reset evidence (no BootProgress, LastResetTime or "
                     "PostState) and PowerState never left On")
    else:
        parts.append("the BMC shows no reset")
    if host:
        parts.append("the host side did not answer (it may be booting)")
    else:
        parts.append("no host-side boot id was given")
    return "; ".join(parts)


def reset(session: RedfishSession, ctx: BmcContext, graceful_timeout: float = 300.0,
          force_timeout: float = 120.0, poll: float = 2.0, graceful: bool = True,
          sleep: Callable[[float], None] = time.sleep,
          host_boot_id: Optional[HostBootId] = None,
          boot_id_before: Optional[str] = None,
          on_before: Optional[Callable[[BootMarker], None]] = None,
          expected: Optional[float] = None) -> ResetResult:
    """Restart the system once; escalate to one ForceRestart only if the OS positively ignored a
    GracefulRestart. RestartNotConfirmed (nothing more sent) when no evidence decides.

    host_boot_id: the host side's OS boot id (None while the host does not answer);
    boot_id_before: the boot id before the reset if the caller already has it;
    on_before: called with the marker the restart evidence is judged against, once the system
    has settled and before anything is sent (a caller that must survive a crash stores it: a
    marker taken mid-boot would show the end of that boot as a restart);
    expected: seconds a reboot is expected to take (paces the looks, see Pacer).
    """
    started = time.monotonic()
    result = ResetResult(ctx.host)
    before = _marker(session, ctx)
    deadline = time.monotonic() + graceful_timeout
    settle = Pacer(poll, deadline=deadline)
    while not settled(before) and time.monotonic() < deadline:
        # never reset a system mid-boot: its restart evidence would be ambiguous
        sleep(settle.next_sleep())
        before = _marker(session, ctx)
    if not settled(before):
        graceful = False  # an OS that never finished booting will not act on an ACPI request
    if host_boot_id is not None:
        before.boot_id = boot_id_before or _ask_host(host_boot_id)
    result.before = before.to_dict()
    if on_before is not None:
        on_before(before)
    allowed = ctx.reset_types or ["GracefulRestart", "ForceRestart", "On"]
    if before.power_state == "Off":
        first = "On"
    elif graceful and "GracefulRestart" in allowed:
        first = "GracefulRestart"
    else:
        first = "ForceRestart"
    _post_reset(session, ctx, first, result, sleep)
    sent_at = time.monotonic()
    timeout = graceful_timeout if first == "GracefulRestart" else force_timeout
    verdict, result.evidence, last = _await(session, ctx, before, timeout, poll, sleep,
                                            host_boot_id, expected, look_first=False)
    host_known = host_boot_id is not None and before.boot_id is not None
    if verdict == UNKNOWN:
        raise RestartNotConfirmed(
            f"restart not confirmed: {first} sent once, no evidence after {timeout:.0f}s "
            f"({_no_evidence_text(before, host_known)}); not sending another reset while one "
            "may be in progress", ctx.host, result)
    if verdict == NOT_RESTARTED:
        if first != "GracefulRestart" or "ForceRestart" not in allowed:
            raise RedfishError(f"{first} sent but the system shows no sign of restarting after "
                               f"{timeout:.0f}s", ctx.host, transient=True)
        result.escalated = True
        _post_reset(session, ctx, "ForceRestart", result, sleep)
        sent_at = time.monotonic()
        verdict, result.evidence, last = _await(session, ctx, before, force_timeout, poll,
                                                sleep, host_boot_id, expected, look_first=False)
        if verdict == UNKNOWN:
            raise RestartNotConfirmed(
                f"restart not confirmed: GracefulRestart ignored for {graceful_timeout:.0f}s, "
                f"ForceRestart sent once, no evidence after {force_timeout:.0f}s "
                f"({_no_evidence_text(before, host_known)})", ctx.host, result)
        if verdict == NOT_RESTARTED:
            raise RedfishError(f"GracefulRestart ignored for {graceful_timeout:.0f}s and "
                               f"ForceRestart showed no effect after {force_timeout:.0f}s",
                               ctx.host, transient=True)
    result.after = last.to_dict() if last is not None else None
    result.since_sent = round(time.monotonic() - sent_at, 3)
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
    # seconds of `seconds` spent until POST was seen finished (the rest: reading the BIOS back)
    post_seconds: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def wait_post(session: RedfishSession, ctx: BmcContext, timeout: float, poll: float,
              sleep: Callable[[float], None] = time.sleep,
              host_boot_id: Optional[HostBootId] = None,
              boot_id_before: Optional[str] = None, expected: Optional[float] = None,
              since_reset: float = 0.0, seen: Optional[BootMarker] = None) -> BootMarker:
    """Wait until POST has finished. A BMC that reports no boot progress (no BootProgress, no
    PostState) shows only power: then, given the host side, wait for the host to answer with a
    new boot id (its OS came up after POST).

    expected/since_reset: the expected reboot time and how long ago the reset was sent (pace the
    looks, see Pacer); seen: what a look at the system just showed (judged before any GET)."""
    deadline = time.monotonic() + timeout
    pacer = Pacer(poll, expected, since_reset, deadline)
    while True:
        try:
            marker = seen if seen is not None else _marker(session, ctx)
            seen = None
            if post_finished(marker):
                blind = marker.last_state is None and marker.post_state is None
                if not (blind and host_boot_id is not None and boot_id_before):
                    return marker
                now = _ask_host(host_boot_id)
                if now is not None and now != boot_id_before:
                    marker.boot_id = now
                    return marker
        except RedfishError as err:
            if not err.transient:
                raise
            marker = None
        if time.monotonic() >= deadline:
            state = marker.to_dict() if marker else "unreachable"
            raise RedfishError(f"POST not finished after {timeout:.0f}s (last seen: {state})",
                               ctx.host, transient=True)
        sleep(pacer.next_sleep())


def _job_problems(session: RedfishSession, ctx: BmcContext, job_ids: List[str]) -> List[str]:
    """Config jobs that did not complete."""
    problems: List[str] = []
    if not ctx.jobs_uri:
        return problems
    for job_id in job_ids:
        job = fetch(session, f"{ctx.jobs_uri.rstrip('/')}/{job_id}", ok=(200, 404))
        state = job.text("JobState")
        if state == "Scheduled":
            problems.append(f"config job {job_id} is still Scheduled after the reset: the BMC "
                            "never ran it, so nothing applied")
        elif state and state != "Completed":
            problems.append(f"config job {job_id} is {state}: {job.text('Message') or ''}")
    return problems


def _still_pending(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                   values: Dict[str, Any]) -> List[str]:
    """Targets the settings object still holds as pending after the reset: staged, and the reset
    did not apply them (no job took them, an apply time ignored, a job that never ran). Where
    the settings object lists only pending values (iDRAC), whatever it lists, even when /Bios
    shows the same value already."""
    settings = fetch(session, ctx.settings_uri)
    view = attributes_of(settings.body, ctx.personality.flat_body, ctx.host, ctx.settings_uri)
    pending = pending_values(ctx, view, values)
    still = {k: v for k, v in targets.items() if k in pending and pending[k] == v}
    if not still:
        return []
    listing = ", ".join(f"{k}={v}" for k, v in sorted(still.items()))
    shown = " (/Bios shows them already; they never applied)" if all(
        values.get(k) == v for k, v in still.items()) else ""
    return [f"still pending after the reset: {listing}: staged, and the reset did not apply "
            f"them{shown}"]


def wait_applied(session: RedfishSession, ctx: BmcContext, targets: Dict[str, Any],
                 settings_time_before: Optional[str] = None, job_ids: Optional[List[str]] = None,
                 timeout: float = 900.0, poll: float = 2.0,
                 sleep: Callable[[float], None] = time.sleep,
                 host_boot_id: Optional[HostBootId] = None,
                 boot_id_before: Optional[str] = None, expected: Optional[float] = None,
                 since_reset: float = 0.0, seen: Optional[BootMarker] = None) -> AppliedResult:
    """Wait until POST is done, then check that the BIOS now holds `targets`.

    expected, since_reset, seen: see wait_post (a caller that just reset passes
    ResetResult.after and since_sent).

    Raises RedfishError naming every problem (failed job, SettingsFailed message, values that did
    not apply silently) so the caller can restore the host.
    """
    started = time.monotonic()
    wait_post(session, ctx, timeout, poll, sleep, host_boot_id, boot_id_before, expected,
              since_reset, seen)
    post_seconds = round(time.monotonic() - started, 3)
    bios = fetch(session, ctx.bios_uri)
    values = attributes_of(bios.body, ctx.personality.flat_body, ctx.host, ctx.bios_uri)
    annotation = bios.obj("@Redfish.Settings")
    settings_time = annotation.text("Time")
    problems = _job_problems(session, ctx, job_ids or [])
    for message in settings_messages(annotation):
        message_id = str(message.get("MessageId") or "")
        if message_id.endswith(("Success", "SettingsApplied")):
            continue
        related = ", ".join(message.get("RelatedProperties") or []) or "no property named"
        problems.append(f"BMC reports {message_id} ({related}): {message.get('Message') or ''}")
    wrong = {k: (values.get(k), v) for k, v in targets.items() if values.get(k) != v}
    # where the settings object lists only pending values, /Bios alone is no proof: a config job
    # that completed is; without one, the settings object must no longer hold the targets
    unproven = ctx.personality.settings_pending_only and (not job_ids or bool(problems))
    if wrong or unproven:
        problems += _still_pending(session, ctx, targets, values)
    if wrong:
        detail = ", ".join(f"{k} is {have!r}, wanted {want!r}" for k, (have, want) in
                           sorted(wrong.items()))
        silently = not problems and settings_time_before and settings_time == settings_time_before
        hint = " (settings Time unchanged: the BMC never applied them)" if silently else ""
        took = sorted(k for k, v in targets.items() if values.get(k) == v)
        if took and not problems:
            hint += (f" (half applied: {', '.join(took)} took the new value; the BMC reported "
                     "no error, so the BIOS ignored the rest: a value this platform does not "
                     "support?)")
        problems.append(f"settings not in effect after reset: {detail}{hint}")
        if ctx.personality.profile_lock:
            profile, unlocked = ctx.personality.profile_lock
            if values.get(profile) not in (None, unlocked):
                problems.append(f"{profile} is {values.get(profile)}: this system profile locks "
                                f"processor and memory settings unless it is {unlocked}, whatever "
                                "the BMC answered to the change")
    result = AppliedResult(ctx.host, not problems, {k: values.get(k) for k in targets},
                           settings_time, round(time.monotonic() - started, 3), problems,
                           post_seconds)
    if problems:
        raise RedfishError("; ".join(problems), ctx.host)
    return result
