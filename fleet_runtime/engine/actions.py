"""Running actions: dispatching an execution to its runner (workflow, inquiry, inline, or a
worker thread of the pool for runners that leave the process), the worker itself, cancelling
a single action, and the action policies (concurrency admission, retry).

With the `runners` setting at 2 or more, the worker of a python-script or local shell action
takes an action runner process (fleet_runtime.action_runners: the fewest running executions),
stamps the execution's `runner_info` with it as it marks it running (st2actions/worker.py
`_run_action`), and has that runner start the action's process; a python action sees its pack
config's `state_dir` as the runner's own. When the runner dies under it, the execution is lost:
nothing reports it, it stays `running`.
"""
from __future__ import annotations

import copy
import os
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from fleet_runtime import chatlog, runners
from fleet_runtime import params as params_util
from fleet_runtime.action_runners import PROCESS_RUNNERS, STATE_DIR, RunnerGone, RunnerProcess
from fleet_runtime.engine.events import StatusReported, WorkerDone, WorkerStarted
from fleet_runtime.engine.model import (
    INLINE_RUNNERS,
    LOG,
    NOOP_RESULT,
    EngineState,
    ExecInfo,
    _json,
)
from fleet_runtime.packs import Action
from fleet_runtime.runtime_errors import RuntimeErrorBase
from fleet_runtime.statuses import (
    CANCELED,
    COMPLETED,
    DELAYED,
    FAILED,
    NOT_STARTED,
    PENDING,
    REQUESTED,
    RUNNING,
    SCHEDULED,
    SUCCEEDED,
    TIMEOUT,
    sql_list,
)


