"""The topology probe: run probe/build/fleet-probe on a host, check its output, verify it.

    from fleet_rollout.probe import LocalRunner, run_probe, verify
    doc = run_probe(LocalRunner(host="lab-01", sysroot="/var/lab/lab-01"))
    result = verify(doc, snoop_mode="home", node_interleaving="disabled", sockets=2)
    result.ok, result.reasons, result.numbers

Method, output format and the model used under --sysroot: docs/probe.md.
"""
from __future__ import annotations

from fleet_rollout.probe.output import SCHEMA_PATH, load_schema, parse_output, schema_errors
from fleet_rollout.probe.runner import (
    DEFAULT_BINARY,
    DEFAULT_BUDGET_MS,
    LocalRunner,
    ProbeRunner,
    probe_argv,
    run_probe,
)
from fleet_rollout.probe.verify import (
    NODE_INTERLEAVING,
    SNOOP_MODES,
    VerifyPolicy,
    VerifyResult,
    expected_node_count,
    fingerprint,
    fingerprint_record,
    verify,
)

__all__ = [
    "DEFAULT_BINARY",
    "DEFAULT_BUDGET_MS",
    "NODE_INTERLEAVING",
    "SCHEMA_PATH",
    "SNOOP_MODES",
    "LocalRunner",
    "ProbeRunner",
    "VerifyPolicy",
    "VerifyResult",
    "expected_node_count",
    "fingerprint",
    "fingerprint_record",
    "load_schema",
    "parse_output",
    "probe_argv",
    "run_probe",
    "schema_errors",
    "verify",
]
