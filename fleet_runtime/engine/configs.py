"""Pack configs: loading `configs/<pack>.yaml` of the runtime home, validating it against
the pack's config schema (defaults applied), rendering dynamic (`{{ st2kv... }}`) values,
and noting which config paths are secret.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List

from fleet_runtime import templating
from fleet_runtime.engine.config_defaults import (
    array_item_schemas,
    object_item_schemas,
    with_defaults,
)
from fleet_runtime.engine.model import EngineState
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.schema import validate_instance


class ConfigsMixin(EngineState):
    """Loaded, validated and rendered pack configs (cached per pack)."""

    # ================================================================== configs
    def pack_config(self, pack_ref: str) -> Dict[str, Any]:
        if pack_ref in self._configs:
            return self._configs[pack_ref]
        pack = self.registry.packs.get(pack_ref)
        schema = pack.config_schema if pack else {}
        path = self.home.pack_config_path(pack_ref)
        shown = str(path)
        config: Dict[str, Any] = {}
        exists = path.exists()
        if exists:
            import yaml

            try:
                config = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError as e:
                raise MetadataError(shown, None, f"not valid YAML: {e}") from e
            if not isinstance(config, dict):
                raise MetadataError(shown, None, "a pack config must be a mapping")
        if schema:
            # st2 validates the config file as written (its registration: models/api/pack.py
            # ConfigAPI, util/pack.py validate_config_against_schema), before dynamic values
            # are rendered (util/config_loader.py, when an action runs)
            full = {"type": "object", "properties": copy.deepcopy(schema),
                    "additionalProperties": False}
            if exists:
                try:
                    config = validate_instance(config, full, use_default=True, none_ok=True)
                except Exception as e:
                    where = ".".join(str(p) for p in getattr(e, "path", []))
                    raise MetadataError(shown, where or None,
                                        getattr(e, "message", str(e))) from e
                _refuse_decrypt_kv_on_secrets(schema, config, shown)
            else:
                from fleet_runtime.schema import assign_default_values

                config = assign_default_values(config, full)
        config = self._render_dynamic_config(config, shown, {"properties": schema or {}})
        if schema:  # as st2's config loader gives it to an action: every section's defaults
            config = with_defaults(schema, config)
        self._configs[pack_ref] = config
        self._config_secrets[pack_ref] = _secret_paths(schema)
        return config

    def _render_dynamic_config(self, value: Any, shown: str, schema: Any,
                               path: str = "") -> Any:
        """`value` with its `{{ st2kv... }}` strings rendered, as st2's config loader renders
        them for an action: a field marked `secret: true` names an encrypted datastore key,
        whose value it gets decrypted (util/config_loader.py, services/config.py
        deserialize_key_value)."""
        if isinstance(value, dict):
            items = object_item_schemas(schema, list(value))
            return {k: self._render_dynamic_config(v, shown, items.get(k) or {},
                                                   f"{path}.{k}".strip("."))
                    for k, v in value.items()}
        if isinstance(value, list):
            items = array_item_schemas(schema, len(value))
            return [self._render_dynamic_config(v, shown, items[i] if i < len(items) else {},
                                                f"{path}[{i}]")
                    for i, v in enumerate(value)]
        if isinstance(value, str) and templating.is_jinja_expression(value):
            try:
                rendered = templating.render(value, {"st2kv": templating.kv_context(self.user)})
            except Exception as e:
                raise MetadataError(shown, path, f"cannot render dynamic value: {e}") from e
            if rendered and schema.get("secret"):
                try:
                    return templating.decrypt_kv(rendered)
                except Exception:
                    raise MetadataError(
                        shown, path, "a secret field's datastore value must be a key stored "
                        "encrypted (st2 key set --encrypt): StackStorm decrypts it") from None
            return rendered
        return value


def _refuse_decrypt_kv_on_secrets(schema: Dict[str, Any], config: Dict[str, Any],
                                  shown: str) -> None:
    """st2 refuses to register a config whose top-level secret field pipes its datastore
    reference through decrypt_kv (util/pack.py validate_config_against_schema): it decrypts
    such a field itself."""
    for key, value in config.items():
        if (templating.is_jinja_expression(value) and "decrypt_kv" in value
                and isinstance(schema.get(key), dict) and schema[key].get("secret")):
            raise MetadataError(
                shown, key, 'a field marked "secret: true" is decrypted by StackStorm: '
                '"decrypt_kv" is not allowed in it (write {{ st2kv.system.NAME }})')


def _secret_paths(schema: Dict[str, Any], prefix: str = "") -> List[str]:
    out = []
    for name, attr in (schema or {}).items():
        if not isinstance(attr, dict):
            continue
        path = f"{prefix}.{name}" if prefix else name
        if attr.get("secret"):
            out.append(path)
        out.extend(_secret_paths(attr.get("properties") or {}, path))
        if isinstance(attr.get("additionalProperties"), dict):
            out.extend(_secret_paths(attr["additionalProperties"].get("properties") or {},
                                     path + ".*"))
    return out
