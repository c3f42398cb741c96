"""Triggers, notifications and rules: core.inject_trigger, the actiontrigger and notify
triggers emitted when an execution completes, dispatching a trigger instance to the rules
that listen to it and recording their enforcements.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Optional

from fleet_runtime import params as params_util
from fleet_runtime import rules as rules_util
from fleet_runtime import templating
from fleet_runtime.database import new_id
from fleet_runtime.engine.events import StatusReported
from fleet_runtime.engine.model import (
    EngineState,
    ExecInfo,
    _iso,
    _json,
)
from fleet_runtime.statuses import (
    ABANDONED,
    FAILED,
    SUCCEEDED,
    TIMEOUT,
)


class TriggersMixin(EngineState):
    """Trigger emission, completion hooks (actiontrigger, notify), rule enforcement."""

    # ================================================================== injecting triggers
    def _inject_trigger(self, info: ExecInfo) -> None:
        trigger = info.parameters.get("trigger_name") or info.parameters.get("trigger")
        payload = info.parameters.get("payload") or {}
        if not trigger:
            self.queue.put(StatusReported(info.id, FAILED,
                            {"error": 'either "trigger" or "trigger_name" is required'}))
            return
        if trigger not in self.registry.trigger_types:
            self.queue.put(StatusReported(info.id, FAILED,
                            {"error": f'unknown trigger type "{trigger}"'}))
            return
        self.queue.put(StatusReported(info.id, SUCCEEDED, {"trigger": trigger, "payload": payload}))
        self._post.append(lambda: self.emit_trigger(trigger, payload))

    # ------------------------------------------------------------------ completion hooks
    def _on_completed(self, info: ExecInfo, status: str, result: Any) -> None:
        action = self.registry.actions.get(info.action)
        masked = self.masker.mask(params_util.mask_secrets(action, info.parameters))
        self.emit_trigger("core.st2.generic.actiontrigger", {
            "execution_id": info.id,
            "status": status,
            "start_timestamp": _iso(info.start_ts),
            "action_name": info.action,
            "action_ref": info.action,
            "runner_ref": info.runner,
            "parameters": masked,
            "result": result,
        })
        notify = info.context.get("notify") or (action.notify if action else None)
        if notify:
            self._post_notify(info, status, result, notify, masked)
        if action is not None:
            self._policy_retry(info, status, action)

    def _post_notify(self, info: ExecInfo, status: str, result: Any,
                     notify: Dict[str, Any], masked: Dict[str, Any]) -> None:
        sections = [("on-complete", "completed.")]
        if status == SUCCEEDED:
            sections.append(("on-success", "succeeded."))
        if status in (FAILED, TIMEOUT, ABANDONED):
            sections.append(("on-failure", "failed."))
        for key, suffix in sections:
            sub = notify.get(key) or notify.get(key.replace("-", "_"))
            if not sub:
                continue
            routes = sub.get("routes") or sub.get("channels") or []
            ctx = {"action_parameters": masked, "action_context": info.context,
                   "action_results": result,
                   "st2kv": templating.kv_context(info.context.get("user"))}
            message = sub.get("message") or f"Action {info.action} {suffix}"
            try:
                message = templating.render(message, ctx)
                data = templating.render_values(sub.get("data") or {}, ctx) or {}
            except Exception as e:
                data = {"error": f"cannot render notify data: {e}"}
            data = dict(data)
            data["result"] = _json(result)
            for route in routes:
                self.emit_trigger("core.st2.generic.notifytrigger", {
                    "message": message, "data": data, "execution_id": info.id,
                    "status": status, "start_timestamp": _iso(info.start_ts),
                    "end_timestamp": _iso(time.time()), "action_ref": info.action,
                    "runner_ref": info.runner, "route": route, "channel": route,
                })

    # ------------------------------------------------------------------ triggers and rules
    def emit_trigger(self, trigger: str, payload: Dict[str, Any],
                     only: Optional[str] = None) -> Optional[str]:
        """Dispatch a trigger instance to the rules that listen to its type (`only`: to that
        rule: a timer's trigger is the one its rule's parameters define)."""
        listening = [r for r in self.registry.rules if r.trigger_type == trigger and r.enabled
                     and (only is None or r.ref == only)]
        if not listening:
            return None
        ti_id = new_id()
        now = time.time()
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO trigger_instances(id, trigger, payload, occurrence_ts, status)"
                " VALUES(?,?,?,?,?)", (ti_id, trigger, _json(payload), now, "processing"))
        for rule in listening:
            matched, reason = rules_util.rule_matches(rule, payload)
            if not matched:
                if reason:
                    self._record_enforcement(rule.ref, ti_id, None, "failed", reason)
                continue
            ex_id, failure = rules_util.enforce(self, rule, ti_id, payload)
            self._record_enforcement(rule.ref, ti_id, ex_id,
                                     "failed" if failure else "succeeded", failure)
        with self.store.transaction() as conn:
            conn.execute("UPDATE trigger_instances SET status='processed' WHERE id=?", (ti_id,))
        return ti_id

    def _record_enforcement(self, rule: str, ti_id: str, ex_id: Optional[str], status: str,
                            reason: Optional[str]) -> None:
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO rule_enforcements(id, rule, trigger_instance_id, execution_id,"
                " status, failure_reason, ts) VALUES(?,?,?,?,?,?,?)",
                (new_id(), rule, ti_id, ex_id, status, reason, time.time()))
