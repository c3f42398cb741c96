"""Alias execution as st2api's aliasexecution controller does it: the chat command matched to
one alias, its parameters extracted (several runs for `match_multiple`), immutable parameters
added, each run requested with the alias context (the bot's account runs it for the chat user)
and an on-complete notification to the chat route; then the ack message.

Shared by `fleet-rollout chat` and the st2 API (`POST /aliasexecution[/match_and_execute]`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from fleet_runtime import aliases, params, st2ctx, templating
from fleet_runtime.packs import Action, Alias, Registry
from fleet_runtime.runtime_errors import AliasError, ParameterError


@dataclass
class PlannedRun:
    action: Action
    parameters: Dict[str, Any]
    context: Dict[str, Any]
    notify: Dict[str, Any]


@dataclass
class AliasPlan:
    alias: Alias
    representation: str
    runs: List[PlannedRun]


def find_alias(registry: Registry, name: str) -> Alias:
    for candidate in registry.aliases:
        if candidate.name == name or candidate.ref == name:
            if not candidate.enabled:
                raise AliasError(f'Action alias with name "{name}" is disabled.')
            return candidate
    raise AliasError(f'Unable to identify action alias with name "{name}".')


def plan(registry: Registry, command: str, chat_user: Optional[str], bot_user: str,
         source_channel: Optional[str], notification_route: Optional[str] = None,
         alias_name: Optional[str] = None, format_str: Optional[str] = None) -> AliasPlan:
    """What executing `command` would run (nothing is started here)."""
    command = command.strip()
    if alias_name is None:
        match = aliases.get_matching_alias(command, registry.aliases)
        alias, representation = match["alias"], match["representation"]
        multiple = bool(match["match_multiple"])
    else:
        alias = find_alias(registry, alias_name)
        representation, multiple = format_str or "", False
        own = [rep for f in alias.formats for rep in aliases.normalise_format(f)[1]]
        if representation not in own:  # st2: never a pattern the caller brings
            raise AliasError(f'Format string "{representation}" is not available on the alias'
                             f' "{alias.name}"')
    extracted = aliases.extract_parameters(representation, command, match_multiple=multiple)
    runs_params = extracted if isinstance(extracted, list) else [extracted]
    context = st2ctx.alias_context(alias.ref, alias.name, chat_user, bot_user, source_channel)
    if alias.immutable_parameters:
        kv = {"st2kv": templating.kv_context(bot_user)}  # st2: the requester's keys
        kv.update(context)
        rendered = templating.render_values(alias.immutable_parameters, kv) or {}
        for run_params in runs_params:
            overridden = [p for p in alias.immutable_parameters if p in run_params]
            if overridden:
                raise ParameterError("Immutable arguments cannot be overriden: "
                                     + ",".join(overridden))
            run_params.update(rendered)
    action = registry.action(alias.action_ref)
    notify = {"on-complete": {"routes": [notification_route or source_channel],
                              "data": {"user": chat_user, "source_channel": source_channel,
                                       "source_context": None}}}
    runs = []
    for run_params in runs_params:
        clean = {k: v for k, v in run_params.items() if v is not None}
        clean = params.cast_params(action, clean,
                                   overrides={"array": params.cast_array_from_alias})
        runs.append(PlannedRun(action, clean, dict(context), notify))
    return AliasPlan(alias, representation, runs)


def ack_message(alias: Alias, view: Dict[str, Any]) -> Optional[str]:
    """The ack st2 returns (`message`), or None when the alias has no ack format."""
    if not alias.ack.get("format"):
        return None
    try:
        return str(templating.render(alias.ack["format"], view))
    except Exception as e:
        return f'Cannot render "format" in field "ack" for alias. {e}'


# What chatops.format_execution_result posts when the alias has no result format (st2's
# templates/default.j2, the keys of python and shell results).
DEFAULT_RESULT_TEMPLATE = """Action {{ execution.action.ref }} completed.
status : {{ execution.status }}
execution: {{ execution.id }}
{% if execution.result is mapping %}{% for key, value in execution.result.items() %}
{% if key in ['result', 'stdout', 'stderr', 'exit_code', 'return_code', 'output', 'errors']
   and value not in [none, ''] %}{{ key }} : {{ value | to_json_string if value is not string
   else value }}
{% endif %}{% endfor %}{% endif %}"""


def result_message(alias: Optional[Dict[str, Any]], execution: Dict[str, Any]
                   ) -> Dict[str, Any]:
    """chatops.format_execution_result: {enabled, message[, extra]} for an execution (an API
    view) run through `alias` (its API view; None when not run through an alias)."""
    spec = (alias or {}).get("result") or {}
    if not spec.get("enabled", True):
        return {"enabled": False}
    view = {"execution": execution, "alias": alias, "six": None}
    template = spec.get("format") or DEFAULT_RESULT_TEMPLATE
    out: Dict[str, Any] = {"enabled": True}
    try:
        out["message"] = str(templating.render(template, view, allow_undefined=True)).strip()
    except Exception as e:
        name = (alias or {}).get("ref", "?")
        out["message"] = f"Cannot render result format of alias {name}: {e}"
    if spec.get("extra"):
        out["extra"] = templating.render_values(spec["extra"], view)
    return out
