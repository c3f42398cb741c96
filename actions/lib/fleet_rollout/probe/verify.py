"""Decide whether a host's probe output matches the BIOS state the profile put on it.

Snoop mode itself is not visible from Linux (the BIOS read-back verifies it); what the probe can
check is the NUMA topology the settings produce, the SLIT distances, the remote/local latency
ratio, and a latency fingerprint against control hosts of the same CPU model in the same state.

Rules (logical knobs, as in fleet_rollout profiles):
  node_interleaving enabled            -> 1 NUMA node holding every CPU (no remote memory)
  node_interleaving disabled, not cod  -> 1 node per socket
  node_interleaving disabled, cod      -> 2 nodes per socket (Cluster-on-Die)
  distances: 10 on the diagonal, symmetric, > 10 off it; with cod, the other half of the same
  die is nearer than the other socket.
  latency: with more than one node the cross-socket (else remote) / local ratio must be at
  least VerifyPolicy.min_remote_local_ratio. On a virtual machine (QEMU's NUMA nodes are all the
  same host memory) a flat ratio is only a note unless the policy says "enforce".
  fingerprint: each metric must lie within [min, max] of the control hosts, widened by
  fingerprint_tolerance; controls of another CPU model, node count or latency source are
  left out (and listed in notes). On a virtual machine a fingerprint outside the spread is only
  a note unless the policy says "enforce" (guest latencies follow the hypervisor's load).
  A rollout uses the hosts it changed and verified in earlier batches as controls
  (fingerprint_record keeps what the comparison needs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fleet_rollout.errors import ConfigError

SNOOP_MODES = ("early", "home", "cod", "osb")
NODE_INTERLEAVING = ("enabled", "disabled")
FINGERPRINT_METRICS = ("local_ns", "remote_ns", "c2c_within_ns", "c2c_across_ns")


@dataclass
class VerifyPolicy:
    min_remote_local_ratio: float = 1.15
    ratio_on_virtual: str = "advisory"  # advisory | enforce
    require_quality: bool = True
    fingerprint_tolerance: float = 0.10
    fingerprint_on_virtual: str = "advisory"  # advisory | enforce
    min_controls: int = 2
    fingerprint_metrics: Tuple[str, ...] = FINGERPRINT_METRICS


@dataclass
class VerifyResult:
    host: str
    ok: bool
    reasons: List[str] = field(default_factory=list)  # why it failed (empty when ok)
    notes: List[str] = field(default_factory=list)  # advisory findings, never failing
    numbers: Dict[str, Any] = field(default_factory=dict)  # every number a decision used

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def expected_node_count(snoop_mode: str, node_interleaving: str, sockets: int) -> int:
    check_expected(snoop_mode, node_interleaving, sockets)
    if node_interleaving == "enabled":
        return 1
    return sockets * (2 if snoop_mode == "cod" else 1)


def check_expected(snoop_mode: str, node_interleaving: str, sockets: int) -> None:
    if snoop_mode not in SNOOP_MODES:
        raise ConfigError(f"snoop_mode: {snoop_mode!r} is not one of {', '.join(SNOOP_MODES)}")
    if node_interleaving not in NODE_INTERLEAVING:
        raise ConfigError(f"node_interleaving: {node_interleaving!r} is not one of "
                          f"{', '.join(NODE_INTERLEAVING)}")
    if not isinstance(sockets, int) or isinstance(sockets, bool) or sockets < 1:
        raise ConfigError(f"sockets: {sockets!r} is not a positive integer")


def fingerprint(doc: Dict[str, Any]) -> Dict[str, Optional[float]]:
    """The latency numbers compared against control hosts."""
    c2c = doc["c2c_ns"]
    derived = doc["derived"]
    return {
        "local_ns": derived["local_ns"],
        "remote_ns": derived["remote_ns"],
        "c2c_within_ns": c2c["within_socket"]["median"] if c2c["within_socket"] else None,
        "c2c_across_ns": c2c["across_sockets"]["median"] if c2c["across_sockets"] else None,
    }


def fingerprint_record(doc: Dict[str, Any], host: str, **extra: Any) -> Dict[str, Any]:
    """The part of a probe document a later fingerprint comparison needs (a few hundred bytes),
    in the document's own shape so it can be passed to verify() as a control."""
    c2c = doc["c2c_ns"]
    return {
        "host": host, "cpu_model": doc.get("cpu_model"),
        "topology": {"node_count": doc["topology"]["node_count"],
                     "virtualized": doc["topology"].get("virtualized")},
        "latency_ns": {"source": doc["latency_ns"]["source"]},
        "derived": {"local_ns": doc["derived"]["local_ns"],
                    "remote_ns": doc["derived"]["remote_ns"]},
        "c2c_ns": {part: ({"median": c2c[part]["median"]} if c2c[part] else None)
                   for part in ("within_socket", "across_sockets")},
        **extra,
    }


