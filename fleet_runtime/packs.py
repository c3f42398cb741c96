"""Pack metadata: loading and validating packs the way StackStorm registers them.

Checks (each failure names the file and the field):
- pack.yaml: st2's pack schema (ref pattern, semver version, required name/description/author);
- config.schema.yaml: every attribute is a valid parameter schema; the pack config in the
  runtime home validates against it (defaults filled, secrets known for masking);
- actions/*.yaml: st2's action schema, a known runner type, runner parameters only overridden
  in the attributes st2 allows, the entry point a file inside the pack (python-script: a module
  with an Action subclass; orquesta: a workflow that passes orquesta's inspection plus st2's
  checks of the referenced actions and their parameters);
- aliases/*.yaml: st2's alias schema, the action exists, no two formats of the same shape;
- rules/*.yaml: st2's rule schema, known trigger type and criteria operators, the action exists;
- policies/*.yaml: st2's policy schema, known policy type, its parameters, the resource exists;
- triggers/*.yaml and sensors/*.yaml `trigger_types`: trigger type definitions.
"""
from __future__ import annotations

import ast
import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from fleet_runtime import (
    compat,  # noqa: F401  (orquesta fixes before its import)
    operators,
)
from fleet_runtime.errors import MetadataError, WorkflowLoadError
from fleet_runtime.schema import (
    CONFIG_ATTRIBUTE_META_SCHEMA,
    validate_document,
    validate_parameter_definitions,
)
from fleet_runtime.wfyaml import load_definition

PACK_REF_REGEX = r"^[a-z0-9_]+$"
PACK_VERSION_REGEX = (
    r"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-[\da-z\-]+(?:\.[\da-z\-]+)*)?"
    r"(?:\+[\da-z\-]+(?:\.[\da-z\-]+)*)?$"
)
ST2_VERSION_REGEX = r"^((>?>|>=|=|<=|<?<)\s*[0-9]+\.[0-9]+\.[0-9]+?(\s*,)?\s*)+$"
RUNNER_PARAM_OVERRIDABLE_ATTRS = ("default", "description", "enum", "immutable", "required")

DEFAULT_INQUIRY_SCHEMA = {
    "title": "response_data",
    "type": "object",
    "properties": {
        "continue": {
            "type": "boolean",
            "description": "Would you like to continue the workflow?",
            "required": True,
        }
    },
}

_TIMEOUT_LOCAL = {
    "default": 60,
    "description": "Action timeout in seconds. Action will get killed if it doesn't finish"
    " in timeout seconds.",
    "type": "integer",
}
_LOCAL_COMMON = {
    "cwd": {"description": "Working directory where the command will be executed in",
            "type": "string"},
    "env": {"description": "Environment variables which will be available to the command",
            "type": "object"},
    "kwarg_op": {"default": "--", "description": "Operator to use in front of keyword args",
                 "type": "string"},
    "sudo": {"default": False, "description": "The command will be executed with sudo.",
             "type": "boolean"},
    "sudo_password": {"default": None, "description": "Sudo password.", "type": "string",
                      "secret": True, "required": False},
    "timeout": _TIMEOUT_LOCAL,
}

