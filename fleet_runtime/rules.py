"""Rules: st2's criteria evaluation on trigger payloads, and st2's rule enforcer.

Enforcing a matched rule (st2reactor/rules/enforcer.py): the action runs as the system user with
the context of st2ctx.rule_context; its parameters are rendered like every action's
(st2common/util/param.py render_live_params) with `trigger` (the payload) added, in st2's Jinja
environment (StrictUndefined: an attribute missing from the payload is an error, and
`default()` replaces only undefined values, not None). When a parameter fails to render, st2
still creates the execution, marks it failed with {"error", "traceback"} and fails the
enforcement with the error (no execution id on the enforcement).
"""
from __future__ import annotations

import traceback
from typing import Any, Dict, Optional, Tuple

from fleet_runtime import operators, st2ctx, templating
from fleet_runtime.packs import Rule
from fleet_runtime.payload import lookup
from fleet_runtime.runtime_errors import ParamRenderError


def _context(prefix: str, payload: Any) -> Dict[str, Any]:
    ctx = {prefix: payload}
    ctx["st2kv"] = templating.kv_context(None)
    return ctx


def check_criterion(key: str, criterion: Dict[str, Any], data: Dict[str, Any]) -> bool:
    """One criterion against `data` ({"trigger": payload} or {"item": element})."""
    op_name = str(criterion.get("type", "")).lower()
    if not op_name:
        return False
    func = operators.OPERATORS.get(op_name)
    if func is None:
        raise ValueError(f"Invalid operator: {op_name}")
    render_ctx = dict(data)
    render_ctx.setdefault("st2kv", templating.kv_context(None))
    pattern = templating.render_criteria_pattern(criterion.get("pattern"), render_ctx)
    path = key.split("#", 1)[0]
    matches = lookup(data, path)
    value = matches[0] if matches else None
    if op_name == "search":
        return bool(func(value, pattern, criterion.get("condition"), check_criterion))
    return bool(func(value, pattern))


def rule_matches(rule: Rule, payload: Any) -> Tuple[bool, Optional[str]]:
    """(matched, failure reason); a criterion that raises is a non-match with a reason."""
    if not rule.enabled:
        return False, None
    if rule.criteria and not payload:
        return False, None
    data = {"trigger": payload}
    for key, criterion in rule.criteria.items():
        try:
            if not check_criterion(key, criterion, data):
                return False, None
        except Exception as e:
            return False, (
                f'Failed to match rule "{rule.ref}": There might be a problem with the criteria'
                f' "{key}": {e}'
            )
    return True, None


def enforce(rt: Any, rule: Rule, trigger_instance_id: str, payload: Any
            ) -> Tuple[Optional[str], Optional[str]]:
    """Run the rule's action: (execution id, None) or (None, failure reason)."""
    try:
        action = rt.registry.action(rule.action_ref)
        ctx = st2ctx.rule_context(trigger_instance_id, rule.ref, rule.name,
                                  rt.home.system_user, action.pack)
        return rt.request(rule.action_ref, rule.action_parameters, ctx,
                          additional={"trigger": payload}, render_given=True), None
    except ParamRenderError as e:
        error = {"error": e.st2_message,
                 "traceback": "".join(traceback.format_tb(e.__traceback__, 20))}
        try:
            rt.record_failed_request(action, rule.action_parameters, ctx, error)
        except Exception as refused:  # st2's create_request validates the raw parameters
            return None, str(refused)
        return None, e.st2_message
    except Exception as e:
        return None, str(e)