def _check_layout(doc: Dict[str, Any], snoop_mode: str, node_interleaving: str, sockets: int,
                  reasons: List[str], numbers: Dict[str, Any]) -> None:
    topo = doc["topology"]
    expected = expected_node_count(snoop_mode, node_interleaving, sockets)
    numbers["sockets"] = {"expected": sockets, "seen": topo["sockets"]}
    numbers["nodes"] = {"expected": expected, "seen": topo["node_count"]}
    if topo["sockets"] != sockets:
        reasons.append(f"sockets: the probe sees {topo['sockets']}, the inventory says {sockets}")
    if topo["node_count"] != expected:
        why = ("node_interleaving enabled: one node" if node_interleaving == "enabled" else
               "cod: two nodes per socket" if snoop_mode == "cod" else "one node per socket")
        reasons.append(f"node count: {topo['node_count']}, expected {expected} ({why})")
        return
    if node_interleaving == "enabled":
        node = topo["nodes"][0]
        if len(node["cpus"]) != topo["cpus"]:
            reasons.append(f"node {node['id']}: holds {len(node['cpus'])} of {topo['cpus']} "
                           "CPUs, expected all (interleaving)")
        return
    per_socket: Dict[int, int] = {}
    for node in topo["nodes"]:
        if len(node["sockets"]) != 1:
            reasons.append(f"node {node['id']}: spans sockets {node['sockets']}, expected one")
            continue
        per_socket[node["sockets"][0]] = per_socket.get(node["sockets"][0], 0) + 1
    want = 2 if snoop_mode == "cod" else 1
    for socket, count in sorted(per_socket.items()):
        if count != want:
            reasons.append(f"socket {socket}: {count} nodes, expected {want}")


def _check_distances(doc: Dict[str, Any], snoop_mode: str, node_interleaving: str,
                     reasons: List[str], numbers: Dict[str, Any]) -> None:
    topo = doc["topology"]
    dist = topo["distances"]
    ids = [node["id"] for node in topo["nodes"]]
    numbers["distances"] = dist
    n = len(dist)
    for i in range(n):
        if dist[i][i] != 10:
            reasons.append(f"distances: node {ids[i]} to itself is {dist[i][i]}, expected 10")
        for j in range(n):
            if i == j:
                continue
            if dist[i][j] != dist[j][i]:
                reasons.append(f"distances: node {ids[i]}->{ids[j]} is {dist[i][j]} but "
                               f"{ids[j]}->{ids[i]} is {dist[j][i]} (not symmetric)")
            if dist[i][j] <= 10:
                reasons.append(f"distances: node {ids[i]}->{ids[j]} is {dist[i][j]}, expected "
                               "> 10 for a remote node")
    if snoop_mode == "cod" and node_interleaving == "disabled" and n > 1:
        socket_of = [node["sockets"][0] if len(node["sockets"]) == 1 else None
                     for node in topo["nodes"]]
        same = [dist[i][j] for i in range(n) for j in range(n)
                if i != j and socket_of[i] is not None and socket_of[i] == socket_of[j]]
        cross = [dist[i][j] for i in range(n) for j in range(n)
                 if i != j and None not in (socket_of[i], socket_of[j])
                 and socket_of[i] != socket_of[j]]
        numbers["distance_same_socket_max"] = max(same) if same else None
        numbers["distance_cross_socket_min"] = min(cross) if cross else None
        if same and cross and max(same) >= min(cross):
            reasons.append(f"distances: the other half of a die ({max(same)}) is not nearer "
                           f"than the other socket ({min(cross)}), expected with cod")


def _check_latency(doc: Dict[str, Any], policy: VerifyPolicy, reasons: List[str],
                   notes: List[str], numbers: Dict[str, Any]) -> None:
    derived = doc["derived"]
    topo = doc["topology"]
    measured = doc["quality"]["measured"]
    virtual = bool(topo.get("virtualized"))
    numbers.update({
        "latency_source": doc["latency_ns"]["source"],
        "virtualized": topo.get("virtualized"),
        "local_ns": derived["local_ns"],
        "remote_ns": derived["remote_ns"],
        "remote_local_ratio": derived["remote_local_ratio"],
        "cross_socket_ratio": derived["cross_socket_ratio"],
        "min_remote_local_ratio": policy.min_remote_local_ratio,
    })
    if topo["node_count"] == 1:
        numbers["ratio_used"] = None
        return
    ratio = derived["cross_socket_ratio"]
    if ratio is None:
        ratio = derived["remote_local_ratio"]
    numbers["ratio_used"] = ratio
    if ratio is None:
        reasons.append("latency: the output has no remote/local ratio although there are "
                       f"{topo['node_count']} nodes")
        return
    if ratio >= policy.min_remote_local_ratio:
        return
    message = (f"latency: remote/local ratio {ratio:.2f} is below "
               f"{policy.min_remote_local_ratio:.2f} (interleaving off needs a clear ratio)")
    if measured and virtual and policy.ratio_on_virtual == "advisory":
        notes.append(message + "; advisory only: a virtual machine's NUMA nodes share the "
                     "host's memory")
    else:
        reasons.append(message)