# Runner types with their runner parameters (as st2's runner.yaml files define them).
RUNNERS: Dict[str, Dict[str, Any]] = {
    "python-script": {
        "output_key": "result",
        "runner_parameters": {
            "debug": {"description": "Enable runner debug mode.", "type": "boolean",
                      "required": False, "default": False},
            "content_version": {"description": "Git revision of the pack content to use.",
                                "type": "string", "required": False},
            "env": {"description": "Environment variables which will be available to the"
                    " script.", "type": "object"},
            "timeout": {"default": 600, "description": "Action timeout in seconds.",
                        "type": "integer"},
            "log_level": {"description": "Default log level for Python runner actions.",
                          "type": "string", "default": "DEBUG",
                          "enum": ["AUDIT", "CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]},
        },
    },
    "orquesta": {
        "output_key": "output",
        "runner_parameters": {
            "notify": {"type": "array", "description": "List of tasks to trigger notifications"
                       " for.", "uniqueItems": True,
                       "items": {"type": "string", "minLength": 1, "pattern": "^\\w+$"},
                       "default": []},
        },
    },
    "noop": {"output_key": None, "runner_parameters": {}},
    "local-shell-cmd": {
        "output_key": "stdout",
        "runner_parameters": dict(
            {"cmd": {"description": "Arbitrary Linux command to be executed on the host.",
                     "type": "string"}},
            **_LOCAL_COMMON,
        ),
    },
    "local-shell-script": {
        "output_key": "stdout",
        "runner_parameters": dict(
            {"debug": {"description": "Enable runner debug mode.", "type": "boolean",
                       "required": False, "default": False},
             "content_version": {"description": "Git revision of the pack content to use.",
                                 "type": "string", "required": False}},
            **_LOCAL_COMMON,
        ),
    },
    "inquirer": {
        "output_key": "response",
        "runner_parameters": {
            "schema": {"default": DEFAULT_INQUIRY_SCHEMA, "required": True,
                       "description": "A JSON schema that will be used to validate the response"
                       " data", "type": "object"},
            "route": {"default": "", "required": False, "type": "string",
                      "description": "An arbitrary value for allowing rules to route to proper"
                      " notification channel"},
            "roles": {"default": [], "required": False, "type": "array",
                      "description": "A list of roles that are permitted to respond to the"
                      " action (if nothing provided, all are permitted)"},
            "users": {"default": [], "required": False, "type": "array",
                      "description": "A list of usernames that are permitted to respond to the"
                      " action (if nothing provided, all are permitted)"},
            "ttl": {"default": 1440, "required": True, "type": "integer",
                    "description": "Time (in minutes) to wait before timing out the inquiry if"
                    " no response is received"},
        },
    },
    "announcement": {
        "output_key": None,
        "runner_parameters": {
            "experimental": {"description": "Flag to indicate acknowledgment of using"
                             " experimental runner", "type": "boolean", "required": True,
                             "default": False},
            "route": {"description": "The routing_key used to route the message to consumers."
                      " Might be a list of words, delimited by dots.", "type": "string",
                      "default": "general", "maxLength": 255, "minLength": 1},
        },
    },
}
RUNNER_ALIASES = {"orchestra": "orquesta", "run-python": "python-script",
                  "run-local": "local-shell-cmd", "run-local-script": "local-shell-script"}

# The built-in core pack (what `st2 pack list` shows as core), as metadata documents.
BUILTIN_ACTIONS: Dict[str, List[Dict[str, Any]]] = {
    "core": [
        {"name": "noop", "runner_type": "noop", "description": "Action that does nothing",
         "parameters": {}},
        {"name": "echo", "runner_type": "local-shell-cmd",
         "description": "Action that executes the Linux echo command on the localhost.",
         "parameters": {
             "message": {"description": "The message that the command will echo.",
                         "type": "string", "required": True},
             "cmd": {"description": "Arbitrary Linux command to be executed on the local host.",
                     "required": True, "type": "string", "default": 'echo "{{message}}"',
                     "immutable": True},
             "kwarg_op": {"immutable": True},
             "sudo": {"default": False, "immutable": True},
             "sudo_password": {"immutable": True}}},
        {"name": "local", "runner_type": "local-shell-cmd",
         "description": "Action that executes an arbitrary Linux command on the localhost.",
         "parameters": {
             "cmd": {"description": "Arbitrary Linux command to be executed on the local host.",
                     "required": True, "type": "string"},
             "sudo": {"immutable": True}}},
        {"name": "ask", "runner_type": "inquirer",
         "description": "Action for initiating an Inquiry (usually in a workflow)",
         "parameters": {}},
        {"name": "inject_trigger", "runner_type": "python-script",
         "description": "Action which injects a new trigger in the system.",
         "parameters": {
             "trigger": {"type": "string", "description": "Trigger reference (e.g."
                         " mypack.my_trigger).", "required": False},
             "trigger_name": {"type": "string", "description": "Trigger reference.",
                              "required": False},
             "payload": {"type": "object", "description": "Trigger payload."},
             "trace_tag": {"type": "string", "description": "Optional trace tag.",
                           "required": False}}},
    ],
}

# Trigger types the runtime itself emits (st2's internal trigger types).
INTERNAL_TRIGGER_TYPES: Dict[str, Dict[str, Any]] = {
    "core.st2.generic.actiontrigger": {
        "description": "Trigger encapsulating the completion of an action execution.",
        "payload_schema": {"type": "object", "properties": {
            "execution_id": {}, "status": {}, "start_timestamp": {}, "action_name": {},
            "action_ref": {}, "runner_ref": {}, "parameters": {}, "result": {}}},
    },
    "core.st2.generic.notifytrigger": {
        "description": "Notification trigger.",
        "payload_schema": {"type": "object", "properties": {
            "execution_id": {}, "status": {}, "start_timestamp": {}, "end_timestamp": {},
            "action_ref": {}, "runner_ref": {}, "channel": {}, "route": {}, "message": {},
            "data": {}}},
    },
    "core.st2.generic.inquiry": {
        "description": "Trigger indicating a new \"inquiry\" has entered \"pending\" status",
        "payload_schema": {"type": "object", "properties": {
            "id": {"type": "string", "description": "ID of the new inquiry.", "required": True},
            "route": {"type": "string", "description": "An arbitrary value for allowing rules"
                      " to route to proper notification channel.", "required": True}},
            "additionalProperties": False},
    },
}

POLICY_TYPES: Dict[str, Dict[str, Any]] = {
    "action.concurrency": {
        "threshold": {"description": "Concurrency threshold.", "type": "integer",
                      "required": True},
        "action": {"description": "Which action to perform on the execution once the"
                   " concurrency threshold has been reached.", "type": "string",
                   "default": "delay", "enum": ["delay", "cancel"]},
    },
    "action.concurrency.attr": {
        "threshold": {"description": "Concurrency threshold.", "type": "integer",
                      "required": True},
        "action": {"description": "Which action to perform on the execution once the"
                   " concurrency threshold has been reached.", "type": "string",
                   "default": "delay", "enum": ["delay", "cancel"]},
        "attributes": {"description": "List of attributes by which to limit the concurrency.",
                       "type": "array", "uniqueItems": True,
                       "items": {"type": "string", "minLength": 1}},
    },
    "action.retry": {
        "retry_on": {"type": "string", "description": "Condition to retry on.",
                     "required": True, "enum": ["failure", "timeout"]},
        "max_retry_count": {"type": "integer", "description": "Maximum number of times to"
                            " retry before giving up.", "required": True, "minimum": 1,
                            "maximum": 5, "default": 2},
        "delay": {"type": "number", "description": "Number of seconds to wait before retrying"
                  " the execution.", "required": False, "minimum": 0, "maximum": 120},
    },
}

_NOTIFY_SUB = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "data": {"type": "object"},
        "routes": {"type": "array", "items": {"type": "string"}},
        "channels": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}

PACK_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "required": True},
        "ref": {"type": "string", "pattern": PACK_REF_REGEX},
        "description": {"type": "string", "required": True},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "version": {"type": "string", "pattern": PACK_VERSION_REGEX, "required": True},
        "stackstorm_version": {"type": "string", "pattern": ST2_VERSION_REGEX},
        "python_versions": {"type": "array", "items": {"type": "string", "enum": ["2", "3"]},
                            "minItems": 1, "maxItems": 2, "uniqueItems": True},
        "author": {"type": "string", "required": True},
        "email": {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+\.[^@\s]+$"},
        "contributors": {"type": "array", "items": {"type": "string", "maxLength": 100}},
        "files": {"type": "array", "items": {"type": "string"}},
        "dependencies": {"type": "array", "items": {"type": "string"}},
        "system": {"type": "object"},
        "path": {"type": "string"},
    },
    "additionalProperties": True,
}

