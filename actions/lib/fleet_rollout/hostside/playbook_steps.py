"""One function per host-side step; each runs a playbook on many hosts and returns per-host
results (HostResult: ok, changed, failed task and message, the step's JSON result)."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

from fleet_rollout.connection import Connection
from fleet_rollout.hostside.ansible_run import HostResult, run_playbook
from fleet_rollout.paths import LIBRARY_DIR
from fleet_rollout.profile import window_forks

COLLECTOR_SCRIPT = os.path.join(LIBRARY_DIR, "counters", "collector.py")
KERNEL_ACTIONS: Tuple[str, ...] = ("snapshot", "apply", "reapply", "restore", "check")


class HostSide:
    """Where the hosts are (an Ansible inventory) and how to reach them.

    `known_hosts`: the SSH known_hosts file host keys are verified against (None or "": the
    runner's ~/.ssh/known_hosts); keys are always checked. `cache_dir`: where the inventory's
    resolved host variables are cached (None: fleet_rollout.hostvars.default_cache_dir()); a
    run reads only its hosts' variables, never the whole inventory. Each call is one
    ansible-playbook run on the hosts it names. `rollout_id`: the rollout whose kernel snapshot
    and settings the hosts keep (each rollout its own: a restore puts back only what that
    rollout changed). `connection`: how Ansible reaches the hosts, from the pack config
    (fleet_rollout.connection; None: the defaults, which refuse lab hosts run locally)."""

    def __init__(self, inventory: str, private_key: Optional[str] = None, forks: int = 20,
                 timeout: Optional[int] = None, known_hosts: Optional[str] = None,
                 cache_dir: Optional[str] = None, rollout_id: str = "",
                 connection: Optional[Connection] = None) -> None:
        self.inventory = inventory
        self.connection = connection or Connection()
        self.rollout_id = rollout_id
        self.private_key = private_key or None
        self.forks = forks
        self.timeout = timeout
        self.known_hosts = known_hosts or None
        self.cache_dir = cache_dir or None

    def _run(self, playbook: str, hosts: Iterable[str],
             extravars: Optional[Dict[str, Any]] = None,
             forks: Optional[int] = None) -> Dict[str, HostResult]:
        return run_playbook(playbook, self.inventory, hosts, extravars, forks or self.forks,
                            self.private_key, self.timeout, known_hosts=self.known_hosts,
                            cache_dir=self.cache_dir, connection=self.connection)

    def health(self, hosts: Iterable[str]) -> Dict[str, HostResult]:
        """Boot id, uptime, maintenance flag, connections (reads only)."""
        return self._run("health", hosts)

    def booted(self, hosts: Iterable[str], boot_ids_before: Dict[str, str],
               wait: float = 900, poll: float = 2) -> Dict[str, HostResult]:
        """The health read once each host's OS is up again: it accepts connections and, for a
        host named in `boot_ids_before`, runs another boot than that one; each host is tried
        every `poll` seconds (at least 1) for `wait` seconds."""
        poll = max(1, int(round(poll)))
        return self._run("booted", hosts, {
            "fleet_boot_ids_before": {name: str(boot) for name, boot in
                                      boot_ids_before.items() if boot},
            "fleet_boot_wait": int(max(poll, wait)), "fleet_boot_poll": poll})

    def drain(self, hosts: Iterable[str], timeout: float = 300, threshold: int = 0,
              after_window: Optional[Tuple[str, float]] = None) -> Dict[str, HostResult]:
        """The drain; `after_window` (a counter window's id, seconds): each host first waits
        (at most those seconds) for its own sampler of that window to take its last sample."""
        return _drained(self._run("drain", hosts, dict({
            "fleet_drain_timeout": float(timeout), "fleet_drain_threshold": int(threshold),
            "fleet_drain_argv": list(self.connection.drain_command)},
            **_after(after_window))), True)

    def undrain(self, hosts: Iterable[str]) -> Dict[str, HostResult]:
        """Back into service; the rollout's kernel snapshot and settings on each host are
        dropped (the host is done with it; the pack keeps the snapshot)."""
        return _drained(self._run("undrain", hosts, {
            "fleet_rollout_id": self.rollout_id,
            "fleet_undrain_argv": list(self.connection.undrain_command)}), False)

    def kernel(self, hosts: Iterable[str], action: str,
               settings: Optional[Dict[str, Any]] = None,
               snapshot: Optional[Dict[str, Any]] = None) -> Dict[str, HostResult]:
        """snapshot: record on each host the current values of what `settings` would change
        (changes nothing; the rollout's first snapshot wins); result {"snapshot", "changed":
        [], "first_snapshot"}. apply: refused on a host without the rollout's snapshot.
        reapply: the runtime-only settings after a reboot. restore: put back what the rollout
        changed (`snapshot`: the one the pack recorded, used where the host's is gone). check:
        what booted against `settings` ({"in_effect", "missing"}; changes nothing)."""
        if action not in KERNEL_ACTIONS:
            raise ValueError(f"kernel action {action!r}: {', '.join(KERNEL_ACTIONS)}")
        return self._run("kernel", hosts, {"fleet_kernel_action": action,
                                           "fleet_kernel_settings": settings or {},
                                           "fleet_rollout_id": self.rollout_id,
                                           "fleet_kernel_snapshot": snapshot or {}})

    def probe(self, hosts: Iterable[str], budget_ms: int = 5000,
              binary: Optional[str] = None) -> Dict[str, HostResult]:
        """Run fleet-probe on the hosts (built on first use: st2 pack install builds nothing)."""
        return self._run("probe", hosts, self._probe_vars(budget_ms, binary))

    @staticmethod
    def _probe_vars(budget_ms: int, binary: Optional[str] = None) -> Dict[str, Any]:
        from fleet_rollout.probe.build import ensure_probe

        return {"fleet_probe_binary": binary or ensure_probe(),
                "fleet_probe_budget_ms": int(budget_ms)}

    def counters(self, hosts: Iterable[str],
                 script: str = COLLECTOR_SCRIPT) -> Dict[str, HostResult]:
        """One counter snapshot of each host."""
        return self._run("counters", hosts, {"fleet_collector_script": script})

    def start_window(self, hosts: Iterable[str], window: str, every: float, samples: int,
                     anchor: Optional[float] = None, first_at: Optional[float] = None,
                     script: str = COLLECTOR_SCRIPT) -> Dict[str, HostResult]:
        """A counter window sampled on the hosts: each host's result is the window's first
        snapshot, taken now; a sampler left on the host takes `samples` more, `every` seconds
        apart from `anchor` (time.time() when the window started; a host reached more than
        half a step after it: from its first snapshot). read_window prints them. Up to
        profile.SAMPLE_FORKS hosts (the configured forks if more) are started at once, so the hosts'
        windows start close together. `first_at` (instead of `anchor`): the first snapshot is
        due then; a host reached before it leaves it to its sampler and its result is the
        window's claim ({"deferred": true, "anchor", "token"}; the read has the snapshot)."""
        names = list(hosts)
        extra = {"fleet_collector_script": script, "fleet_window": window,
                 "fleet_window_every": f"{float(every):.3f}",
                 "fleet_window_samples": str(int(samples))}
        if first_at is not None:
            extra["fleet_window_first_at"] = f"{float(first_at):.3f}"
        elif anchor is not None:
            extra["fleet_window_anchor"] = f"{float(anchor):.3f}"
        return self._run("counters", names, extra, self._sample_forks(names))

    def read_window(self, hosts: Iterable[str], window: str, wait: float,
                    script: str = COLLECTOR_SCRIPT) -> Dict[str, HostResult]:
        """The samples of a window started by start_window: each host's result is the window's
        state ({"t0", "every", "samples", "snapshots", "errors", "done"}), once its sampler is
        done or after `wait` seconds (then what it took so far, done false)."""
        names = list(hosts)
        return self._run("counters", names, {
            "fleet_collector_script": script, "fleet_window_read": window,
            "fleet_window_wait": f"{max(0.0, float(wait)):.3f}"}, self._sample_forks(names))

    def _sample_forks(self, names: List[str]) -> int:
        return window_forks(self.forks, len(names))


def _after(after_window: Optional[Tuple[str, float]]) -> Dict[str, Any]:
    """The drain's extravars for its wait for a counter window's last sample on the host."""
    if after_window is None:
        return {}
    return {"fleet_drain_after_window": str(after_window[0]),
            "fleet_drain_after_window_wait": float(after_window[1])}


def _drained(results: Dict[str, HostResult], drained: bool) -> Dict[str, HostResult]:
    """A host drained through the configured command: its result says so as the flag's does."""
    for entry in results.values():
        if isinstance(entry.result, dict) and entry.result.get("method") == "command":
            entry.result["drained"] = drained
    return results
