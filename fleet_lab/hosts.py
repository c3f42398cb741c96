"""The host hook: how the BMC simulator tells a server backend what the BIOS put into effect.

The BMC simulator owns power state and BIOS settings. At every power-on it hands the backend a
BootConfig (the settings now in effect and the NUMA layout they give); the backend makes the
server boot that way: `sim` writes a fake sysfs/procfs tree, `vm` starts a QEMU guest. A lab
with both (sim servers beside the VMs) hands the simulator a DispatchBackend, which passes each
call to the backend that runs that server.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    cpus: List[int]
    memory_mb: int
    socket: int


@dataclass(frozen=True)
class BootConfig:
    """What a server looks like after POST with the BIOS settings in effect."""

    host: str
    snoop_mode: str  # early | home | cod | osb (logical, see fleet_rollout.redfish.knobs)
    node_interleaving: str  # enabled | disabled
    sockets: int = 2
    cores_per_socket: int = 2
    memory_mb: int = 768
    nodes: List[NumaNode] = field(default_factory=list)
    distances: List[List[int]] = field(default_factory=list)  # SLIT, nodes x nodes
    extra: Dict[str, str] = field(default_factory=dict)  # raw BIOS attributes in effect


def cpu_ranges(cpus: List[int]) -> List[str]:
    """[0, 1, 2, 5] -> ['0-2', '5']: Linux cpulist / QEMU cpus= ranges."""
    ranges: List[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(f"{ordered[i]}-{ordered[j]}" if j > i else str(ordered[i]))
        i = j + 1
    return ranges


def numa_layout(
    sockets: int, cores_per_socket: int, memory_mb: int, snoop_mode: str, node_interleaving: str
) -> tuple[List[NumaNode], List[List[int]]]:
    """NUMA nodes and SLIT distances the OS sees for these BIOS settings.

    Interleaving enabled -> one node holding every CPU; disabled -> one node per socket;
    Cluster-on-Die (snoop_mode cod, interleaving disabled) -> two nodes per socket.
    Distances: 10 local, 11 between the two halves of one die, 21 across sockets.
    """
    cpus = list(range(sockets * cores_per_socket))
    if node_interleaving == "enabled":
        return [NumaNode(0, cpus, memory_mb, 0)], [[10]]
    per_socket = 2 if snoop_mode == "cod" and cores_per_socket >= 2 else 1
    count = sockets * per_socket
    nodes: List[NumaNode] = []
    cores_per_node = cores_per_socket // per_socket
    for socket in range(sockets):
        for half in range(per_socket):
            first = socket * cores_per_socket + half * cores_per_node
            end_of_socket = (socket + 1) * cores_per_socket
            last = first + cores_per_node if half < per_socket - 1 else end_of_socket
            nodes.append(NumaNode(len(nodes), cpus[first:last], memory_mb // count, socket))
    distances = [
        [10 if a.node_id == b.node_id else (11 if a.socket == b.socket else 21) for b in nodes]
        for a in nodes
    ]
    return nodes, distances


def boot_config(host: str, snoop_mode: str, node_interleaving: str, sockets: int = 2,
                cores_per_socket: int = 2, memory_mb: int = 768,
                extra: Dict[str, str] | None = None) -> BootConfig:
    nodes, distances = numa_layout(sockets, cores_per_socket, memory_mb, snoop_mode,
                                   node_interleaving)
    return BootConfig(host, snoop_mode, node_interleaving, sockets, cores_per_socket, memory_mb,
                      nodes, distances, dict(extra or {}))


class HostBackend(Protocol):
    """What the BMC simulator calls. Implementations must not block the event loop for long."""

    def power_on(self, config: BootConfig) -> None:
        """Start booting the server with these settings in effect (returns at once)."""

    def power_off(self, host: str) -> None:
        """Stop the server (hard power off)."""

    def is_up(self, host: str) -> bool:
        """True once the OS is running and reachable (e.g. SSH answers)."""


class NullBackend:
    """No servers at all: only the BMCs exist (Redfish-only tests)."""

    def power_on(self, config: BootConfig) -> None:
        return None

    def power_off(self, host: str) -> None:
        return None

    def is_up(self, host: str) -> bool:
        return True


class DispatchBackend:
    """One HostBackend over several: each call goes to the backend that runs that host (a lab
    with sim servers beside its VMs). `routes` maps every host to a key of `backends`."""

    def __init__(self, backends: Mapping[str, HostBackend], routes: Mapping[str, str]) -> None:
        unknown = sorted({kind for kind in routes.values() if kind not in backends})
        if unknown:
            raise ValueError(f"hosts routed to backend(s) {', '.join(unknown)} that this lab "
                             f"does not run (it runs {', '.join(sorted(backends)) or 'none'})")
        self.backends: Dict[str, HostBackend] = dict(backends)
        self.routes: Dict[str, str] = dict(routes)

    def kind(self, host: str) -> str:
        """The key of the backend that runs `host`; KeyError for a host of no backend."""
        try:
            return self.routes[host]
        except KeyError:
            raise KeyError(f"host {host!r} is not a server of this lab") from None

    def backend(self, host: str) -> Any:
        return self.backends[self.kind(host)]

    def hosts(self, kind: str) -> List[str]:
        """The hosts one backend runs, in the order they were routed."""
        return [host for host, where in self.routes.items() if where == kind]

    def power_on(self, config: BootConfig) -> None:
        self.backend(config.host).power_on(config)

    def power_off(self, host: str) -> None:
        self.backend(host).power_off(host)

    def is_up(self, host: str) -> bool:
        return bool(self.backend(host).is_up(host))

    def close(self) -> None:
        """Close every backend that can be closed (a VM backend stops its guests), even when
        one of them fails; the first error is raised after all were tried."""
        error: Optional[BaseException] = None
        for backend in self.backends.values():
            close = getattr(backend, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # the other backends still stop
                error = error or exc
        if error is not None:
            raise error
