"""Pack configs: loading `configs/<pack>.yaml` of the runtime home, validating it against
the pack's config schema (defaults applied), rendering dynamic (`{{ st2kv... }}`) values,
and noting which config paths are secret.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List

from fleet_runtime import templating
from fleet_runtime.engine.config_defaults import with_defaults
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
            else:
                from fleet_runtime.schema import assign_default_values

                config = assign_default_values(config, full)
        config = self._render_dynamic_config(config, shown)
        if schema:  # as st2's config loader gives it to an action: every section's defaults
            config = with_defaults(schema, config)
        self._configs[pack_ref] = config
        self._config_secrets[pack_ref] = _secret_paths(schema)
        return config

    def _render_dynamic_config(self, value: Any, shown: str, path: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self._render_dynamic_config(v, shown, f"{path}.{k}".strip("."))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self._render_dynamic_config(v, shown, f"{path}[{i}]")
                    for i, v in enumerate(value)]
        if isinstance(value, str) and templating.is_jinja_expression(value):
            try:
                return templating.render(value, {"st2kv": templating.kv_context(self.user)})
            except Exception as e:
                raise MetadataError(shown, path, f"cannot render dynamic value: {e}") from e
        return value


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
