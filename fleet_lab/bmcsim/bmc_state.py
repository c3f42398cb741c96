"""State of one simulated BMC and its server: BIOS settings, jobs, power and boot progress.

Pure state and the reboot walk; no HTTP here (see http.py). Everything runs on one asyncio loop.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from fleet_lab.bmcsim.faults import Faults, picks
from fleet_lab.bmcsim.vendors import PROFILE_ATTRIBUTE, PROFILE_UNLOCKED, VendorSpec
from fleet_lab.hosts import BootConfig, HostBackend, NullBackend, boot_config

RESET_TYPES = ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart",
               "PushPowerButton"]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class SimError(Exception):
    """A request the simulated BMC refuses: becomes a Redfish error response."""

    def __init__(self, status: int, message_id: str, message: str,
                 related: Optional[List[str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message_id = message_id
        self.message = message
        self.related = related or []


@dataclass
class Job:
    id: str
    state: str = "Scheduled"  # Scheduled -> Running -> Completed | Failed
    message: str = "Task successfully scheduled."
    target: str = ""
    created: str = field(default_factory=now_iso)
    percent: int = 0


@dataclass
class Timing:
    """How long a reboot takes, in seconds, split into its phases."""

    reboot_seconds: float = 20.0

    @property
    def shutdown(self) -> float:  # graceful OS shutdown before power goes off
        return self.reboot_seconds * 0.15

    @property
    def off(self) -> float:
        return self.reboot_seconds * 0.10

    @property
    def post(self) -> float:  # firmware POST, where BIOS settings are applied
        return self.reboot_seconds * 0.45

    @property
    def os_boot(self) -> float:  # minimum OS boot time; the backend may take longer
        return self.reboot_seconds * 0.30


class Bmc:
    """One BMC and the server behind it."""

    def __init__(self, name: str, port: int, spec: VendorSpec, username: str, password: str,
                 timing: Timing, backend: Optional[HostBackend] = None,
                 state_dir: Optional[str] = None, faults: Optional[Faults] = None,
                 os_boot_timeout: float = 600.0) -> None:
        self.name = name
        self.port = port
        self.spec = spec
        self.username = username
        self.password = password
        self.timing = timing
        self.backend: HostBackend = backend or NullBackend()
        self.state_dir = state_dir
        self.faults = faults or Faults()
        self.os_boot_timeout = os_boot_timeout
        self.current: Dict[str, str] = {a.name: a.default for a in spec.attributes}
        self.pending: Dict[str, str] = {}
        self.pending_apply_on_reset = False
        self.settings_generation = 1
        self.settings_time = now_iso()
        self.messages: List[Dict[str, Any]] = []
        self.power_state = "On"
        self.boot_state = "OSRunning"
        self.boot_state_time = now_iso()
        self.last_reset_time = now_iso()
        self.post_state = "FinishedPost"
        self.boot_count = 1
        self.jobs: Dict[str, Job] = {}
        self.sessions: Dict[str, str] = {}  # session id -> token
        self.issued_tokens: List[str] = []
        self.counters: Dict[str, int] = {}
        self.resets: List[str] = []  # accepted reset types, in order
        self.tasks: Dict[str, float] = {}  # task monitor id -> time it completes
        self._reboot: Optional[asyncio.Task] = None
        self.unreachable_until = 0.0
        self._load()

    # ---------------------------------------------------------------- persistence
    def _path(self) -> Optional[str]:
        if not self.state_dir:
            return None
        return os.path.join(self.state_dir, "bmc", f"{self.name}.json")

    def _load(self) -> None:
        path = self._path()
        if not path or not os.path.exists(path):
            return
        with open(path) as handle:
            data = json.load(handle)
        if data.get("vendor") != self.spec.key:
            return  # a lab re-created with another vendor starts from defaults
        self.current.update(data.get("current", {}))
        self.pending = dict(data.get("pending", {}))
        self.pending_apply_on_reset = bool(data.get("pending_apply_on_reset", False))
        self.settings_generation = int(data.get("settings_generation", 1))
        self.settings_time = data.get("settings_time", self.settings_time)
        self.boot_count = int(data.get("boot_count", 1))
        self.jobs = {j["id"]: Job(**j) for j in data.get("jobs", [])}

    def save(self) -> None:
        path = self._path()
        if not path:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = {
            "vendor": self.spec.key, "current": self.current, "pending": self.pending,
            "pending_apply_on_reset": self.pending_apply_on_reset,
            "settings_generation": self.settings_generation, "settings_time": self.settings_time,
            "boot_count": self.boot_count, "jobs": [asdict(j) for j in self.jobs.values()],
        }
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)

    # ---------------------------------------------------------------- sessions
    def create_session(self) -> tuple[str, str]:
        session_id = secrets.token_hex(8)
        token = secrets.token_hex(16)
        self.sessions[session_id] = token
        self.issued_tokens.append(token)  # lab only: lets tests prove tokens never leak
        return session_id, token

    def session_for_token(self, token: str) -> Optional[str]:
        for session_id, known in self.sessions.items():
            if secrets.compare_digest(known, token):
                return session_id
        return None

    def expire_sessions(self) -> None:
        self.sessions.clear()

    # ---------------------------------------------------------------- BIOS settings
    @property
    def settings_etag(self) -> str:
        return f'"{self.spec.key}-{self.settings_generation}"'

    def settings_view(self) -> Dict[str, str]:
        """Attributes the settings object shows: all of them (full copy) or only pending ones."""
        if self.spec.settings_full_copy:
            view = dict(self.current)
            view.update(self.pending)
            return view
        return dict(self.pending)

    def locked(self, profile: Optional[str] = None) -> set:
        """Attributes a system profile (default: the current one) locks
        (vendors.VendorSpec.profile_locks)."""
        profile = profile or self.current.get(PROFILE_ATTRIBUTE)
        if not self.spec.profile_locks or profile in (None, PROFILE_UNLOCKED):
            return set()
        return set(self.spec.profile_locks)

    def bios_view(self) -> Dict[str, str]:
        """Attributes /Bios shows as current: the current ones, or (pending_shown_early) with the
        pending ones already in them, before anything applied."""
        if self.faults.pending_shown_early:
            return {**self.current, **self.pending}
        return dict(self.current)

    def has_scheduled_job(self) -> bool:
        return any(j.state in ("Scheduled", "Running") for j in self.jobs.values())

    def patch_settings(self, attributes: Dict[str, Any], apply_on_reset: bool
                       ) -> Optional[Dict[str, str]]:
        """Stage `attributes`. Returns the attribute and value the fault invalid_accepted left
        out (the answer names it in @Message.ExtendedInfo), else None."""
        if self.spec.commit == "job" and self.has_scheduled_job():
            raise SimError(400, "IDRAC.2.8.SYS011",
                           "Pending configuration values are already committed, unable to "
                           "perform another set operation.")
        for name, value in attributes.items():
            attr = self.spec.attribute(name)
            if attr is None:
                raise SimError(400, "Base.1.8.PropertyUnknown",
                               f"The property {name} is not in the list of valid properties for "
                               "the resource.", [f"/Attributes/{name}"])
            if attr.read_only or attr.gray_out:
                raise SimError(400, "Base.1.8.PropertyNotWritable",
                               f"The property {name} is a read only property and cannot be "
                               "assigned a value.", [f"/Attributes/{name}"])
            if value not in [v for v, _ in attr.values]:
                raise SimError(400, "Base.1.8.PropertyValueNotInList",
                               f"The value {value} for the property {name} is not in the list of "
                               "acceptable values.", [f"/Attributes/{name}"])
        invalid = self.faults.invalid_accepted
        hit = next((k for k, v in attributes.items()
                    if invalid and picks(invalid, k) and self.current.get(k) != v), None)
        dropped = None if hit is None else {"name": hit, "value": str(attributes[hit])}
        attributes = {k: v for k, v in attributes.items() if k != hit}
        for name, value in attributes.items():
            if self.current.get(name) == value:
                self.pending.pop(name, None)  # writing the current value cancels a pending one
            else:
                self.pending[name] = value
        if apply_on_reset:
            self.pending_apply_on_reset = True
        if not self.pending:
            self.pending_apply_on_reset = False
        self.settings_generation += 1
        self.save()
        return dropped

    def clear_pending(self) -> None:
        if self.has_scheduled_job():
            raise SimError(400, "IDRAC.2.8.SYS018",
                           "Unable to clear pending values: a configuration job is scheduled; "
                           "delete the job first.")
        self.pending.clear()
        self.pending_apply_on_reset = False
        self.settings_generation += 1
        self.save()

    def create_job(self, target: str) -> Job:
        settings_uri = f"/redfish/v1/Systems/{self.spec.system_id}/{self.spec.settings_path}"
        if target.rstrip("/") != settings_uri:
            raise SimError(400, "IDRAC.2.8.SYS426", f"Invalid TargetSettingsURI {target}.",
                           ["/TargetSettingsURI"])
        if self.has_scheduled_job():
            raise SimError(400, "IDRAC.2.8.SYS011",
                           "Pending configuration values are already committed, unable to "
                           "perform another set operation.")
        if not self.pending:
            raise SimError(400, "IDRAC.2.8.SYS030", "No pending data present to create a "
                           "Configuration job.")
        job = Job(id=f"JID_{int(time.time() * 1000) % 10**12:012d}", target=target)
        while job.id in self.jobs:
            job.id = f"JID_{int(job.id[4:]) + 1:012d}"
        self.jobs[job.id] = job
        self.save()
        return job

    def delete_job(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            raise SimError(404, "Base.1.8.ResourceMissingAtURI", f"No job {job_id}.")
        if job.state == "Running":
            raise SimError(400, "IDRAC.2.8.SUP017", f"Job {job_id} is running; cannot delete.")
        del self.jobs[job_id]
        self.save()

    def _pending_takes_effect(self) -> bool:
        if not self.pending or self.faults.pending_never_applied:
            return False
        if self.faults.apply_time_ignored:  # only a config job applies them
            return self.has_scheduled_job()
        if self.spec.commit == "job":
            return self.has_scheduled_job()
        if self.spec.commit == "job_or_applytime":
            return self.has_scheduled_job() or self.pending_apply_on_reset
        return True

    def apply_pending_at_post(self) -> None:
        """What firmware does during POST with staged settings (and injected faults)."""
        jobs = [j for j in self.jobs.values() if j.state == "Scheduled"]
        if not self._pending_takes_effect():
            return
        if self.faults.job_stuck and jobs:
            return  # the job never leaves Scheduled; the pending values stay pending
        for job in jobs:
            job.state, job.percent = "Running", 50
        self.messages = []
        if self.faults.job_failure and jobs:
            for job in jobs:
                job.state, job.message = "Failed", "Job failed: BIOS configuration not applied."
            self.pending.clear()
        elif self.faults.job_aborted:  # (an apply time's own job is aborted the same way)
            for job in jobs:  # the pending values stay: the next job applies them
                job.state, job.message = "Failed", ("Job aborted: the configuration was "
                                                    "interrupted; pending values are kept.")
        elif self.faults.settings_not_applied:
            self.pending.clear()  # silently dropped: no message, values unchanged
        else:
            failed = self.faults.settings_failed
            ignored = self.faults.value_ignored
            locked = self.locked(self.pending.get(PROFILE_ATTRIBUTE))  # as the job leaves it
            for name, value in self.pending.items():
                if name in locked:
                    continue  # the profile wins: no message, the job still completes
                if ignored and picks(ignored, name):
                    ignored = None  # the platform keeps its own value: no message either
                    continue
                if failed and picks(failed, name):
                    self.messages.append({
                        "MessageId": "Base.1.8.SettingsFailed",
                        "Message": f"Settings of {name} failed to apply.",
                        "Severity": "Warning",
                        "RelatedProperties": [f"/Attributes/{name}"],
                    })
                    failed = None if failed is True else failed
                    continue
                self.current[name] = value
            self.pending.clear()
            for job in jobs:
                job.state, job.percent = "Completed", 100
                job.message = "Job completed successfully."
        self.pending_apply_on_reset = False
        self.settings_time = now_iso()
        self.settings_generation += 1
        self.save()

    # ---------------------------------------------------------------- power
    def logical_settings(self) -> Dict[str, str]:
        out: Dict[str, str] = {}
        for knob in ("snoop_mode", "node_interleaving"):
            attr = self.spec.knob_attribute(knob)
            if attr is not None:
                value = attr.logical.get(self.current.get(attr.name, ""))
                if value:
                    out[knob] = value
        return out

    def boot_config(self) -> BootConfig:
        logical = self.logical_settings()
        return boot_config(self.name, logical.get("snoop_mode", "home"),
                           logical.get("node_interleaving", "disabled"),
                           extra={k: v for k, v in self.current.items()})

    @property
    def rebooting(self) -> bool:
        return self._reboot is not None and not self._reboot.done()

    def reset(self, reset_type: str) -> None:
        if reset_type not in RESET_TYPES:
            raise SimError(400, "Base.1.8.ActionParameterNotSupported",
                           f"The parameter ResetType with value {reset_type} is not supported.",
                           ["/ResetType"])
        if reset_type in ("On",) and self.power_state == "On":
            raise SimError(409, "Base.1.8.ResourceInStandby", "The system is already on.")
        self.resets.append(reset_type)
        if reset_type == "GracefulRestart" and self.faults.ignore_graceful:
            return  # the OS never acts on the ACPI request: only ForceRestart helps
        if self.rebooting and reset_type in ("GracefulRestart", "GracefulShutdown"):
            return
        if self._reboot is not None and not self._reboot.done():
            self._reboot.cancel()
        self._reboot = asyncio.get_event_loop().create_task(self._walk(reset_type))

    def _set_boot(self, state: str, post_state: Optional[str] = None) -> None:
        self.boot_state = state
        self.boot_state_time = now_iso()
        if post_state:
            self.post_state = post_state

    async def _walk(self, reset_type: str) -> None:
        t = self.timing
        if reset_type in ("GracefulRestart", "GracefulShutdown"):
            await asyncio.sleep(t.shutdown)
        warm = self.faults.warm_reset and reset_type in ("GracefulRestart", "ForceRestart")
        if reset_type != "On":
            if not warm:
                self.power_state = "Off"
            self._set_boot("None", "PowerOff")
            await self._host(self.backend.power_off, self.name)
            if reset_type in ("ForceOff", "GracefulShutdown"):
                return
            await asyncio.sleep(t.off)
        self.power_state = "On"
        self.last_reset_time = now_iso()
        self._set_boot("PrimaryProcessorInitializationStarted", "InPost")
        await asyncio.sleep(t.post / 2)
        self._set_boot("MemoryInitializationStarted", "InPostDiscoveryComplete")
        self.apply_pending_at_post()
        await asyncio.sleep(t.post / 2)
        self._set_boot("SystemHardwareInitializationComplete", "FinishedPost")
        self.boot_count += 1
        self.save()
        await self._host(self.backend.power_on, self.boot_config())
        self._set_boot("OSBootStarted")
        await asyncio.sleep(t.os_boot)
        await self._await_os()

    @staticmethod
    async def _host(func: Any, *args: Any) -> Any:
        """Backend calls may block (QEMU start, SSH probe): keep them off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    def start_host(self) -> None:
        """Boot the server when the lab starts (the BMC was already powered)."""
        if self.power_state != "On":
            return
        self._set_boot("OSBootStarted")
        self._reboot = asyncio.get_event_loop().create_task(self._first_boot())

    async def _first_boot(self) -> None:
        await self._host(self.backend.power_on, self.boot_config())
        await self._await_os()

    async def _await_os(self) -> None:
        deadline = time.monotonic() + self.os_boot_timeout
        while time.monotonic() < deadline:
            if await self._host(self.backend.is_up, self.name):
                self._set_boot("OSRunning")
                return
            await asyncio.sleep(0.5)

    def count(self, key: str) -> None:
        self.counters[key] = self.counters.get(key, 0) + 1

    def state_document(self) -> Dict[str, Any]:
        """Everything a test or an operator wants to see (admin endpoint)."""
        return {
            "name": self.name, "port": self.port, "vendor": self.spec.key,
            "current": self.current, "pending": self.pending,
            "pending_apply_on_reset": self.pending_apply_on_reset,
            "logical": self.logical_settings(), "settings_etag": self.settings_etag,
            "settings_time": self.settings_time, "messages": self.messages,
            "power_state": self.power_state, "boot_state": self.boot_state,
            "post_state": self.post_state, "boot_count": self.boot_count,
            "rebooting": self.rebooting, "resets": self.resets,
            # lab stand-in for the host side's OS boot id (what Ansible reads from
            # /proc/sys/kernel/random/boot_id): new at every boot, None while the OS is not up
            "host_boot_id": (f"{self.name}-boot{self.boot_count}"
                             if self.boot_state == "OSRunning" else None),
            "jobs": [asdict(j) for j in self.jobs.values()],
            "sessions_active": len(self.sessions), "counters": self.counters,
            "faults": self.faults.to_dict(),
        }
