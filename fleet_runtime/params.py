"""Action parameters as st2 handles them: CLI casting, Jinja rendering, defaults, validation.

- `cast_cli_parameters`: `st2 run` argument parsing (types from the action metadata; arrays as
  JSON or comma lists, objects as JSON or k=v,k2=v2, booleans true/false, repeated arrays).
- `render_live_params` / `render_final_params`: st2's parameter rendering: values and defaults
  may be Jinja templates over other parameters, `st2kv.system.*` / `st2kv.user.*`,
  `action_context.*`, `config_context.*` (and `trigger.*` for rules), resolved in dependency
  order, then cast to the declared types.
- `validate_parameters`: immutable parameters cannot be overridden; the values must satisfy the
  action's parameter schema (required, types, enum, ...).
- `mask_secrets`: `secret: true` parameters shown as ********.
"""
from __future__ import annotations

import ast
import copy
import json
import re
from typing import Any, Dict, List, Optional, Set, Tuple

import jinja2.meta
from jsonschema import SchemaError, ValidationError

from fleet_runtime import functions, templating
from fleet_runtime.packs import Action
from fleet_runtime.runtime_errors import ParameterError, ParamRenderError
from fleet_runtime.schema import validate_instance

MASK = "********"


# ------------------------------------------------------------------------- casting
def _cast_none(value: Any) -> Any:
    if isinstance(value, str) and value == functions.NONE_MAGIC_VALUE:
        return None
    return value


