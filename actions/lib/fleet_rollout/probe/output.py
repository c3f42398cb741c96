"""Parse and check one fleet-probe output (probe/probe-output.schema.json, JSON Schema Draft 4).

Anything wrong with the output (not JSON, a schema violation, inconsistent sizes) raises
fleet_rollout.errors.HostError naming the host and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from fleet_rollout.errors import HostError
from fleet_rollout.paths import PACK_DIR, PROBE_DIR

PACK_ROOT = Path(PACK_DIR)
SCHEMA_PATH = Path(PROBE_DIR) / "probe-output.schema.json"
SCHEMA_VERSION = 1

_validator_cache: Dict[str, Any] = {}


def load_schema(path: Optional[Path] = None) -> Dict[str, Any]:
    with open(path or SCHEMA_PATH, encoding="utf-8") as handle:
        return json.load(handle)


def _validator(path: Optional[Path] = None) -> Any:
    key = str(path or SCHEMA_PATH)
    if key not in _validator_cache:
        import jsonschema  # the pack requires jsonschema>=2.6 (Draft 4 only there)

        # the schema is the pack's own file, checked against Draft 4's metaschema by
        # tests/pack/test_probe_runner.py: not again in every verify (about 50 ms of CPU)
        _validator_cache[key] = jsonschema.Draft4Validator(load_schema(path))
    return _validator_cache[key]


def field_name(path: Iterable[Any]) -> str:
    """['latency_ns', 'matrix', 0, 1] -> 'latency_ns.matrix[0][1]'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(document)"


def _deepest(error: Any) -> Any:
    """For oneOf/anyOf failures, the sub-error that got furthest into the document."""
    best = error
    for sub in getattr(error, "context", None) or []:
        candidate = _deepest(sub)
        if len(candidate.absolute_path) > len(best.absolute_path):
            best = candidate
    return best


def schema_errors(document: Any, schema_path: Optional[Path] = None) -> List[str]:
    """Every violation as 'field: message' (empty list = valid)."""
    errors = sorted(_validator(schema_path).iter_errors(document),
                    key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for error in errors:
        deepest = _deepest(error)
        out.append(f"{field_name(deepest.absolute_path)}: {deepest.message}")
    return out


def _consistency_errors(doc: Dict[str, Any]) -> List[str]:
    """What the schema cannot say: every per-node array is node_count long, and so on."""
    out: List[str] = []
    topo = doc["topology"]
    n = topo["node_count"]
    if len(topo["nodes"]) != n:
        out.append(f"topology.nodes: {len(topo['nodes'])} entries, node_count is {n}")
    for name, table in (("topology.distances", topo["distances"]),
                        ("latency_ns.matrix", doc["latency_ns"]["matrix"]),
                        ("latency_ns.cv", doc["latency_ns"]["cv"]),
                        ("latency_ns.repetitions", doc["latency_ns"]["repetitions"])):
        if len(table) != n or any(len(row) != n for row in table):
            out.append(f"{name}: expected {n} x {n} (node_count)")
    for name in ("nodes", "cpus"):
        if len(doc["latency_ns"][name]) != n:
            out.append(f"latency_ns.{name}: expected {n} entries (node_count)")
    cpus = sum(len(node["cpus"]) for node in topo["nodes"])
    if cpus != topo["cpus"]:
        out.append(f"topology.cpus: {topo['cpus']}, but the nodes list {cpus} CPUs")
    measured = doc["quality"]["measured"]
    if measured != (doc["latency_ns"]["source"] == "measured"):
        out.append("quality.measured: disagrees with latency_ns.source")
    if not measured and doc["sysroot"] is None:
        out.append("latency_ns.source: 'model' is only used with --sysroot")
    return out


def parse_output(text: str, host: str, schema_path: Optional[Path] = None) -> Dict[str, Any]:
    """The probe's stdout -> the checked document. Raises HostError naming host and field."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        head = text[:60].replace("\n", "\\n")
        raise HostError(f"probe output is not JSON ({exc}); it starts with {head!r}",
                        host) from None
    if not isinstance(doc, dict):
        raise HostError(f"probe output field (document): expected an object, got "
                        f"{type(doc).__name__}", host)
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise HostError(f"probe output field schema_version: {version!r}, this library reads "
                        f"{SCHEMA_VERSION} (copy the probe binary built from this pack)", host)
    problems = schema_errors(doc, schema_path)
    if not problems:
        problems = _consistency_errors(doc)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise HostError(f"probe output field {problems[0]}{more}", host)
    return doc
