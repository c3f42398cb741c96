"""Workflow definitions parsed the way StackStorm's orquesta (1.4 and later, st2 3.9) parses them.

orquesta/utils/yml.py (used by orquesta/specs/base.py, specs/native/v1/models.py and
utils/specs.py for every definition given as text) replaces the mapping constructor of PyYAML's
SafeLoader (CSafeLoader when libyaml is there) with one that refuses duplicate keys and does not
flatten merge keys. So `<<: *anchor` fails with "could not determine a constructor for the tag
'tag:yaml.org,2002:merge'" and a duplicate key with 'found duplicate key "x"', both wrapped as
"Failed to load workflow definition because ...". Anchors and aliases without merge keys load.

st2 does not parse workflows when it registers a pack (st2common/bootstrap/actionsregistrar.py):
the error comes when the orquesta runner starts the workflow (services/workflows.py request ->
spec_module.instantiate), and the execution fails with it. PyPI's orquesta 1.2.0 uses plain
yaml.safe_load, which accepts both; this module gives the runtime orquesta 1.6's loader without
touching PyYAML's global loaders.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml import constructor, nodes

# PyYAML's C safe loader when libyaml is there: what orquesta reads workflows with and st2 pack
# metadata (st2common constants/meta.py yaml_safe_load)
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictWorkflowLoader(SAFE_LOADER):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if not isinstance(node, nodes.MappingNode):
            raise constructor.ConstructorError(
                None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
        mapping = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError as exc:
                raise constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found unacceptable key ({exc})", key_node.start_mark) from None
            if key in mapping:
                raise constructor.ConstructorError(f'found duplicate key "{key_node.value}"')
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


StrictWorkflowLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                     StrictWorkflowLoader.construct_mapping)


def load_definition(text: str) -> Any:
    """Parse a workflow definition; raises ValueError with orquesta's wording."""
    try:
        return yaml.load(text, StrictWorkflowLoader)  # a safe (C) loader
    except Exception as e:
        raise ValueError(f"Failed to load workflow definition because {e}.") from None
