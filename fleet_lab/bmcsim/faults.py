"""Faults a simulated BMC can be told to show, at start (--fault) or at runtime (admin endpoint)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Union

# faults that name one BIOS attribute (or are true: the first one it applies to)
ATTRIBUTE_FAULTS = ("settings_failed", "value_ignored", "invalid_accepted")


def picks(fault: Union[bool, str], name: str) -> bool:
    """Whether an attribute fault (ATTRIBUTE_FAULTS) hits attribute `name`; true hits any."""
    return fault is True or (isinstance(fault, str) and fault == name)


@dataclass
class Faults:
    latency_ms: int = 0  # added to every request
    unavailable: int = 0  # the next N requests answer 503 with Retry-After
    retry_after_s: int = 1
    drop_after_write: int = 0  # the next N writes are carried out, then the connection is cut
    job_failure: bool = False  # config jobs fail at POST; settings not applied
    settings_not_applied: bool = False  # pending settings silently dropped at POST
    settings_failed: Union[bool, str] = False  # SettingsFailed message for one attribute
    ignore_graceful: bool = False  # GracefulRestart accepted but the OS never restarts
    unreachable_s: float = 0.0  # connections cut for this many seconds from now (one-shot)
    # the system reports no BootProgress, LastResetTime or PostState (many older or simple BMCs)
    no_reset_evidence: bool = False
    warm_reset: bool = False  # a restart keeps PowerState On throughout (a warm reboot)
    no_sessions: bool = False  # no Links.Sessions / SessionService: HTTP basic auth only
    # Field-reported firmware behaviour, per vendor personality where it is reported:
    # /Bios shows pending values as current before they apply (iDRAC: before the config job ran)
    pending_shown_early: bool = False
    # config jobs stay Scheduled through every reset: the settings never apply (iDRAC)
    job_stuck: bool = False
    # @Redfish.SettingsApplyTime accepted and ignored: without a config job nothing applies,
    # the values stay pending (iDRAC 9 firmware)
    apply_time_ignored: bool = False
    # staged values stay pending through every reset, no job, no message (reported on several
    # vendors' models)
    pending_never_applied: bool = False
    # an older BIOS (BiosVersion 1.9.1) whose registry does not declare what the system profile
    # locks: a PATCH of a locked attribute is accepted, its job completes, the value never
    # changes
    undeclared_locks: bool = False
    # (Ironic/Metal3 reports, any vendor) a value the registry lists but this platform does not
    # take: the BIOS keeps its own at POST, no message, the job completes, the other staged
    # values apply (a half-applied BIOS). An attribute name, or true for the first one staged
    value_ignored: Union[bool, str] = False
    # (HPE iLO and others) the settings PATCH answers 200 with an error in
    # @Message.ExtendedInfo for one attribute and stages only the others. An attribute name, or
    # true for the first one in the PATCH
    invalid_accepted: Union[bool, str] = False
    # (iDRAC) the config job is aborted at POST: it ends Failed ("Job aborted"), nothing
    # applies, and the staged values stay pending, applied by whatever job comes next (with an
    # apply time, the job the BMC made itself is aborted: the values stay pending)
    job_aborted: bool = False

    def update(self, values: Dict[str, Any]) -> None:
        known = {f.name: f for f in fields(self)}
        for key, value in values.items():
            if key == "expire_sessions":
                continue  # an action, handled by the caller
            if key not in known:
                raise ValueError(f"unknown fault {key!r}; known: {', '.join(sorted(known))}")
            current = getattr(self, key)
            if key in ATTRIBUTE_FAULTS and isinstance(value, str) and value.lower() not in (
                    "true", "false"):
                setattr(self, key, value)
            elif isinstance(current, bool) or key in ATTRIBUTE_FAULTS:
                setattr(self, key, _as_bool(value, key))
            elif isinstance(current, int):
                setattr(self, key, int(value))
            else:
                setattr(self, key, float(value))

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"fault {key}: expected true/false, got {value!r}")


def parse_fault_args(items: list[str]) -> Dict[str, Any]:
    """`--fault key=value` options of the CLI, as a dict (validated by Faults.update)."""
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--fault {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    Faults().update(out)  # validate names and types now
    return out
