"""Action timeouts derived from the profile: each host action may run longer than every wait it
does itself, so StackStorm's runner never kills a step in the middle of a reset or a boot.

StackStorm's python runner kills an action after its `timeout` (600 s unless given); the profile
says how long a BMC may take to shut down (graceful_timeout, then force_timeout), to boot and
apply settings (boot_timeout, waited for twice: settings applied in the wait step, then the
OS back in the probe step), and how long a drain may take. batch_info and changed_hosts hand
these to the workflows, which pass them to each task as its `timeout`.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from fleet_rollout.states import WAVE_STEPS

ANSIBLE = 300.0    # one playbook run: SSH connect, a few tasks
MARGIN = 120.0     # process start, datastore, audit
PROBE_BUILD = 300.0  # fleet-probe is compiled on first use on the controller


def bmc_budget(redfish_timeout: float) -> float:
    """Time for one BMC session's requests (reads, a PATCH, retries with backoff)."""
    return 20.0 * max(1.0, float(redfish_timeout))


def step_work(profile: Dict[str, Any], redfish_timeout: float = 30.0) -> Dict[str, float]:
    """Longest time each step can spend working (its own waits)."""
    r = profile["redfish"]
    graceful, force, boot = float(r["graceful_timeout"]), float(r["force_timeout"]), \
        float(r["boot_timeout"])
    bmc = bmc_budget(redfish_timeout)
    reset = 2 * graceful + force + bmc   # an earlier attempt's restart is awaited, then a reset
    probe = float(profile["probe"]["budget_ms"]) / 1000.0 * 4 + PROBE_BUILD
    work = {
        "precheck": ANSIBLE,  # the health read
        "snapshot": bmc,  # the BIOS check and snapshot
        "drain": float(profile["drain"]["timeout"]) + ANSIBLE,
        "kernel": 2 * ANSIBLE,  # the snapshot, the settings
        "stage": 2 * bmc,
        "reboot": reset + ANSIBLE,
        # settings applied (boot; a BMC without restart evidence of its own: the host asked)
        "wait": boot + bmc + ANSIBLE,
        "verify": bmc,  # the BIOS read back
        # the OS back (boot), the kernel check, IRQ affinity re-applied, the probe
        "probe": boot + 4 * ANSIBLE + probe,
        "undrain": ANSIBLE,
        # health, kernel restore, BIOS restore with its reset and apply wait, a reset for the
        # kernel, the OS back, the read-back, undrain
        "restore": 2 * ANSIBLE + (reset + boot + bmc) + reset + boot + bmc + ANSIBLE,
    }
    return work


def action_timeouts(profile: Dict[str, Any], redfish_timeout: float = 30.0,
                    forks: int = 0) -> Dict[str, int]:
    """Seconds per host action (step names and "restore"): work + margin. A host's
    actions wait for each other in StackStorm's scheduler (the host_step concurrency policy),
    before their timeout starts. A wave step's one run over the wave's hosts (at most
    batches.parallel) works on `forks` of them at once (ansible_forks; 0: all): its work is
    counted once per round of forks."""
    work = step_work(profile, redfish_timeout)
    parallel = max(1, int(profile["batches"]["parallel"]))
    rounds = -(-parallel // forks) if forks > 0 else 1
    for step in WAVE_STEPS:
        work[step] *= rounds
    return {k: int(work[k] + MARGIN) for k in work}


def observed_reboot(host_states: Iterable[Dict[str, Any]]) -> Optional[float]:
    """The median reboot of hosts already changed, as their BMCs showed it: the reset (their
    reboot step's start) to POST seen finished (the wait step's `post_after_reset`); for a host
    whose wait step did not record it, to its wait step's end (settings applied, OS back). None
    without any. What the next batches' Redfish looks are paced by (sparse while a reboot is
    expected to go on): the OS's own start after POST (seconds of health checks) is not part of
    it, or every look would come that much late. The looks that saw POST finished set it, so a
    learned time too long comes down at the next batch (its first look, at 3/4 of it, sees POST
    finished sooner)."""
    spans = []
    for state in host_states:
        steps = (state or {}).get("steps") or {}
        reboot, wait = steps.get("reboot") or {}, steps.get("wait") or {}
        if not (reboot.get("ok") and wait.get("ok") and state.get("needs_reboot")):
            continue
        detail = wait.get("detail")
        post = detail.get("post_after_reset") if isinstance(detail, dict) else None
        if isinstance(post, (int, float)) and not isinstance(post, bool) and post > 0:
            spans.append(float(post))
            continue
        try:
            span = float(wait["at"]) - float(reboot["started"])
        except (KeyError, TypeError, ValueError):
            continue
        if span > 0:
            spans.append(span)
    if not spans:
        return None
    spans.sort()
    middle = len(spans) // 2
    return round(spans[middle] if len(spans) % 2 else (spans[middle - 1] + spans[middle]) / 2, 1)