class ActionsMixin(EngineState):
    """Starting executions, running them in workers, action policies."""

    # ================================================================== starting executions
    def _start(self, info: ExecInfo) -> None:
        if info.dispatched or info.status in COMPLETED:
            return
        info.dispatched = True
        action = self.registry.actions.get(info.action)
        if action is None:
            self.queue.put(StatusReported(info.id, FAILED,
                            {"error": f'Action "{info.action}" is not registered'}))
            return
        decision = self._policy_admit(info, action)
        if decision == "delay":
            info.dispatched = False
            if info.status != DELAYED:
                info.status = DELAYED
                info.log.append({"status": DELAYED, "timestamp": time.time()})
                self.store.update_execution(info.id, status=DELAYED, log=info.log)
            return
        if decision == "cancel":
            self.queue.put(StatusReported(info.id, CANCELED,
                            {"error": "canceled by the concurrency policy"}))
            return
        runner = action.runner_type
        if runner == "orquesta":
            self._start_workflow(info)
        elif runner == "inquirer":
            self._start_inquiry(info, action)
        elif runner in INLINE_RUNNERS:
            self.queue.put(StatusReported(info.id, SUCCEEDED, dict(NOOP_RESULT)))
        elif action.ref == "core.inject_trigger":
            self._inject_trigger(info)
        else:
            self._in_worker += 1
            info.handle = runners.ProcessHandle()
            assert self.pool is not None
            self.pool.submit(self._worker, info, action)

    def _worker(self, info: ExecInfo, action: Action) -> None:
        status, result = FAILED, None
        report = True
        dead = ""
        runner: Optional[RunnerProcess] = None
        lost = False
        try:
            if self.action_runners is not None and action.runner_type in PROCESS_RUNNERS:
                runner = self.action_runners.acquire(info.id)
                if runner is None:
                    # like an st2 action queue that no runner consumes: it waits, not started,
                    # for the next engine start (which starts every runner again)
                    LOG.warning("no action runner is alive: %s (%s) is not started", info.id,
                                info.action)
                    report = False
                    return
            now = time.time()
            log = info.log + [{"status": RUNNING, "timestamp": now}]
            runner_info = runner.info() if runner is not None else None
            with self.store.transaction() as conn:
                cur = conn.execute(
                    "UPDATE executions SET status=?, start_ts=?, log=?, runner_info=? WHERE id=?"
                    f" AND status IN ({sql_list(NOT_STARTED)})",
                    (RUNNING, now, _json(log),
                     _json(runner_info) if runner_info is not None else None, info.id))
                started = cur.rowcount == 1
            if not started:
                # Canceled (or otherwise finished) before it could start: nothing to report.
                report = False
                return
            if info.handle is not None and info.handle.canceled:
                status, result = CANCELED, info.result
                return
            self.queue.put(WorkerStarted(info.id, now))
            status, result = self._run_action(info, action, runner)
            if runner is not None and self.action_runners is not None and \
                    self.action_runners.died_under(
                        runner, bool(info.handle and info.handle.worker_died)):
                lost = True
                return
            if self._runner_dies(info):
                # its work is done and its result written, its status never: the execution
                # stays running, with no runner left to time it out or cancel it
                self.store.update_execution(info.id, result=result)
                info.handle = None
                report = False
                dead = info.id
                return
        except RunnerGone:
            lost = True
        except RuntimeErrorBase as e:
            status, result = FAILED, {"error": str(e)}
        except Exception as e:
            LOG.exception("action %s failed in the runner", info.id)
            status, result = FAILED, {"error": f"{type(e).__name__}: {e}"}
        finally:
            if runner is not None and self.action_runners is not None:
                if lost or (report and self.action_runners.died_under(runner, False)):
                    self._lose(runner, info)
                    report = False
                else:
                    self.action_runners.release(runner, info.id)
            if report:
                self.queue.put(StatusReported(info.id, status, result))
            self.queue.put(WorkerDone(dead))

    def _lose(self, runner: RunnerProcess, info: ExecInfo) -> None:
        """The execution's runner died while it ran it: nobody reports it, it stays `running`
        (and holds its concurrency policy slot: st2 counts running LiveActions) until someone
        completes it through the API; a cancel finds nobody to act on it."""
        info.handle = None
        self.lost.add(info.id)  # the runner's death noted it too (action_runners._on_death)
        LOG.warning("%s died while it ran %s (%s): the execution stays running",
                    runner.hostname, info.id, info.action)

    def _runner_dies(self, info: ExecInfo) -> bool:
        """A spec of the dead_runner setting names this execution (the first that matches
        it): its runner dies before it reports (recorded in the home, so each dies once)."""
        for index, (ref, match) in enumerate(self.home.dead_runners):
            if info.action != ref:
                continue
            if any(str(info.parameters.get(k)) != v for k, v in match.items()):
                continue
            try:
                fd = os.open(str(self.home.dead_runner_path(index)),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(info.id)
            LOG.warning("dead_runner: the runner of %s (%s) dies", info.id, info.action)
            return True
        return False

    def dead_runner_executions(self) -> Set[str]:
        """The executions whose runners died under the dead_runner setting."""
        dead: Set[str] = set()
        for index in range(len(self.home.dead_runners)):
            try:
                dead.add(self.home.dead_runner_path(index).read_text().strip())
            except OSError:
                continue
        return dead

    def _run_action(self, info: ExecInfo, action: Action,
                    runner: Optional[RunnerProcess] = None) -> Tuple[str, Any]:
        config = self.pack_config(action.pack)
        if runner is not None and STATE_DIR in config:
            # the runner's machine keeps its own state: no file is shared between runners
            config = dict(config, state_dir=str(runner.state_dir))
        runner_params, action_params = params_util.render_final_params(
            action, info.parameters, info.context, config)
        handle = info.handle or runners.ProcessHandle()
        user = info.context.get("user") or self.user
        token = self.api.issue_token(user) if self.api is not None else ""
        env_extra = {
            "ST2_ACTION_PACK_NAME": action.pack,
            "ST2_ACTION_EXECUTION_ID": info.id,
            "ST2_ACTION_API_URL": self.api.url if self.api is not None else "",
            "ST2_ACTION_AUTH_TOKEN": token,
            "FLEET_ROLLOUT_HOME": str(self.home.path),
        }
        try:
            return self._run_runner(info, action, config, runner_params, action_params,
                                    env_extra, handle, runner)
        finally:
            if self.api is not None:
                self.api.revoke(token)

    def _run_runner(self, info: ExecInfo, action: Action, config: Dict[str, Any],
                    runner_params: Dict[str, Any], action_params: Dict[str, Any],
                    env_extra: Dict[str, str], handle: runners.ProcessHandle,
                    runner: Optional[RunnerProcess] = None) -> Tuple[str, Any]:
        if action.runner_type == "python-script":
            pool = runner.warm_pool if runner is not None else getattr(self, "warm_pool", None)
            return runners.run_python(
                action.entry_point or "", action.pack, action.pack_path, config, action_params,
                runner_params, info.context.get("user") or self.user, str(self.home.db_path),
                str(self.home.key_path), env_extra, handle, pool=pool,
                datastore_api=self.api is not None and self.api.rbac is not None, host=runner)
        if action.runner_type == "local-shell-cmd":
            cmd = runner_params.get("cmd") or action_params.get("cmd") or ""
            return runners.run_local_cmd(cmd, runner_params, env_extra, handle, host=runner)
        if action.runner_type == "local-shell-script":
            return runners.run_local_script(action.entry_point or "", action_params,
                                            action.merged_parameters(), runner_params,
                                            env_extra, handle, host=runner)
        if action.runner_type == "announcement":
            return runners.post_message(self.home.path, self.home.webhook_url,
                                        dict(action_params),
                                        runner_params.get("route") or chatlog.CHAT_ROUTE,
                                        mask=self.masker.mask)
        return FAILED, {"error": f"runner {action.runner_type} cannot run {action.ref}"}

    def _control_action(self, info: ExecInfo, op: str) -> None:
        if op != "cancel":
            return
        if info.status in COMPLETED or info.id in self.lost or \
                info.id in self.dead_runner_executions():
            return  # a dead runner's execution: nobody is left to act on the cancel
        if info.handle is not None and info.status == RUNNING:
            info.handle.cancel()
            return
        if info.status in (REQUESTED, SCHEDULED, DELAYED, PENDING, RUNNING):
            self.queue.put(StatusReported(info.id, CANCELED, info.result))

    # ------------------------------------------------------------------ policies
    def _concurrency_policies(self, action_ref: str) -> List[Any]:
        return [p for p in self.registry.policies if p.enabled and p.resource_ref == action_ref
                and p.policy_type in ("action.concurrency", "action.concurrency.attr")]

    def _policy_key(self, policy: Any, info: ExecInfo) -> Tuple[str, Any]:
        if policy.policy_type == "action.concurrency.attr":
            attrs = tuple(_json(info.parameters.get(a))
                          for a in policy.parameters.get("attributes") or [])
            return (policy.ref, attrs)
        return (policy.ref, None)

    def _policy_admit(self, info: ExecInfo, action: Action) -> str:
        policies = self._concurrency_policies(action.ref)
        if not policies:
            return "run"
        keys = []
        for policy in policies:
            key = self._policy_key(policy, info)
            holders = self._occupying.setdefault(key, set())
            holders.discard(info.id)
            if len(holders) >= int(policy.parameters.get("threshold", 0)):
                if policy.parameters.get("action", "delay") == "cancel":
                    return "cancel"
                waiting = self._policy_waiting.setdefault(key, [])
                if info.id not in waiting:
                    waiting.append(info.id)
                return "delay"
            keys.append(key)
        for key in keys:
            self._occupying[key].add(info.id)
        return "run"

    def _occupy_policy_slots(self, info: ExecInfo) -> None:
        """Count a running execution against its action's concurrency policies."""
        for policy in self._concurrency_policies(info.action):
            self._occupying.setdefault(self._policy_key(policy, info), set()).add(info.id)

    def _release_policy_slot(self, info: ExecInfo) -> None:
        for key, holders in self._occupying.items():
            if info.id in holders:
                holders.discard(info.id)
                waiting = self._policy_waiting.get(key) or []
                while waiting:
                    nxt = self.active.get(waiting.pop(0))
                    if nxt is not None and nxt.status == DELAYED:
                        self._to_start.append(nxt.id)
                        break

    def _policy_retry(self, info: ExecInfo, status: str, action: Action) -> None:
        for policy in self.registry.policies:
            if not (policy.enabled and policy.resource_ref == action.ref
                    and policy.policy_type == "action.retry"):
                continue
            if info.context.get("parent"):
                # st2actions/policies/retry.py apply_after: never inside a workflow (orquesta's
                # task retry is the way there); st2 logs this warning for every completion of
                # such an execution and leaves it as it ended
                LOG.warning("Retry cannot be applied to this liveaction because it is executed"
                            " under a workflow. Use workflow specific retry functionality where"
                            " applicable. %s (%s, policy %s)", info.id, status, policy.ref)
                continue
            if status not in (FAILED, TIMEOUT):
                continue
            retry_on = policy.parameters.get("retry_on")
            if (status == FAILED and retry_on != "failure") or (
                    status == TIMEOUT and retry_on != "timeout"):
                continue
            count = ((info.context.get("policies") or {}).get("retry") or {}).get(
                "retry_count", 0)
            if count + 1 > int(policy.parameters.get("max_retry_count", 2)):
                continue
            delay = float(policy.parameters.get("delay") or 0) * self.time_factor
            self._add_timer(max(delay, 0.01), "retry", (info, policy.ref, count))

    def _policy_retry_fire(self, data: Any) -> None:
        info, policy_ref, count = data
        context = copy.deepcopy(info.context)
        context["policies"] = {"retry": {"applied_policy": policy_ref,
                                         "retry_count": count + 1,
                                         "retried_liveaction_id": info.id}}
        try:
            self.request(info.action, info.parameters, context)
        except RuntimeErrorBase:
            LOG.exception("retry policy could not re-run %s", info.id)
