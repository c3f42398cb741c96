"""st2's metadata file schemas as plain data: pack.yaml and the action, alias, rule, policy and
trigger type files (Draft 3 style `required`, as st2's models declare them)."""
from __future__ import annotations

from typing import Any, Dict

PACK_REF_REGEX = r"^[a-z0-9_]+$"
PACK_VERSION_REGEX = (
    r"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-[\da-z\-]+(?:\.[\da-z\-]+)*)?"
    r"(?:\+[\da-z\-]+(?:\.[\da-z\-]+)*)?$"
)
ST2_VERSION_REGEX = r"^((>?>|>=|=|<=|<?<)\s*[0-9]+\.[0-9]+\.[0-9]+?(\s*,)?\s*)+$"

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