def _check_fingerprint(doc: Dict[str, Any], controls: Sequence[Dict[str, Any]],
                       policy: VerifyPolicy, reasons: List[str], notes: List[str],
                       numbers: Dict[str, Any]) -> None:
    usable = []
    for control in controls:
        name = control.get("host") or "?"
        if control.get("cpu_model") != doc.get("cpu_model"):
            notes.append(f"fingerprint: control {name} left out: CPU model "
                         f"{control.get('cpu_model')!r} is not {doc.get('cpu_model')!r}")
        elif control["topology"]["node_count"] != doc["topology"]["node_count"]:
            notes.append(f"fingerprint: control {name} left out: "
                         f"{control['topology']['node_count']} nodes, not "
                         f"{doc['topology']['node_count']}")
        elif control["latency_ns"]["source"] != doc["latency_ns"]["source"]:
            notes.append(f"fingerprint: control {name} left out: latency "
                         f"{control['latency_ns']['source']}, not {doc['latency_ns']['source']}")
        else:
            usable.append(control)
    result: Dict[str, Any] = {"controls_used": len(usable),
                              "tolerance": policy.fingerprint_tolerance, "metrics": {}}
    numbers["fingerprint"] = result
    if len(usable) < policy.min_controls:
        notes.append(f"fingerprint: skipped, {len(usable)} usable control hosts "
                     f"(need {policy.min_controls})")
        return
    mine = fingerprint(doc)
    theirs = [fingerprint(control) for control in usable]
    for metric in policy.fingerprint_metrics:
        value = mine.get(metric)
        values = [t[metric] for t in theirs if t.get(metric) is not None]
        if value is None or len(values) < policy.min_controls:
            continue
        low = min(values) * (1.0 - policy.fingerprint_tolerance)
        high = max(values) * (1.0 + policy.fingerprint_tolerance)
        outside = not (low <= value <= high)
        result["metrics"][metric] = {"value": value, "low": round(low, 2),
                                     "high": round(high, 2), "controls": len(values),
                                     "outside": outside}
        if not outside:
            continue
        message = (f"fingerprint: {metric} {value:.1f} ns is outside the spread of {len(values)} "
                   f"control hosts ({min(values):.1f}-{max(values):.1f} ns, "
                   f"+-{policy.fingerprint_tolerance:.0%}: {low:.1f}-{high:.1f})")
        if doc["topology"].get("virtualized") and policy.fingerprint_on_virtual == "advisory":
            notes.append(message + "; advisory only on a virtual machine")
        else:
            reasons.append(message)


def verify(doc: Dict[str, Any], snoop_mode: str, node_interleaving: str, sockets: int,
           controls: Sequence[Dict[str, Any]] = (), policy: Optional[VerifyPolicy] = None,
           host: Optional[str] = None) -> VerifyResult:
    """Check one parsed probe document (fleet_rollout.probe.parse_output / run_probe) against
    the expected BIOS state and the host's socket count. controls: probe documents of control
    hosts of the same CPU model in the same BIOS state (for the fingerprint)."""
    check_expected(snoop_mode, node_interleaving, sockets)
    policy = policy or VerifyPolicy()
    for name in ("ratio_on_virtual", "fingerprint_on_virtual"):
        if getattr(policy, name) not in ("advisory", "enforce"):
            raise ConfigError(f"{name}: {getattr(policy, name)!r} is not one of "
                              "advisory, enforce")
    reasons: List[str] = []
    notes: List[str] = ["snoop mode is not visible from Linux: verify it by BIOS read-back"]
    numbers: Dict[str, Any] = {"expected": {"snoop_mode": snoop_mode,
                                            "node_interleaving": node_interleaving,
                                            "sockets": sockets}}
    _check_layout(doc, snoop_mode, node_interleaving, sockets, reasons, numbers)
    _check_distances(doc, snoop_mode, node_interleaving, reasons, numbers)
    _check_latency(doc, policy, reasons, notes, numbers)
    quality = doc["quality"]
    numbers["quality"] = {"measured": quality["measured"], "ok": quality["ok"],
                          "cv_max": quality["cv_max"],
                          "repetitions_min": quality["repetitions"]["matrix_min"]}
    if quality["measured"] and not quality["ok"] and policy.require_quality:
        detail = "; ".join(quality["warnings"]) or "see quality"
        reasons.append(f"probe quality not ok ({detail}): re-run the probe")
    if not quality["measured"]:
        notes.append("latencies are modelled from the SLIT distances (--sysroot), not measured")
    _check_fingerprint(doc, controls, policy, reasons, notes, numbers)
    return VerifyResult(host=host or doc.get("host") or "?", ok=not reasons, reasons=reasons,
                        notes=notes, numbers=numbers)
