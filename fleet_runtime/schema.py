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

from fleet_runtime.runtime_errors import MetadataError


def _st2_meta_schema() -> Dict[str, Any]:
    """st2's custom.json (st2common/util/schema, st2 3.9): Draft 4's meta-schema, but
    `required` is a boolean on each property (Draft 3 style), plus secret, immutable, position;
    st2 drops its top-level additionalProperties, so other keywords pass. A
    schema with Draft 4's list `required: [x]` fails this check, so st2 refuses every instance
    validated against it (an inquiry answer: HTTP 400)."""
    meta = copy.deepcopy(Draft4Validator.META_SCHEMA)
    props = meta["properties"]
    props["required"] = {"type": "boolean", "default": False}
    props["secret"] = {"type": "boolean", "default": False}
    props["immutable"] = {"type": "boolean", "default": False}
    props["position"] = {"type": "number", "minimum": 0}
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


def _is_type(schema_type: Any, name: str) -> bool:
    return schema_type == name or (isinstance(schema_type, list) and name in schema_type)


def assign_default_values(instance: Any, schema: Dict[str, Any]) -> Any:
    """st2's assign_default_values (st2common/util/schema): fill the `default` of every property
    whose value is missing or None, into nested objects and array items; only where the schema
    says `type: object` (or `array`), and a default whose `dependencies` are unmet stays out."""
    instance = copy.deepcopy(instance)
    if isinstance(instance, dict) and schema.get("type") == "object":
        return _defaults_object(instance, schema)
    if isinstance(instance, list) and schema.get("type") == "array":
        return _defaults_array(instance, schema)
    return instance


def _defaults_nested(value: Any, schema: Dict[str, Any]) -> Any:
    if _is_type(schema.get("type"), "array"):
        return _defaults_array(value, schema)
    if _is_type(schema.get("type"), "object"):
        return _defaults_object(value, schema)
    return value


def _defaults_object(instance: Any, schema: Dict[str, Any]) -> Any:
    if not isinstance(instance, dict):
        return instance
    properties = schema.get("properties") or {}
    dependencies = schema.get("dependencies") or {}
    for name, prop in properties.items():
        use_default = "default" in prop
        if use_default and name in dependencies:
            use_default = all("default" in (properties.get(dep) or {}) or dep in instance
                              for dep in dependencies[name])
        if use_default and instance.get(name) is None:
            instance[name] = copy.deepcopy(prop.get("default"))
        if instance.get(name) is not None:
            instance[name] = _defaults_nested(instance[name], prop)
    return instance


def _defaults_array(instance: Any, schema: Dict[str, Any]) -> Any:
    if not isinstance(instance, list):
        return instance
    items = schema.get("items") or []
    item_schemas = [items] * len(instance) if isinstance(items, dict) else list(items)
    for index, item_schema in enumerate(item_schemas[:len(instance)]):
        if "default" in item_schema and instance[index] is None:
            instance[index] = copy.deepcopy(item_schema.get("default"))
        if instance[index] is not None:
            instance[index] = _defaults_nested(instance[index], item_schema)
    return instance


def _nullable(types: Any) -> bool:
    if isinstance(types, list):
        return any(t == "null" or (isinstance(t, dict) and t.get("type", "string") == "null")
                   for t in types)
    return isinstance(types, dict) and types.get("type", "string") == "null"


def allow_default_none(schema: Dict[str, Any]) -> Dict[str, Any]:
    """st2's modify_schema_allow_default_none: a property that is optional or defaults to None
    also accepts null. A property without a type counts as a string there (so it then accepts
    a string or null only), as in st2. Recurses into objects and object items of arrays."""
    schema = copy.deepcopy(schema)
    for name, prop in (schema.get("properties") or {}).items():
        optional = not prop.get("required", False)
        if (optional or "default" in prop) and prop.get("default") is None:
            if "anyOf" in prop:
                if not _nullable(prop["anyOf"]):
                    prop["anyOf"].append({"type": "null"})
            elif "oneOf" in prop:
                if not _nullable(prop["oneOf"]):
                    prop["oneOf"].append({"type": "null"})
            elif isinstance(prop.get("type", "string"), list):
                if not _nullable(prop["type"]):
                    prop["type"].append("null")
            elif not _nullable(prop):
                prop["type"] = [prop.get("type", "string"), "null"]
        items = prop.get("items") or {}
        if _is_type(prop.get("type"), "array") and isinstance(items, dict) and items.get(
                "properties"):
            prop["items"] = allow_default_none(items)
        if _is_type(prop.get("type"), "object") and prop.get("properties"):
            schema["properties"][name] = allow_default_none(prop)
    return schema


def validate_instance(
    instance: Any, schema: Dict[str, Any], use_default: bool = True, none_ok: bool = True
) -> Any:
    """Validate (and default) an instance like st2's util.schema.validate with CustomValidator
    (st2common/util/schema/__init__.py): null allowed for optional properties (none_ok, st2's
    allow_default_none), defaults assigned when the schema is `type: object`, then
    jsonschema.validate, which first checks the schema itself against st2's meta-schema
    (custom.json): a schema st2 cannot read (Draft 4's `required: [x]`) rejects every instance.
    Raises jsonschema.SchemaError or ValidationError."""
    if use_default and none_ok:
        schema = allow_default_none(schema)
    if use_default and schema.get("type") == "object" and isinstance(instance, dict):
        instance = assign_default_values(instance, schema)
    CustomValidator.check_schema(schema)
    errors = list(CustomValidator(schema).iter_errors(instance))
    if errors:
        errors.sort(key=lambda e: [str(p) for p in e.path])
        raise errors[0]
    return instance


def messages(error: ValidationError) -> List[str]:
    return [error.message]
