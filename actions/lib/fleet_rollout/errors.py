"""Exceptions of the domain library.

Every error names what it is about (file, host, field) so an operator can act on it without
reading a traceback. Secrets never enter messages: build them from names, not from values.
"""
from __future__ import annotations

from typing import Optional


class FleetRolloutError(Exception):
    """Base class of every error the library raises on purpose."""

    def __init__(self, message: str, host: Optional[str] = None) -> None:
        self.host = host
        super().__init__(f"{host}: {message}" if host else message)


class ConfigError(FleetRolloutError):
    """Bad input: a profile, inventory, policy, parameter or pack config value."""


class RedfishError(FleetRolloutError):
    """A BMC answered something we cannot act on, or could not be reached."""

    def __init__(
        self,
        message: str,
        host: Optional[str] = None,
        status: Optional[int] = None,
        transient: bool = False,
    ) -> None:
        self.status = status
        self.transient = transient
        super().__init__(message, host)


class KnobError(RedfishError):
    """A BIOS knob or value the host cannot take (checked before any write)."""


class HostError(FleetRolloutError):
    """Something on the server itself (SSH, Ansible task, probe) failed."""
