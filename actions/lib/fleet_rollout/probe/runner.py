"""How the probe binary gets run on a host, and the entry point the rollout calls.

A runner takes the probe's argv and returns its stdout. LocalRunner runs the binary on this
machine (optionally against a fake tree with --sysroot, as `sim` hosts do); an Ansible runner that
copies the binary to a server and runs it there plugs in later through the same interface.
"""
from __future__ import annotations

import os
import subprocess
from typing import Any, Dict, List, Optional, Protocol, Sequence

from fleet_rollout.errors import HostError
from fleet_rollout.probe.output import PACK_ROOT, parse_output

DEFAULT_BINARY = PACK_ROOT / "probe" / "build" / "fleet-probe"
DEFAULT_BUDGET_MS = 3000


class ProbeRunner(Protocol):
    """Runs fleet-probe with argv on one host; returns stdout, raises HostError on failure."""

    host: str

    def run(self, argv: Sequence[str], timeout: float) -> str:
        ...


class LocalRunner:
    """Runs the probe binary here, with subprocess. sysroot: read that fake tree instead of /."""

    def __init__(self, host: str = "localhost", binary: Optional[str] = None,
                 sysroot: Optional[str] = None) -> None:
        self.host = host
        self.binary = str(binary or DEFAULT_BINARY)
        self.sysroot = None if sysroot is None else str(sysroot)

    def argv(self, argv: Sequence[str]) -> List[str]:
        full = [self.binary]
        if self.sysroot is not None:
            full += ["--sysroot", self.sysroot]
        return full + list(argv)

    def run(self, argv: Sequence[str], timeout: float) -> str:
        if self.binary == str(DEFAULT_BINARY):
            from fleet_rollout.probe.build import ensure_probe

            self.binary = ensure_probe()
        if not os.access(self.binary, os.X_OK):
            raise HostError(f"probe binary {self.binary} is missing or not executable "
                            "(build it with `make probe`)", self.host)
        try:
            proc = subprocess.run(self.argv(argv), capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise HostError(f"probe did not finish within {timeout:.0f} s", self.host) from None
        except OSError as exc:
            raise HostError(f"cannot run probe {self.binary}: {exc.strerror}",
                            self.host) from None
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            detail = lines[-1] if lines else "no message"
            raise HostError(f"probe exited with status {proc.returncode}: {detail}", self.host)
        return proc.stdout


def probe_argv(budget_ms: Optional[int] = None, cv_limit: Optional[float] = None,
               buffer_mib: Optional[int] = None) -> List[str]:
    argv: List[str] = []
    if budget_ms is not None:
        argv += ["--budget-ms", str(int(budget_ms))]
    if cv_limit is not None:
        argv += ["--cv-limit", repr(float(cv_limit))]
    if buffer_mib is not None:
        argv += ["--buffer-mib", str(int(buffer_mib))]
    return argv


def run_probe(runner: Optional[Any] = None, budget_ms: Optional[int] = None,
              timeout: Optional[float] = None, cv_limit: Optional[float] = None,
              buffer_mib: Optional[int] = None) -> Dict[str, Any]:
    """Run the probe through runner (default: LocalRunner on this machine) and return the parsed,
    schema-checked document. Raises HostError (naming host and field) on any bad outcome."""
    runner = runner if runner is not None else LocalRunner()
    budget = DEFAULT_BUDGET_MS if budget_ms is None else int(budget_ms)
    if timeout is None:
        timeout = 2.0 * budget / 1000.0 + 15.0
    stdout = runner.run(probe_argv(budget_ms, cv_limit, buffer_mib), timeout)
    return parse_output(stdout, runner.host)