ACTION_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "ref": {"type": "string"},
        "uid": {"type": "string"},
        "name": {"type": "string", "required": True},
        "description": {"type": "string"},
        "enabled": {"type": "boolean"},
        "runner_type": {"type": "string", "required": True},
        "entry_point": {"type": "string"},
        "pack": {"type": "string"},
        "parameters": {"type": "object"},
        "output_schema": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "object"}},
        "notify": {"type": "object", "properties": {
            "on-complete": _NOTIFY_SUB, "on-failure": _NOTIFY_SUB, "on-success": _NOTIFY_SUB},
            "additionalProperties": False},
        "metadata_file": {"type": "string"},
    },
    "additionalProperties": False,
}

ALIAS_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "ref": {"type": "string"},
        "uid": {"type": "string"},
        "name": {"type": "string", "required": True},
        "pack": {"type": "string"},
        "description": {"type": ["string", "null"]},
        "enabled": {"type": "boolean"},
        "action_ref": {"type": "string", "required": True},
        "formats": {"type": "array", "items": {"anyOf": [
            {"type": "string"},
            {"type": "object", "properties": {
                "display": {"type": "string"},
                "representation": {"type": "array", "items": {"type": "string"}},
                "match_multiple": {"type": "boolean"}}}]}},
        "ack": {"type": "object", "properties": {
            "enabled": {"type": "boolean"}, "format": {"type": "string"},
            "extra": {"type": "object"}, "append_url": {"type": "boolean"}}},
        "result": {"type": "object", "properties": {
            "enabled": {"type": "boolean"}, "format": {"type": "string"},
            "extra": {"type": "object"}}},
        "extra": {"type": "object"},
        "immutable_parameters": {"type": "object"},
        "metadata_file": {"type": "string"},
    },
    "additionalProperties": False,
}

