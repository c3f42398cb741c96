"""Rule matching: st2's criteria evaluation on trigger payloads."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from fleet_runtime import operators, templating
from fleet_runtime.packs import Rule
from fleet_runtime.payload import lookup


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