def _cast_object(value: Any) -> Any:
    value = _cast_none(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return ast.literal_eval(value)
    return value


def _cast_boolean(value: Any) -> Any:
    value = _cast_none(value)
    if isinstance(value, str):
        return ast.literal_eval(value.capitalize())
    return value


def _cast_integer(value: Any) -> Any:
    value = _cast_none(value)
    return None if value is None else int(value)


def _cast_number(value: Any) -> Any:
    value = _cast_none(value)
    return None if value is None else float(value)


def _cast_string(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(
            f'Value "{value}" must either be a string or None. Got "{type(value).__name__}".'
        )
    return _cast_none(value)


CASTS = {
    "array": _cast_object,
    "boolean": _cast_boolean,
    "integer": _cast_integer,
    "number": _cast_number,
    "object": _cast_object,
    "string": _cast_string,
}


def cast_array_from_alias(value: Any) -> Any:
    if isinstance(value, list):
        return value
    return [v.strip() for v in str(value).split(",")]


def cast_params(
    action: Action, params: Dict[str, Any], overrides: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """st2's action_param_utils.cast_params (alias executions)."""
    schemas = action.merged_parameters()
    result = dict(params)
    for name, value in params.items():
        ptype = (schemas.get(name) or {}).get("type")
        if not ptype:
            continue
        cast = (overrides or {}).get(ptype) or CASTS.get(ptype)
        if not cast:
            continue
        try:
            result[name] = cast(value)
        except Exception as e:
            raise ParameterError(
                f'Failed to cast value "{value}" (type: {type(value).__name__}) for parameter'
                f' "{name}" of type "{ptype}": {e}. Perhaps the value is of an invalid type?'
            ) from e
    return result


def _cli_array(value: str, definition: Dict[str, Any]) -> List[Any]:
    try:
        value = str([int(value)])
    except ValueError:
        pass
    try:
        result = json.loads(value)
    except ValueError:
        result = [v.strip() for v in value.split(",")]
    if not isinstance(result, list):
        result = [result]
    return result


def _cli_object(value: str) -> Dict[str, Any]:
    if value.startswith("{"):
        result = json.loads(value)
        if not isinstance(result, dict):
            raise ValueError("not a JSON object")
        return result
    result = {}
    for pair in value.split(","):
        parts = pair.split("=", 1)
        if len(parts) == 2:
            result[parts[0]] = parts[1]
    return result


def _cli_boolean(value: str) -> bool:
    try:
        result = ast.literal_eval(value.capitalize())
    except (ValueError, SyntaxError) as e:
        raise ValueError(
            "Invalid value for boolean parameter. Valid values are: true, false"
        ) from e
    if not isinstance(result, bool):
        raise ValueError("Invalid value for boolean parameter. Valid values are: true, false")
    return result


def cast_cli_parameters(action: Action, args: List[str]) -> Dict[str, Any]:
    """Parse `key=value ...` the way `st2 run` does (types from the action's parameters)."""
    schemas = action.merged_parameters()
    result: Dict[str, Any] = {}
    for idx, arg in enumerate(args):
        if "=" not in arg:
            # st2: the rest of the line is the "cmd" parameter.
            result["cmd"] = " ".join(args[idx:])
            break
        key, value = arg.split("=", 1)
        if key.startswith("@"):
            key = key[1:]
            with open(value) as fh:
                result[key] = fh.read()
            continue
        ptype = (schemas.get(key) or {}).get("type")
        try:
            if ptype == "array":
                cast = _cli_array(value, schemas[key])
                result[key] = result[key] + cast if key in result else cast
            elif ptype == "boolean":
                result[key] = _cli_boolean(value)
            elif ptype == "integer":
                result[key] = int(value)
            elif ptype == "number":
                result[key] = float(value)
            elif ptype == "object":
                result[key] = _cli_object(value)
            else:
                result[key] = value
        except ValueError as e:
            raise ParameterError(
                f'Parameter "{key}" of {action.ref}: cannot read "{value}" as {ptype}: {e}'
            ) from e
    return result


# ------------------------------------------------------------------------- rendering
_ENV = templating.get_environment()
_COMPLEX_VAR = re.compile(r'"{{([A-z0-9_-]+)}}"')


def _is_template(value: Any) -> bool:
    if isinstance(value, str):
        return templating.is_jinja_expression(value)
    if isinstance(value, (list, dict)):
        return templating.is_jinja_expression(str(value))
    return False


def _parse(value: Any) -> Optional[List[str]]:
    """The variables a template uses; None when it does not parse as Jinja (st2's _process
    then keeps the value as it is)."""
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        return sorted(jinja2.meta.find_undeclared_variables(_ENV.parse(text)))
    except jinja2.TemplateSyntaxError:
        return None


def _render_value(value: Any, context: Dict[str, Any]) -> Any:
    if isinstance(value, (list, dict)):
        text = json.dumps(value)
        text = _COMPLEX_VAR.sub(r"{{\1 | to_complex}}", text)
        return json.loads(_ENV.from_string(text).render(context))
    return _ENV.from_string(value).render(context)


def _base_context(
    action_context: Dict[str, Any], config: Dict[str, Any], additional: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    user = action_context.get("api_user") or action_context.get("user")
    context: Dict[str, Any] = {
        "st2kv": templating.kv_context(user),
        "action_context": action_context,
        "config_context": config,
    }
    context.update(additional or {})
    return context


def _resolve(
    nodes: Dict[str, Any],
    base: Dict[str, Any],
    action: Action,
    literal: Optional[set] = None,
) -> Dict[str, Any]:
    """Render every node in dependency order (templates may use other parameters)."""
    literal = literal or set()
    resolved: Dict[str, Any] = {}
    pending = dict(nodes)
    while pending:
        progress = False
        for name in list(pending):
            value = pending[name]
            variables = None if name in literal or not _is_template(value) else _parse(value)
            if variables is None:
                resolved[name] = value
                del pending[name]
                progress = True
                continue
            deps = [d for d in variables if d not in base]
            missing = [d for d in deps if d not in nodes]
            if missing:
                raise ParamRenderError(
                    action.ref, f'parameter "{name}" depends on undefined variable(s)'
                    f" {', '.join(missing)} (Dependency unsatisfied in variable"
                    f' "{missing[0]}")'
                )
            if all(d in resolved for d in deps if d != name) and name not in deps:
                context = dict(base)
                context.update(resolved)
                try:
                    resolved[name] = _render_value(value, context)
                except Exception as e:
                    # st2 (util/param.py _resolve_dependencies) renders with StrictUndefined:
                    # an attribute missing from the context fails the parameter
                    raise ParamRenderError(
                        action.ref, f'Failed to render parameter "{name}": {e}') from e
                del pending[name]
                progress = True
        if not progress:
            raise ParamRenderError(
                action.ref, "cyclic dependency found in the following variables:"
                f" {', '.join(sorted(pending))}. Likely the variable is referencing itself"
            )
    return resolved


def _cast(value: Any, definition: Dict[str, Any]) -> Any:
    if value is None or not definition:
        return value
    cast = CASTS.get(definition.get("type") or "")
    if not cast:
        return value
    try:
        return cast(value)
    except Exception:
        return value


def _given_values(params: Dict[str, Any], schemas: Dict[str, Any]) -> Set[str]:
    """Names whose value is the given one (not replaced by a default): kept as literals."""
    return {name for name, value in params.items()
            if value is not None and not (schemas.get(name) or {}).get("immutable")}


def render_live_params(
    action: Action,
    params: Dict[str, Any],
    action_context: Dict[str, Any],
    config: Dict[str, Any],
    additional: Optional[Dict[str, Any]] = None,
    render_given: bool = False,
) -> Dict[str, Any]:
    """The parameters to record on a new execution (explicit ones + templated defaults).

    Stricter than st2: values a caller passes (CLI, API, chat alias, inquiry, re-run, workflow
    task inputs orquesta already rendered) are literals and never rendered, so a
    `{{ config_context.x }}` typed in chat stays that text. Only pack-authored templates are
    rendered: action parameter defaults always, the given values only with `render_given`
    (a rule's action parameters)."""
    schemas = action.merged_parameters()
    nodes = dict(params)
    for name, definition in schemas.items():
        absent = name not in nodes or nodes[name] is None
        if absent or definition.get("immutable"):
            nodes[name] = copy.deepcopy(definition.get("default"))
    base = _base_context(action_context, config, additional)
    literal = set() if render_given else _given_values(params, schemas)
    rendered = _resolve(nodes, base, action, literal=literal)
    live = {name: _cast(rendered[name], schemas.get(name) or {}) for name in params}
    for name, definition in schemas.items():
        if definition.get("immutable") or name in params or "default" not in definition:
            continue
        if templating.is_jinja_expression(definition.get("default")):
            live[name] = _cast(rendered[name], definition)
    return live


def render_final_params(
    action: Action,
    params: Dict[str, Any],
    action_context: Dict[str, Any],
    config: Dict[str, Any],
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Runner parameters and action parameters for running (defaults filled and rendered)."""
    schemas = action.merged_parameters()
    nodes: Dict[str, Any] = {}
    for name, value in params.items():
        nodes[name] = value
    for name, definition in schemas.items():
        if name not in nodes or nodes[name] is None or definition.get("immutable"):
            nodes[name] = copy.deepcopy(definition.get("default"))
    base = _base_context(action_context, config, None)
    # Explicit values were rendered when the execution was created: keep them as values.
    rendered = _resolve(nodes, base, action, literal=_given_values(params, schemas))
    final = {n: _cast(v, schemas.get(n) or {}) for n, v in rendered.items()}
    runner_names = set(action.runner()["runner_parameters"])
    runner_params = {k: v for k, v in final.items() if k in runner_names}
    action_params = {k: v for k, v in final.items() if k not in runner_names}
    return runner_params, action_params


# ------------------------------------------------------------------------- validation
def parameters_schema(action: Action) -> Dict[str, Any]:
    return {
        "type": "object",
        "properties": action.merged_parameters(),
        "additionalProperties": False,
    }


def check_immutable(action: Action, params: Dict[str, Any]) -> None:
    """st2 (services/action.py create_request): an immutable parameter given at all, even with
    its default value, is an error."""
    overridden = [
        name
        for name, definition in action.merged_parameters().items()
        if definition.get("immutable") and name in params
    ]
    if overridden:
        raise ParameterError(
            f"{action.ref}: Override of immutable parameter(s) {', '.join(sorted(overridden))}"
            " is unsupported."
        )


def check_declared(action: Action, params: Dict[str, Any]) -> None:
    """st2 (util/schema get_schema_for_action_parameters: additionalProperties false): a
    parameter the action (or its runner) does not declare is refused, whoever passes it (CLI,
    API, alias key=value pairs, rules, workflow tasks). The error names the parameter, never
    its value."""
    undeclared = sorted(name for name in params if name not in action.merged_parameters())
    if not undeclared:
        return
    quoted = ", ".join(repr(name) for name in undeclared)
    verb = "was" if len(undeclared) == 1 else "were"
    raise ParameterError(
        f"{action.ref}: Additional properties are not allowed ({quoted} {verb} unexpected):"
        f" {action.ref} has no parameter {', '.join(undeclared)}")


def validate_parameters(action: Action, params: Dict[str, Any]) -> Dict[str, Any]:
    """Validate explicit parameters against the schema; returns them with defaults applied."""
    check_declared(action, params)
    check_immutable(action, params)
    schemas = action.merged_parameters()
    # Templated defaults are rendered later: validate them as given (strings) only if explicit.
    schema = parameters_schema(action)
    for name, definition in schemas.items():
        if templating.is_jinja_expression(definition.get("default")) and name not in params:
            schema["properties"][name] = {k: v for k, v in definition.items() if k != "type"}
    try:
        return dict(validate_instance(params, schema))
    except (ValidationError, SchemaError) as e:
        where = ".".join(str(p) for p in e.path)
        prefix = f'parameter "{where}": ' if where else ""
        raise ParameterError(f"{action.ref}: {prefix}{e.message}") from e


def mask_secrets(action: Optional[Action], params: Dict[str, Any]) -> Dict[str, Any]:
    if not action or not isinstance(params, dict):
        return params
    secrets = set(action.secret_parameters())
    return {k: (MASK if k in secrets and v is not None else v) for k, v in params.items()}