RULE_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "ref": {"type": "string"},
        "uid": {"type": "string"},
        "name": {"type": "string", "required": True},
        "pack": {"type": "string"},
        "description": {"type": "string"},
        "type": {"type": "object", "properties": {"ref": {"type": "string", "required": True},
                                                  "parameters": {"type": "object"}}},
        "trigger": {"type": "object", "required": True, "properties": {
            "type": {"type": "string", "required": True},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
            "ref": {"type": "string"}}, "additionalProperties": True},
        "criteria": {"type": "object"},
        "action": {"type": "object", "required": True, "properties": {
            "ref": {"type": "string", "required": True},
            "description": {"type": "string"},
            "parameters": {"type": "object"}}, "additionalProperties": False},
        "enabled": {"type": "boolean"},
        "context": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "object"}},
        "metadata_file": {"type": "string"},
    },
    "additionalProperties": False,
}

POLICY_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "uid": {"type": "string"},
        "name": {"type": "string", "required": True},
        "pack": {"type": "string"},
        "ref": {"type": "string"},
        "description": {"type": "string"},
        "enabled": {"type": "boolean"},
        "resource_ref": {"type": "string", "required": True},
        "policy_type": {"type": "string", "required": True},
        "parameters": {"type": "object", "patternProperties": {r"^\w+$": {"anyOf": [
            {"type": "array"}, {"type": "boolean"}, {"type": "integer"}, {"type": "number"},
            {"type": "object"}, {"type": "string"}]}}, "additionalProperties": False},
        "metadata_file": {"type": "string"},
    },
    "additionalProperties": False,
}

TRIGGER_TYPE_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "required": True},
        "pack": {"type": "string"},
        "ref": {"type": "string"},
        "description": {"type": "string"},
        "payload_schema": {"type": "object"},
        "parameters_schema": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "object"}},
        "metadata_file": {"type": "string"},
    },
    "additionalProperties": False,
}


