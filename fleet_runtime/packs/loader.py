"""Loading one pack directory the way st2 registers it (pack.yaml, config.schema.yaml, then
every metadata file of actions/, aliases/, rules/, policies/, triggers/, sensors/), and the
built-in packs (core from data, the file packs under fleet_runtime/builtin_packs)."""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import List

from fleet_runtime.packs.builtin_content import BUILTIN_ACTIONS
from fleet_runtime.packs.documents import (
    inside_pack,
    load_action,
    load_alias,
    load_policy,
    load_rule,
    load_trigger_type,
    read_yaml,
)
from fleet_runtime.packs.metadata_schemas import PACK_REF_REGEX, PACK_SCHEMA
from fleet_runtime.packs.resources import Action, Pack
from fleet_runtime.paths import BUILTIN_PACKS_DIR
from fleet_runtime.runtime_errors import MetadataError
from fleet_runtime.schema import CONFIG_ATTRIBUTE_META_SCHEMA, validate_document


def _metadata_files(pack_path: Path, subdir: str) -> List[Path]:
    directory = pack_path / subdir
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
    )


def load_pack(path: str) -> Pack:
    """Load and validate one pack directory (cross-references are checked by Registry)."""
    pack_path = Path(path).resolve()
    meta_file = pack_path / "pack.yaml"
    if not meta_file.is_file():
        raise MetadataError(str(meta_file), None, "pack.yaml is missing: not a pack directory")
    meta = read_yaml(meta_file, str(meta_file))
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
        return str(p.relative_to(pack_path)) if inside_pack(pack_path, p) else str(p)

    def shown(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(p)

    schema_file = pack_path / "config.schema.yaml"
    if schema_file.is_file():
        schema = read_yaml(schema_file, shown(schema_file)) or {}
        if not isinstance(schema, dict):
            raise MetadataError(shown(schema_file), None, "must be a mapping of attributes")
        for name, attr in schema.items():
            if not isinstance(attr, dict):
                raise MetadataError(shown(schema_file), name, "must be a mapping (a schema)")
            validate_document(shown(schema_file), attr, CONFIG_ATTRIBUTE_META_SCHEMA, name)
        pack.config_schema = schema

    for f in _metadata_files(pack_path, "actions"):
        action = load_action(pack, pack_path, f, shown(f))
        if action.name in pack.actions:
            raise MetadataError(shown(f), "name", f'duplicate action name "{action.name}"')
        pack.actions[action.name] = action
    for f in _metadata_files(pack_path, "aliases"):
        pack.aliases.append(load_alias(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "rules"):
        pack.rules.append(load_rule(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "policies"):
        pack.policies.append(load_policy(pack, f, shown(f)))
    for f in _metadata_files(pack_path, "triggers"):
        doc = read_yaml(f, shown(f))
        pack.trigger_types.append(load_trigger_type(pack, doc, shown(f), ""))
    for f in _metadata_files(pack_path, "sensors"):
        doc = read_yaml(f, shown(f)) or {}
        if not isinstance(doc, dict):
            raise MetadataError(shown(f), None, "must be a mapping")
        for i, tt in enumerate(doc.get("trigger_types") or []):
            pack.trigger_types.append(load_trigger_type(pack, tt, shown(f), f"trigger_types[{i}]"))
    return pack


# Built-in packs with files (workflows, python actions), loaded like any pack.
BUILTIN_PACK_DIR = BUILTIN_PACKS_DIR
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
