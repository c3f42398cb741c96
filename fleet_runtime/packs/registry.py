"""The registry of every loaded pack: cross-references between resources (alias formats,
rule triggers and actions, policy resources) and the inspection of orquesta workflows."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from fleet_runtime import compat  # noqa: F401  (orquesta fixes before its import)
from fleet_runtime.packs.builtin_content import (
    INTERNAL_TRIGGER_TYPES,
    INTERVAL_TIMER,
    INTERVAL_UNITS,
)
from fleet_runtime.packs.loader import builtin_packs, load_pack
from fleet_runtime.packs.resources import Action, Alias, Pack, Policy, Rule, TriggerType
from fleet_runtime.runtime_errors import MetadataError, WorkflowLoadError
from fleet_runtime.wfyaml import load_definition


def alias_format_shape(representation: str) -> str:
    """The match shape of a format: parameter names and defaults removed, spaces collapsed."""
    shape = re.sub(r"{{\s*\S+?\s*(=\s*[^}]*)?}}", "{{}}", representation)
    return re.sub(r"\s+", " ", shape).strip().lower()


class Registry:
    """Every loaded pack: actions, aliases, rules, policies, trigger types."""

    def __init__(self, pack_paths: List[str]) -> None:
        self.secret_masker: Any = None  # set by the runtime (fleet_runtime.masking)
        self.packs: Dict[str, Pack] = {}
        for pack in builtin_packs():
            self.packs[pack.ref] = pack
        for path in pack_paths:
            pack = load_pack(path)
            if pack.ref in self.packs:
                other = self.packs[pack.ref].path or "<built-in>"
                if other == pack.path:
                    continue
                raise MetadataError(
                    f"{path}/pack.yaml", "ref", f'pack "{pack.ref}" is already loaded from {other}'
                )
            self.packs[pack.ref] = pack
        self.actions: Dict[str, Action] = {}
        self.trigger_types: Dict[str, TriggerType] = {}
        for ref, tt in INTERNAL_TRIGGER_TYPES.items():
            self.trigger_types[ref] = TriggerType(
                ref=ref, pack="core", name=ref.split(".", 1)[1], description=tt["description"],
                payload_schema=tt["payload_schema"])
        for pack in self.packs.values():
            for action in pack.actions.values():
                self.actions[action.ref] = action
            for tt in pack.trigger_types:
                if tt.ref in self.trigger_types:
                    raise MetadataError(tt.metadata_file, "name",
                                        f'trigger type "{tt.ref}" is defined twice')
                self.trigger_types[tt.ref] = tt
        self._specs: Dict[str, Tuple[Any, Any]] = {}
        # workflows orquesta cannot load (st2: registered, every run fails); see inspect_workflow
        self.workflow_load_errors: Dict[str, WorkflowLoadError] = {}
        self.aliases: List[Alias] = [a for p in self.packs.values() for a in p.aliases]
        self.rules: List[Rule] = [r for p in self.packs.values() for r in p.rules]
        self.policies: List[Policy] = [x for p in self.packs.values() for x in p.policies]
        self._validate_references()

    def action(self, ref: str) -> Action:
        from fleet_runtime.runtime_errors import NotFoundError

        action = self.actions.get(ref)
        if action is None:
            raise NotFoundError(f'Action "{ref}" is not registered (loaded packs: '
                                f'{", ".join(sorted(self.packs))}).')
        return action

    def _validate_references(self) -> None:
        seen_shapes: Dict[str, Tuple[str, str]] = {}
        for alias in self.aliases:
            if alias.action_ref not in self.actions:
                raise MetadataError(alias.metadata_file, "action_ref",
                                    f'action "{alias.action_ref}" does not exist')
            for i, fmt in enumerate(alias.formats):
                reps = [fmt] if isinstance(fmt, str) else (fmt.get("representation") or [])
                if isinstance(reps, str):
                    reps = [reps]
                for rep in reps:
                    shape = alias_format_shape(rep)
                    if shape in seen_shapes:
                        other_file, other_rep = seen_shapes[shape]
                        raise MetadataError(
                            alias.metadata_file,
                            f"formats[{i}]",
                            f'format "{rep}" collides with "{other_rep}" in {other_file}'
                            " (the same words and parameter positions: every command matching"
                            " one matches the other)",
                        )
                    seen_shapes[shape] = (alias.metadata_file, rep)
        for rule in self.rules:
            if rule.trigger_type not in self.trigger_types:
                raise MetadataError(rule.metadata_file, "trigger.type",
                                    f'unknown trigger type "{rule.trigger_type}" (known: '
                                    f'{", ".join(sorted(self.trigger_types))})')
            if rule.action_ref not in self.actions:
                raise MetadataError(rule.metadata_file, "action.ref",
                                    f'action "{rule.action_ref}" does not exist')
            if rule.trigger_type == INTERVAL_TIMER:
                interval_seconds(rule)
        for policy in self.policies:
            if policy.resource_ref not in self.actions:
                raise MetadataError(policy.metadata_file, "resource_ref",
                                    f'action "{policy.resource_ref}" does not exist')
            if policy.policy_type == "action.concurrency.attr":
                action = self.actions[policy.resource_ref]
                known = action.merged_parameters()
                for attr in policy.parameters.get("attributes") or []:
                    if attr not in known:
                        raise MetadataError(policy.metadata_file, "parameters.attributes",
                                            f'"{attr}" is not a parameter of {action.ref}')
        for action in self.actions.values():
            if action.runner_type == "orquesta" and action.entry_point:
                try:
                    self.inspect_workflow(action)
                except WorkflowLoadError as e:
                    # st2 registers the action (registration never parses the workflow) and
                    # every run fails with orquesta's message; `pack validate` reports it
                    self.workflow_load_errors[action.ref] = e

    def inspect_workflow(self, action: Action) -> Any:
        """Orquesta's inspection plus st2's: referenced actions exist, inputs match them.
        Raises WorkflowLoadError when orquesta 1.6's loader refuses the YAML (wfyaml)."""
        from orquesta.specs import native as native_specs

        from fleet_runtime.conductor import _memoize_spec

        shown = workflow_shown(action)
        try:
            mtime = os.stat(action.entry_point or "").st_mtime
        except OSError:
            mtime = None
        cached = self._specs.get(action.ref)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            with open(action.entry_point or "") as fh:
                text = fh.read()
        except OSError as e:
            raise MetadataError(shown, None, f"cannot read the workflow: {e}") from e
        try:
            definition = load_definition(text)
        except ValueError as e:
            raise WorkflowLoadError(shown, str(e)) from e
        try:
            spec = native_specs.WorkflowSpec(definition)
        except Exception as e:
            raise MetadataError(shown, None, f"cannot load the workflow: {e}") from e
        _memoize_spec(spec)
        errors = spec.inspect(app_ctx={"st2": {}, "parent": {}}, raise_exception=False)
        for category in ("syntax", "semantics", "expressions", "context"):
            for err in errors.get(category, []):
                raise MetadataError(shown, err.get("spec_path"), f"{category}: {err['message']}")
        from orquesta.expressions import base as expr_base

        for task_name, task_spec in spec.tasks.items():
            action_ref = getattr(task_spec, "action", None)
            if not action_ref or (isinstance(action_ref, str) and expr_base.has_expressions(
                    action_ref)):
                continue
            if not re.match(r"^[^.\s]+\.[^\s]+$", action_ref):
                raise MetadataError(shown, f"tasks.{task_name}.action",
                                    f'the action reference "{action_ref}" is not formatted'
                                    " correctly")
            target = self.actions.get(action_ref)
            if target is None:
                raise MetadataError(shown, f"tasks.{task_name}.action",
                                    f'the action "{action_ref}" is not registered')
            params = getattr(task_spec, "input", None) or {}
            if not isinstance(params, dict):
                continue
            specs = target.merged_parameters()
            for name, meta in specs.items():
                if meta.get("required") and "default" not in meta and name not in params:
                    raise MetadataError(shown, f"tasks.{task_name}.input",
                                        f'action "{action_ref}" is missing required input'
                                        f' "{name}"')
            for name in params:
                if name not in specs:
                    raise MetadataError(shown, f"tasks.{task_name}.input.{name}",
                                        f'action "{action_ref}" has unexpected input "{name}"')
        self._specs[action.ref] = (mtime, spec)
        return spec


def workflow_shown(action: Action) -> str:
    """The workflow file as messages name it: relative to the working directory if under it."""
    if action.entry_point:
        try:
            return str(Path(action.entry_point).resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return action.entry_point
    return action.ref


def interval_seconds(rule: Rule) -> float:
    """The interval of a core.st2.IntervalTimer rule (st2's trigger parameters `unit` and
    `delta`), checked as st2 checks them when the rule is registered."""
    given = rule.trigger_parameters or {}
    unit, delta = given.get("unit"), given.get("delta")
    if unit not in INTERVAL_UNITS:
        raise MetadataError(rule.metadata_file, "trigger.parameters.unit",
                            f"{unit!r}: one of {', '.join(INTERVAL_UNITS)}")
    if isinstance(delta, bool) or not isinstance(delta, int) or delta < 1:
        raise MetadataError(rule.metadata_file, "trigger.parameters.delta",
                            f"{delta!r}: a positive integer")
    return float(delta * INTERVAL_UNITS[unit])