@dataclass
class Action:
    ref: str
    pack: str
    name: str
    runner_type: str
    parameters: Dict[str, Any]
    description: str = ""
    enabled: bool = True
    entry_point: Optional[str] = None
    notify: Optional[Dict[str, Any]] = None
    output_schema: Optional[Dict[str, Any]] = None
    metadata_file: str = ""
    pack_path: Optional[str] = None

    def runner(self) -> Dict[str, Any]:
        return RUNNERS[self.runner_type]

    def merged_parameters(self) -> Dict[str, Any]:
        """Runner parameters overridden by action parameters (what st2 validates against)."""
        merged = copy.deepcopy(self.runner()["runner_parameters"])
        for name, definition in self.parameters.items():
            if name in merged:
                merged[name].update(copy.deepcopy(definition))
            else:
                merged[name] = copy.deepcopy(definition)
        return merged

    def secret_parameters(self) -> List[str]:
        return [n for n, d in self.merged_parameters().items() if d.get("secret")]


@dataclass
class Alias:
    ref: str
    pack: str
    name: str
    action_ref: str
    formats: List[Any]
    enabled: bool = True
    description: Optional[str] = None
    ack: Dict[str, Any] = field(default_factory=dict)
    result: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    immutable_parameters: Dict[str, Any] = field(default_factory=dict)
    metadata_file: str = ""


@dataclass
class Rule:
    ref: str
    pack: str
    name: str
    trigger_type: str
    trigger_parameters: Dict[str, Any]
    criteria: Dict[str, Any]
    action_ref: str
    action_parameters: Dict[str, Any]
    enabled: bool = False
    description: str = ""
    metadata_file: str = ""


@dataclass
class Policy:
    ref: str
    pack: str
    name: str
    resource_ref: str
    policy_type: str
    parameters: Dict[str, Any]
    enabled: bool = True
    metadata_file: str = ""


@dataclass
class TriggerType:
    ref: str
    pack: str
    name: str
    description: str = ""
    payload_schema: Dict[str, Any] = field(default_factory=dict)
    parameters_schema: Dict[str, Any] = field(default_factory=dict)
    metadata_file: str = ""


@dataclass
class Pack:
    ref: str
    path: Optional[str]
    meta: Dict[str, Any]
    config_schema: Dict[str, Any] = field(default_factory=dict)
    actions: Dict[str, Action] = field(default_factory=dict)
    aliases: List[Alias] = field(default_factory=list)
    rules: List[Rule] = field(default_factory=list)
    policies: List[Policy] = field(default_factory=list)
    trigger_types: List[TriggerType] = field(default_factory=list)


# ---------------------------------------------------------------------------------- loading
def _read_yaml(path: Path, rel: str) -> Any:
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise MetadataError(rel, None, f"not valid YAML: {e}") from e
    except OSError as e:
        raise MetadataError(rel, None, f"cannot read: {e}") from e


def _metadata_files(pack_path: Path, subdir: str) -> List[Path]:
    directory = pack_path / subdir
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
    )


def _check_pack_field(doc: Dict[str, Any], pack_ref: str, rel: str) -> None:
    if doc.get("pack") not in (None, pack_ref):
        raise MetadataError(
            rel, "pack", f'model is in pack "{pack_ref}" but field "pack" is "{doc["pack"]}"'
        )


def _inside(pack_path: Path, candidate: Path) -> bool:
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


