"""A wave step: one host-side step of every host of a wave, as one ansible-playbook run per
playbook it needs.

A wave is the hosts of a batch changed together (at most the profile's batches.parallel). The
steps every host of a wave needs at the same point and that are host-side work only (the
precheck's health read, the drain, the kernel snapshot and settings, the probe with its kernel
check, the undrain: states.WAVE_STEPS) are one `fleet_rollout.wave_step` action and one run of
each of their playbooks over the wave's hosts that are ready for it. Each host's outcome is
recorded on its own, exactly as the host's own step would record it (HostRun.begin / finish
with the wave's result): one host that fails fails alone, and the workflow restores only it.

A host is ready for a wave step when the step before it is done (the precheck: none) and the
host is neither failed nor on its way back; a host that is not ready is left out (its own
workflow restored it, or will). A step done before (a retry, a resume) is skipped.

Nothing else touches a host while a wave step runs on it: the steps before and after it are the
same workflow's, a step of another rollout is refused (claims), and a restore of the host waits
until no wave step naming it runs (wait_for_waves).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple

from fleet_rollout.errors import ConfigError, FleetRolloutError
from fleet_rollout.hostside.ansible_run import HostResult
from fleet_rollout.hoststeps import HostRun, RolloutContext
from fleet_rollout.states import FAILED, HOST_STEPS, RESTORE_STATES, WAVE_STEPS
from fleet_rollout.watchdog import LIMIT, WAVE_STEP, running_since, timeout_of

# seconds past a wave execution's timeout after which a restore stops waiting for it: StackStorm
# has ended its action by then (the python runner kills it at its timeout) unless the action
# runner died, and a dead runner's action touches nothing
WAVE_GRACE = 60.0
WAVE_POLL = 2.0


class WaveRun:
    """One wave step of the given hosts of one rollout."""

    def __init__(self, ctx: RolloutContext, hosts: List[str]) -> None:
        self.ctx = ctx
        # every name is checked before anything runs: a host not in the rollout refuses the wave
        self.runs = [HostRun(ctx, name) for name in dict.fromkeys(hosts)]

    def run(self, step: str) -> Dict[str, Any]:
        """{"step", "done", "skipped", "failed", "not_ready" (host lists), "hosts": each
        host's detail or error}. Never raises for one host's failure: it is recorded in that
        host's state and listed in "failed"."""
        if step not in WAVE_STEPS:
            raise ConfigError(f"{step} is not a wave step ({', '.join(WAVE_STEPS)})")
        index = HOST_STEPS.index(step)
        before = HOST_STEPS[index - 1] if index else None  # the precheck is a host's first
        out: Dict[str, Any] = {"step": step, "done": [], "skipped": [], "failed": [],
                               "not_ready": [], "hosts": {}}
        ready: List[Tuple[HostRun, Dict[str, Any]]] = []
        for host_run in self.runs:
            name = host_run.name
            state = host_run.load()
            prior = before is None or (state["steps"].get(before) or {}).get("ok") is True
            done = (state["steps"].get(step) or {}).get("ok") is True
            if not done and (not prior or state["status"] in RESTORE_STATES + (FAILED,)):
                out["not_ready"].append(name)
                out["hosts"][name] = {"not_ready": f"status {state['status']}" + (
                    f", step {before} {'done' if prior else 'not done'}" if before else "")}
                continue
            try:
                began = host_run.begin(step, claim=False)  # outside the host policy
            except FleetRolloutError as err:  # refused: nothing done on the host
                out["failed"].append(name)
                out["hosts"][name] = {"error": str(err)}
                continue
            if "skipped" in began:
                out["skipped"].append(name)
                out["hosts"][name] = {"detail": began["detail"]}
                continue
            host_run.before_run(step, began["state"])  # saved before the run is sent
            ready.append((host_run, began["state"]))
        if not ready:
            return self._ended(out)
        names = [host_run.name for host_run, _ in ready]
        results: Dict[str, Any] = {}
        if ready[0][0].wave_runs(step):
            try:
                results = ready[0][0].wave_call(step, {
                    host_run.name: state for host_run, state in ready})(names)
            except FleetRolloutError as err:  # the run could not start: every host fails
                results = {name: HostResult(name, error=str(err)) for name in names}
        for host_run, state in ready:
            name = host_run.name
            host_run.wave = {name: results.get(name) or HostResult(
                name, error=f"the wave's {step} run gave no result for this host")}
            try:
                finished = host_run.finish(step, state)
            except FleetRolloutError as err:
                out["failed"].append(name)
                out["hosts"][name] = {"error": str(err)}
            else:
                out["done"].append(name)
                out["hosts"][name] = {"detail": finished["detail"]}
            finally:
                host_run.wave = None
        return self._ended(out)

    def _ended(self, out: Dict[str, Any]) -> Dict[str, Any]:
        """The outcome, recorded under this execution's id (the watchdog's evidence that the
        wave step's work ended, should its execution outlive its runner)."""
        if self.ctx.execution_id:
            self.ctx.state.end_wave(self.ctx.execution_id, out)
        return out


def waves_naming(api: Any, host: str) -> List[Dict[str, Any]]:
    """The wave step executions StackStorm shows running (or being canceled) that name
    `host`."""
    found = []
    for status in ("running", "canceling"):
        for execution in api.get(f"executions?action={WAVE_STEP}&status={status}"
                                 f"&limit={LIMIT}"):
            hosts = (execution.get("parameters") or {}).get("hosts") or []
            if isinstance(hosts, list) and host in hosts:
                found.append(execution)
    return found


def wait_for_waves(api: Any, host: str, clock: Callable[[], float] = time.time,
                   sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Until no wave step naming `host` runs (a restore's first wait, once the host is marked
    restoring: a wave step that starts after that leaves the host out). A wave past its
    timeout and WAVE_GRACE is not waited for (its runner died; the watchdog ends its
    execution). Returns what was waited for."""
    waited: Dict[str, Any] = {"executions": [], "seconds": 0.0}
    start = clock()
    while True:
        live = []
        for execution in waves_naming(api, host):
            since = running_since(execution)
            if since is None or clock() - since <= timeout_of(execution) + WAVE_GRACE:
                live.append(str(execution.get("id")))
        if not live:
            waited["seconds"] = round(clock() - start, 1)
            return waited
        for ex_id in live:
            if ex_id not in waited["executions"]:
                waited["executions"].append(ex_id)
        sleep(WAVE_POLL)
