"""One metadata file of a pack into one resource, checked the way st2 registers it: actions
(runner type, runner parameter overrides, entry point), aliases, rules (trigger, criteria
operators), policies (policy type and its parameters) and trigger type definitions."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from fleet_runtime import operators
from fleet_runtime.packs.builtin_content import (
    POLICY_TYPES,
    RUNNER_ALIASES,
    RUNNER_PARAM_OVERRIDABLE_ATTRS,
    RUNNERS,
)
from fleet_runtime.packs.metadata_schemas import (
    ACTION_SCHEMA,
    ALIAS_SCHEMA,
    POLICY_SCHEMA,
    RULE_SCHEMA,
    TRIGGER_TYPE_SCHEMA,
)
from fleet_runtime.packs.resources import Action, Alias, Pack, Policy, Rule, TriggerType
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.schema import validate_document, validate_parameter_definitions
from fleet_runtime.wfyaml import SAFE_LOADER


def read_yaml(path: Path, rel: str) -> Any:
    try:
        with open(path) as fh:
            # the C loader as st2 reads metadata (the pure-Python one was a fifth of opening
            # the runtime)
            return yaml.load(fh, Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise MetadataError(rel, None, f"not valid YAML: {e}") from e
    except OSError as e:
        raise MetadataError(rel, None, f"cannot read: {e}") from e


def _check_pack_field(doc: Dict[str, Any], pack_ref: str, rel: str) -> None:
    if doc.get("pack") not in (None, pack_ref):
        raise MetadataError(
            rel, "pack", f'model is in pack "{pack_ref}" but field "pack" is "{doc["pack"]}"'
        )


def inside_pack(pack_path: Path, candidate: Path) -> bool:
    try:
        candidate.resolve().relative_to(pack_path.resolve())
        return True
    except ValueError:
        return False


def _python_defines_action_class(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                if name == "Action":
                    return True
    return False


def _load_document(pack: Pack, f: Path, shown: str, schema: Dict[str, Any]) -> Dict[str, Any]:
    """A model's metadata file: a mapping valid against `schema`, in this pack (or no pack)."""
    doc = read_yaml(f, shown)
    if not isinstance(doc, dict):
        raise MetadataError(shown, None, "must be a mapping")
    validate_document(shown, doc, schema)
    _check_pack_field(doc, pack.ref, shown)
    return doc


def load_action(pack: Pack, pack_path: Path, f: Path, shown: str) -> Action:
    doc = _load_document(pack, f, shown, ACTION_SCHEMA)
    runner = RUNNER_ALIASES.get(doc["runner_type"], doc["runner_type"])
    if runner not in RUNNERS:
        raise MetadataError(
            shown,
            "runner_type",
            f'unknown runner type "{doc["runner_type"]}" (known: {", ".join(sorted(RUNNERS))})',
        )
    params = doc.get("parameters") or {}
    validate_parameter_definitions(shown, params)
    runner_params = RUNNERS[runner]["runner_parameters"]
    for name, definition in params.items():
        if name in runner_params:
            for attr in definition:
                if attr not in RUNNER_PARAM_OVERRIDABLE_ATTRS and definition[attr] != runner_params[
                    name
                ].get(attr):
                    raise MetadataError(
                        shown,
                        f"parameters.{name}.{attr}",
                        f'the attribute "{attr}" of runner parameter "{name}" cannot be'
                        f" overridden (allowed: {', '.join(RUNNER_PARAM_OVERRIDABLE_ATTRS)})",
                    )
        elif "type" not in definition:
            raise MetadataError(shown, f"parameters.{name}.type", "a type is required")
    entry_point = doc.get("entry_point") or ""
    entry_abs: Optional[str] = None
    if runner in ("python-script", "orquesta", "local-shell-script"):
        if not entry_point:
            raise MetadataError(shown, "entry_point", f'the "{runner}" runner needs an entry point')
        candidate = (pack_path / "actions" / entry_point).resolve()
        if not inside_pack(pack_path, candidate):
            raise MetadataError(
                shown, "entry_point", f'"{entry_point}" points outside the pack directory'
            )
        if not candidate.is_file():
            raise MetadataError(
                shown, "entry_point", f'"{entry_point}" does not exist (looked in actions/)'
            )
        entry_abs = str(candidate)
        if runner == "python-script":
            if candidate.suffix != ".py":
                raise MetadataError(shown, "entry_point", f'"{entry_point}" is not a .py file')
            if not _python_defines_action_class(candidate):
                raise MetadataError(
                    shown,
                    "entry_point",
                    f'"{entry_point}" defines no class deriving from Action (or does not parse)',
                )
    return Action(
        ref=f"{pack.ref}.{doc['name']}",
        pack=pack.ref,
        name=doc["name"],
        runner_type=runner,
        parameters=params,
        description=doc.get("description") or "",
        enabled=doc.get("enabled", True),
        entry_point=entry_abs,
        notify=doc.get("notify"),
        output_schema=doc.get("output_schema"),
        metadata_file=shown,
        pack_path=str(pack_path),
    )