def load_pack(path: str) -> Pack:
    """Load and validate one pack directory (cross-references are checked by Registry)."""
    pack_path = Path(path).resolve()
    meta_file = pack_path / "pack.yaml"
    if not meta_file.is_file():
        raise MetadataError(str(meta_file), None, "pack.yaml is missing: not a pack directory")
    meta = _read_yaml(meta_file, str(meta_file))
    if not isinstance(meta, dict):
        raise MetadataError(str(meta_file), None, "must be a mapping")
    validate_document(str(meta_file), meta, PACK_SCHEMA)
    ref = meta.get("ref") or meta["name"]
    if not re.match(PACK_REF_REGEX, ref):
        raise MetadataError(
            str(meta_file),
            "ref",
            f'"{ref}" is not a valid pack ref (lowercase letters, digits and underscores);'
            ' set "ref" when "name" is not one',
        )
    pack = Pack(ref=ref, path=str(pack_path), meta=meta)

    def rel(p: Path) -> str:
        return str(p.relative_to(pack_path)) if _inside(pack_path, p) else str(p)

    def shown(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(p)

    schema_file = pack_path / "config.schema.yaml"
    if schema_file.is_file():
        schema = _read_yaml(schema_file, shown(schema_file)) or {}
        if not isinstance(schema, dict):
            raise MetadataError(shown(schema_file), None, "must be a mapping of attributes")
        for name, attr in schema.items():
            if not isinstance(attr, dict):
                raise MetadataError(shown(schema_file), name, "must be a mapping (a schema)")
            validate_document(shown(schema_file), attr, CONFIG_ATTRIBUTE_META_SCHEMA, name)
        pack.config_schema = schema

    for f in _metadata_files(pack_path, "actions"):
        action = _load_action(pack, pack_path, f, shown(f))
        if action.name in pack.actions:
            raise MetadataError(shown(f), "name", f'duplicate action name "{action.name}"')
        pack.actions[action.name] = action
    for f in _metadata_files(pack_path, "aliases"):
        pack.aliases.append(_load_alias(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "rules"):
        pack.rules.append(_load_rule(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "policies"):
        pack.policies.append(_load_policy(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "triggers"):
        doc = _read_yaml(f, shown(f))
        pack.trigger_types.append(_trigger_type(pack, doc, shown(f), ""))
    for f in _metadata_files(pack_path, "sensors"):
        doc = _read_yaml(f, shown(f)) or {}
        if not isinstance(doc, dict):
            raise MetadataError(shown(f), None, "must be a mapping")
        for i, tt in enumerate(doc.get("trigger_types") or []):
            pack.trigger_types.append(_trigger_type(pack, tt, shown(f), f"trigger_types[{i}]"))
    return pack


def _load_document(pack: Pack, f: Path, shown: str, schema: Dict[str, Any]) -> Dict[str, Any]:
    """A model's metadata file: a mapping valid against `schema`, in this pack (or no pack)."""
    doc = _read_yaml(f, shown)
    if not isinstance(doc, dict):
        raise MetadataError(shown, None, "must be a mapping")
    validate_document(shown, doc, schema)
    _check_pack_field(doc, pack.ref, shown)
    return doc


def _load_action(pack: Pack, pack_path: Path, f: Path, shown: str) -> Action:
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
        if not _inside(pack_path, candidate):
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


def _load_alias(pack: Pack, f: Path, shown: str) -> Alias:
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


def _load_rule(pack: Pack, f: Path, shown: str) -> Rule:
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


def _load_policy(pack: Pack, f: Path, shown: str) -> Policy:
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


def _trigger_type(pack: Pack, doc: Any, shown: str, prefix: str) -> TriggerType:
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


# Built-in packs with files (workflows, python actions), loaded like any pack.
BUILTIN_PACK_DIR = Path(__file__).resolve().parent / "builtin_packs"
BUILTIN_FILE_PACKS = ("chatops",)


def builtin_packs() -> List[Pack]:
    packs = [load_pack(str(BUILTIN_PACK_DIR / name)) for name in BUILTIN_FILE_PACKS]
    for ref, actions in BUILTIN_ACTIONS.items():
        pack = Pack(ref=ref, path=None, meta={"name": ref, "version": "3.9.0",
                                              "description": f"built-in {ref} pack"})
        for doc in actions:
            pack.actions[doc["name"]] = Action(
                ref=f"{ref}.{doc['name']}",
                pack=ref,
                name=doc["name"],
                runner_type=doc["runner_type"],
                parameters=copy.deepcopy(doc["parameters"]),
                description=doc["description"],
                metadata_file=f"<built-in {ref}>/{doc['name']}.yaml",
            )
        packs.append(pack)
    return packs


# ---------------------------------------------------------------------------------- registry
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
        from fleet_runtime.errors import NotFoundError

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

        shown = _workflow_shown(action)
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


def _workflow_shown(action: Action) -> str:
    if action.entry_point:
        try:
            return str(Path(action.entry_point).resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return action.entry_point
    return action.ref
