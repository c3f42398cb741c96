"""Chat messages for what rules see: an approval question, a rollout workflow that ended.

Rules render their parameters strictly on StackStorm (a field missing from the trigger payload
fails the rule), so rules pass only ids and statuses; the text is composed here from the API's
records, where a missing field is an ordinary case.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

from fleet_rollout import questions
from fleet_rollout.config import PackConfig
from fleet_rollout.errors import ConfigError
from fleet_rollout.st2api import ActionApi, ApiRefused


def _where(config: PackConfig, message: str) -> Dict[str, Any]:
    return {"message": message, "route": config.chat_route, "channel": config.chat_channel}


def inquiry_message(inquiry: Mapping[str, Any], rollout_id: str) -> str:
    props = (inquiry.get("schema") or {}).get("properties") or {}
    ident = inquiry.get("id", "?")
    if "choice" in props:
        return (f"Rollout {rollout_id}: the canary verdict is INCONCLUSIVE (inquiry {ident}). "
                f"Answer `rollout extend {rollout_id}` (observe longer), `rollout approve "
                f"{rollout_id}` (proceed) or `rollout reject {rollout_id}` (roll back).")
    return (f"Approval needed for rollout {rollout_id} (inquiry {ident}): answer `rollout approve "
            f"{rollout_id}` or `rollout reject {rollout_id}` (or `st2 run fleet_rollout.respond "
            f"rollout_id={rollout_id} decision=approve`).")


def ended_message(execution: Mapping[str, Any], status: str) -> str:
    params = execution.get("parameters") or {}
    result = execution.get("result") or {}
    output = result.get("output") if isinstance(result, Mapping) else None
    output = output if isinstance(output, Mapping) else {}
    ident = execution.get("id", "?")
    status = status or str(execution.get("status") or "unknown")
    rollout_id = output.get("rollout_id") or params.get("rollout_id")
    if not rollout_id:
        errors = result.get("errors") if isinstance(result, Mapping) else None
        first = ""
        if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
            first = str(errors[0].get("message") or "")[:300]
        return (f"Rollout of profile {params.get('profile', '?')} did not start (execution "
                f"{ident} {status})" + (f": {first}" if first else "."))
    rollout_status = output.get("status")
    if status in ("canceled", "canceling"):
        rollout_status = "cancelled: hosts in flight keep their state; see `rollout status "\
                         f"{rollout_id}`"
    return (f"Rollout {rollout_id} ended: workflow {status}, rollout "
            f"{rollout_status or 'unknown'} (execution {ident}).")


def compose(config: PackConfig, event: str, ident: str, status: str,
            api: ActionApi, store: Any, wait: float = questions.RECORD_WAIT) -> Dict[str, Any]:
    """The message for a rule's event. An inquiry is announced only when a rollout's batch
    asked it (questions.question_of): a core.ask anyone else starts with the pack's route is
    refused here and never reaches the channel."""
    if event == "inquiry":
        rollout_id, _batch, _kind = questions.question_of(api, store, ident, wait)
        try:
            inquiry = api.get(f"inquiries/{ident}")
        except ApiRefused:
            inquiry = {"id": ident}
        return _where(config, inquiry_message(inquiry, rollout_id))
    if event == "rollout_ended":
        return _where(config, ended_message(api.execution(ident), status))
    raise ConfigError(f"event {event!r}: inquiry or rollout_ended")
