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

Modules: metadata_schemas (st2's metadata file schemas), builtin_content (runner, policy and
internal trigger types, the core pack), resources (the dataclasses), documents (one metadata
file into one resource), loader (a pack directory, the built-in packs), registry (every loaded
pack, cross-references, workflow inspection). This package re-exports their public names.
"""
from __future__ import annotations

from fleet_runtime.packs.builtin_content import (
    BUILTIN_ACTIONS,
    DEFAULT_INQUIRY_SCHEMA,
    INTERNAL_TRIGGER_TYPES,
    POLICY_TYPES,
    RUNNER_ALIASES,
    RUNNER_PARAM_OVERRIDABLE_ATTRS,
    RUNNERS,
)
from fleet_runtime.packs.loader import (
    BUILTIN_FILE_PACKS,
    BUILTIN_PACK_DIR,
    builtin_packs,
    load_pack,
)
from fleet_runtime.packs.metadata_schemas import (
    ACTION_SCHEMA,
    ALIAS_SCHEMA,
    PACK_REF_REGEX,
    PACK_SCHEMA,
    PACK_VERSION_REGEX,
    POLICY_SCHEMA,
    RULE_SCHEMA,
    ST2_VERSION_REGEX,
    TRIGGER_TYPE_SCHEMA,
)
from fleet_runtime.packs.registry import Registry, alias_format_shape, workflow_shown
from fleet_runtime.packs.resources import Action, Alias, Pack, Policy, Rule, TriggerType

__all__ = [
    "ACTION_SCHEMA",
    "ALIAS_SCHEMA",
    "BUILTIN_ACTIONS",
    "BUILTIN_FILE_PACKS",
    "BUILTIN_PACK_DIR",
    "DEFAULT_INQUIRY_SCHEMA",
    "INTERNAL_TRIGGER_TYPES",
    "PACK_REF_REGEX",
    "PACK_SCHEMA",
    "PACK_VERSION_REGEX",
    "POLICY_SCHEMA",
    "POLICY_TYPES",
    "RULE_SCHEMA",
    "RUNNERS",
    "RUNNER_ALIASES",
    "RUNNER_PARAM_OVERRIDABLE_ATTRS",
    "ST2_VERSION_REGEX",
    "TRIGGER_TYPE_SCHEMA",
    "Action",
    "Alias",
    "Pack",
    "Policy",
    "Registry",
    "Rule",
    "TriggerType",
    "alias_format_shape",
    "builtin_packs",
    "load_pack",
    "workflow_shown",
]
