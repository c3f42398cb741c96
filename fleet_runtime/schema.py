"""JSON schema handling the way StackStorm does it (on jsonschema 2.6, Draft 4).

st2 validates with a custom validator: Draft 4 keywords, but the Draft 3 `properties` keyword so
that `required: true` sits inside each property. Metadata files are checked against meta-schemas
of the same shape as st2's (action parameters: a closed set of keywords plus `required`,
`secret`, `immutable`, `position`).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Optional

from jsonschema import Draft3Validator, Draft4Validator, ValidationError
from jsonschema.validators import create

from fleet_runtime.errors import MetadataError


def _st2_meta_schema() -> Dict[str, Any]:
    """st2's custom.json (st2common/util/schema): Draft 4's meta-schema, but `required` is a
    boolean on each property (Draft 3 style), plus secret, immutable, position and format. A
    schema with Draft 4's list `required: [x]` fails this check, so st2 refuses every instance
    validated against it (an inquiry answer: HTTP 400)."""
    meta = copy.deepcopy(Draft4Validator.META_SCHEMA)
    props = meta["properties"]
    props["required"] = {"type": "boolean", "default": False}
    props["secret"] = {"type": "boolean", "default": False}
    props["immutable"] = {"type": "boolean", "default": False}
    props["position"] = {"type": "number", "minimum": 0}
    props["format"] = {"type": "string"}
    return meta


CustomValidator = create(
    meta_schema=_st2_meta_schema(),
    validators={
        **{k: v for k, v in Draft4Validator.VALIDATORS.items() if k != "required"},
        "properties": Draft3Validator.VALIDATORS["properties"],
    },
    version="st2-custom",
)

_SIMPLE_TYPES = ["array", "boolean", "integer", "null", "number", "object", "string"]

# Meta-schema of one action parameter / config attribute (recursive through "#").
PARAMETER_META_SCHEMA: Dict[str, Any] = {
    "definitions": {
        "schemaArray": {"type": "array", "minItems": 1, "items": {"$ref": "#"}},
        "positiveInteger": {"type": "integer", "minimum": 0},
        "simpleTypes": {"enum": _SIMPLE_TYPES},
        "stringArray": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "uniqueItems": True,
        },
    },
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "$schema": {"type": "string"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "default": {},
        "multipleOf": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "maximum": {"type": "number"},
        "exclusiveMaximum": {"type": "boolean"},
        "minimum": {"type": "number"},
        "exclusiveMinimum": {"type": "boolean"},
        "maxLength": {"$ref": "#/definitions/positiveInteger"},
        "minLength": {"$ref": "#/definitions/positiveInteger"},
        "pattern": {"type": "string"},
        "format": {"type": "string"},
        "additionalItems": {"anyOf": [{"type": "boolean"}, {"$ref": "#"}]},
        "items": {"anyOf": [{"$ref": "#"}, {"$ref": "#/definitions/schemaArray"}]},
        "maxItems": {"$ref": "#/definitions/positiveInteger"},
        "minItems": {"$ref": "#/definitions/positiveInteger"},
        "uniqueItems": {"type": "boolean"},
        "maxProperties": {"$ref": "#/definitions/positiveInteger"},
        "minProperties": {"$ref": "#/definitions/positiveInteger"},
        "required": {"type": "boolean"},
        "secret": {"type": "boolean"},
        "additionalProperties": {"anyOf": [{"type": "boolean"}, {"$ref": "#"}]},
        "definitions": {"type": "object", "additionalProperties": {"$ref": "#"}},
        "properties": {"type": "object", "additionalProperties": {"$ref": "#"}},
        "patternProperties": {"type": "object", "additionalProperties": {"$ref": "#"}},
        "dependencies": {
            "type": "object",
            "additionalProperties": {
                "anyOf": [{"$ref": "#"}, {"$ref": "#/definitions/stringArray"}]
            },
        },
        "enum": {"type": "array", "minItems": 1, "uniqueItems": True},
        "type": {"$ref": "#/definitions/simpleTypes"},
        "position": {"type": "number", "minimum": 0},
        "immutable": {"type": "boolean"},
        "allOf": {"$ref": "#/definitions/schemaArray"},
        "anyOf": {"$ref": "#/definitions/schemaArray"},
        "oneOf": {"$ref": "#/definitions/schemaArray"},
        "not": {"$ref": "#"},
    },
    "dependencies": {"exclusiveMaximum": ["maximum"], "exclusiveMinimum": ["minimum"]},
    "additionalProperties": False,
}

# Config attributes may use a list of types and Draft 4 style nested schemas (st2's "custom").
CONFIG_ATTRIBUTE_META_SCHEMA: Dict[str, Any] = copy.deepcopy(PARAMETER_META_SCHEMA)
CONFIG_ATTRIBUTE_META_SCHEMA["properties"]["type"] = {
    "anyOf": [
        {"$ref": "#/definitions/simpleTypes"},
        {"type": "array", "items": {"$ref": "#/definitions/simpleTypes"}, "minItems": 1},
    ]
}


def error_path(error: ValidationError) -> str:
    parts = [str(p) for p in error.path]
    return ".".join(parts)


def _best_error(errors: Iterable[ValidationError]) -> Optional[ValidationError]:
    errors = sorted(errors, key=lambda e: (len(list(e.path)), str(e.message)))
    if not errors:
        return None
    # Prefer the deepest, most specific error (anyOf errors carry their context).
    best = errors[-1]
    while best.context:
        best = sorted(best.context, key=lambda e: (len(list(e.path)), str(e.message)))[-1]
    return best


def validate_document(path: str, document: Any, schema: Dict[str, Any], prefix: str = "") -> None:
    """Validate a metadata document; raise MetadataError naming file and field."""
    validator = CustomValidator(schema)
    errors = list(validator.iter_errors(document))
    if not errors:
        return
    errors.sort(key=lambda e: [str(p) for p in e.path])
    error = errors[0]
    field = error_path(error)
    if error.context:
        deeper = _best_error(error.context)
        if deeper is not None:
            sub = error_path(deeper)
            field = ".".join(x for x in (field, sub) if x)
            error = deeper
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    raise MetadataError(path, field or None, error.message)


def validate_parameter_definitions(path: str, params: Any, prefix: str = "parameters") -> None:
    if params is None:
        return
    if not isinstance(params, dict):
        raise MetadataError(path, prefix, "must be a mapping of parameter name to schema")
    for name, definition in params.items():
        if not isinstance(name, str) or not name.replace("_", "a").isalnum():
            raise MetadataError(path, f"{prefix}.{name}", "parameter names must match ^\\w+$")
        if not isinstance(definition, dict):
            raise MetadataError(path, f"{prefix}.{name}", "must be a mapping (a JSON schema)")
        validate_document(path, definition, PARAMETER_META_SCHEMA, prefix=f"{prefix}.{name}")


def assign_default_values(instance: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    """Fill defaults for missing / None properties, recursing into objects and arrays."""
    instance = copy.deepcopy(instance)
    if not isinstance(instance, dict):
        return instance
    for name, prop in (schema.get("properties") or {}).items():
        if "default" in prop and instance.get(name) is None:
            instance[name] = copy.deepcopy(prop["default"])
        value = instance.get(name)
        if value is None:
            continue
        ptype = prop.get("type")
        if (ptype == "object" or (isinstance(ptype, list) and "object" in ptype)) and isinstance(
            value, dict
        ):
            instance[name] = assign_default_values(value, prop)
        elif isinstance(value, list) and isinstance(prop.get("items"), dict):
            item_schema = prop["items"]
            instance[name] = [
                assign_default_values(v, item_schema) if isinstance(v, dict) else v
                for v in value
            ]
    return instance


def allow_default_none(schema: Dict[str, Any]) -> Dict[str, Any]:
    """Optional properties (or ones defaulting to None) also accept null, like st2."""
    schema = copy.deepcopy(schema)
    for prop in (schema.get("properties") or {}).values():
        optional = not prop.get("required", False)
        if (optional or "default" in prop) and prop.get("default") is None:
            if "anyOf" in prop:
                if not any(s.get("type") == "null" for s in prop["anyOf"]):
                    prop["anyOf"].append({"type": "null"})
            elif "oneOf" in prop:
                if not any(s.get("type") == "null" for s in prop["oneOf"]):
                    prop["oneOf"].append({"type": "null"})
            elif isinstance(prop.get("type"), list):
                if "null" not in prop["type"]:
                    prop["type"].append("null")
            elif "type" in prop:
                prop["type"] = [prop["type"], "null"]
        if prop.get("type") == "object" or (
            isinstance(prop.get("type"), list) and "object" in prop["type"]
        ):
            if prop.get("properties"):
                nested = allow_default_none(prop)
                prop["properties"] = nested["properties"]
    return schema


def validate_instance(
    instance: Any, schema: Dict[str, Any], use_default: bool = True, none_ok: bool = True
) -> Any:
    """Validate (and default) an instance like st2's util.schema.validate: the schema itself is
    checked against st2's meta-schema first (jsonschema.validate does that), so a schema st2
    cannot read rejects every instance. Raises jsonschema.SchemaError or ValidationError."""
    CustomValidator.check_schema(schema)
    if use_default:
        instance = assign_default_values(instance, schema)
    if none_ok:
        schema = allow_default_none(schema)
    errors = list(CustomValidator(schema).iter_errors(instance))
    if errors:
        errors.sort(key=lambda e: [str(p) for p in e.path])
        raise errors[0]
    return instance


def messages(error: ValidationError) -> List[str]:
    return [error.message]
