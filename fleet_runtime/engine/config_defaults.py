"""The defaults StackStorm gives a pack config when an action runs (st2common's
ContentPackConfigLoader, after the dynamic values): every schema item with a `default` that the
config lacks gets it, and an object item with `properties`, `patternProperties` or an object
`additionalProperties` (an array item with `items` or `additionalItems`) that is missing or
empty becomes {} ([]) and gets its own items' defaults, however deep. So a config without a
section still holds that section's defaults."""
from __future__ import annotations

import re
from typing import Any, Dict, List


def with_defaults(schema: Dict[str, Any], config: Dict[str, Any]) -> Dict[str, Any]:
    """`config` (changed in place) with the defaults of `schema` (its top-level items)."""
    _fill(schema, config)
    return config


def _fill(schema: Any, config: Any) -> None:
    items = schema.items() if isinstance(schema, dict) else enumerate(schema)
    for key, item in items:
        if not isinstance(item, dict):
            continue
        present = key in config if isinstance(config, dict) else key < len(config)
        if "default" in item and not present and isinstance(config, dict):
            config[key] = item["default"]
        try:
            value = config[key]
        except (KeyError, IndexError, TypeError):
            value = None
        kind = item.get("type")
        if kind == "object" and (item.get("properties") or item.get("patternProperties")
                                 or item.get("additionalProperties")):
            if not value:
                value = {}
                _put(config, key, value)
            if isinstance(value, dict):
                _fill(object_item_schemas(item, list(value)), value)
        elif kind == "array" and (item.get("items") or item.get("additionalItems")):
            if not value:
                value = []
                _put(config, key, value)
            if isinstance(value, list):
                _fill(array_item_schemas(item, len(value)), value)


def _put(config: Any, key: Any, value: Any) -> None:
    if isinstance(config, dict) or (isinstance(config, list) and key < len(config)):
        config[key] = value


def object_item_schemas(schema: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
    """Each key's schema: `properties` first, then the matching `patternProperties` (merged),
    then an object `additionalProperties`."""
    out: Dict[str, Any] = {key: {} for key in keys}
    properties = schema.get("properties") or {}
    out.update(properties)
    extra = [k for k in keys if k not in properties]
    patterns = schema.get("patternProperties") or {}
    if isinstance(patterns, dict):
        for key in list(extra):
            matched: Dict[str, Any] = {}
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched.update(sub)
            if matched:
                out[key] = matched
                extra.remove(key)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict) and additional:
        for key in extra:
            out[key] = additional
    return out


def array_item_schemas(schema: Dict[str, Any], count: int) -> List[Any]:
    """Each item's schema: one `items` schema for all, or positional `items` then
    `additionalItems`."""
    items = schema.get("items") or []
    if isinstance(items, dict):
        return [items] * count
    out = list(items)
    additional = schema.get("additionalItems")
    if len(out) < count and isinstance(additional, dict) and additional:
        out.extend([additional] * (count - len(out)))
    return out