def load_alias(pack: Pack, f: Path, shown: str) -> Alias:
    doc = _load_document(pack, f, shown, ALIAS_SCHEMA)
    formats = doc.get("formats") or []
    if not formats:
        raise MetadataError(shown, "formats", "an alias needs at least one format")
    return Alias(
        ref=f"{pack.ref}.{doc['name']}",
        pack=pack.ref,
        name=doc["name"],
        action_ref=doc["action_ref"],
        formats=formats,
        enabled=doc.get("enabled", True),
        description=doc.get("description"),
        ack=doc.get("ack") or {},
        result=doc.get("result") or {},
        extra=doc.get("extra") or {},
        immutable_parameters=doc.get("immutable_parameters") or {},
        metadata_file=shown,
    )


def load_rule(pack: Pack, f: Path, shown: str) -> Rule:
    doc = _load_document(pack, f, shown, RULE_SCHEMA)
    criteria = doc.get("criteria") or {}
    for key, criterion in criteria.items():
        if not isinstance(criterion, dict):
            raise MetadataError(shown, f"criteria.{key}", "must be a mapping with type/pattern")
        op = criterion.get("type")
        if not op:
            raise MetadataError(shown, f"criteria.{key}.type", "the operator type is required")
        if str(op).lower() not in operators.OPERATORS:
            raise MetadataError(
                shown,
                f"criteria.{key}.type",
                f'unknown operator "{op}" (known: {", ".join(sorted(operators.OPERATORS))})',
            )
        if str(op).lower() == "search":
            if criterion.get("condition") not in operators.SEARCH_CONDITIONS:
                raise MetadataError(
                    shown,
                    f"criteria.{key}.condition",
                    f"search needs a condition in {', '.join(operators.SEARCH_CONDITIONS)}",
                )
            if not isinstance(criterion.get("pattern"), dict):
                raise MetadataError(
                    shown, f"criteria.{key}.pattern", "search needs a mapping of criteria"
                )
    return Rule(
        ref=f"{pack.ref}.{doc['name']}",
        pack=pack.ref,
        name=doc["name"],
        trigger_type=doc["trigger"]["type"],
        trigger_parameters=doc["trigger"].get("parameters") or {},
        criteria=criteria,
        action_ref=doc["action"]["ref"],
        action_parameters=doc["action"].get("parameters") or {},
        enabled=bool(doc.get("enabled", False)),
        description=doc.get("description") or "",
        metadata_file=shown,
    )


def load_policy(pack: Pack, f: Path, shown: str) -> Policy:
    doc = _load_document(pack, f, shown, POLICY_SCHEMA)
    ptype = doc["policy_type"]
    if ptype not in POLICY_TYPES:
        known = ", ".join(POLICY_TYPES)
        raise MetadataError(
            shown, "policy_type", f'unknown policy type "{ptype}" (known: {known})'
        )
    params_schema = {"type": "object", "properties": POLICY_TYPES[ptype],
                     "additionalProperties": False}
    validate_document(shown, doc.get("parameters") or {}, params_schema, prefix="parameters")
    params = dict(doc.get("parameters") or {})
    for name, definition in POLICY_TYPES[ptype].items():
        if name not in params and "default" in definition:
            params[name] = definition["default"]
    return Policy(
        ref=f"{pack.ref}.{doc['name']}",
        pack=pack.ref,
        name=doc["name"],
        resource_ref=doc["resource_ref"],
        policy_type=ptype,
        parameters=params,
        enabled=doc.get("enabled", True),
        metadata_file=shown,
    )


def load_trigger_type(pack: Pack, doc: Any, shown: str, prefix: str) -> TriggerType:
    if not isinstance(doc, dict):
        raise MetadataError(shown, prefix or None, "a trigger type must be a mapping")
    validate_document(shown, doc, TRIGGER_TYPE_SCHEMA, prefix=prefix)
    return TriggerType(
        ref=f"{pack.ref}.{doc['name']}",
        pack=pack.ref,
        name=doc["name"],
        description=doc.get("description") or "",
        payload_schema=doc.get("payload_schema") or {},
        parameters_schema=doc.get("parameters_schema") or {},
        metadata_file=shown,
    )

