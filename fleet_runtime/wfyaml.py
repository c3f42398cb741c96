"""Workflow definitions parsed the way StackStorm's orquesta (1.3 and later) parses them.

orquesta's orquesta/utils/yml.py replaces PyYAML's SafeLoader mapping constructor with one that
refuses duplicate keys and does not flatten merge keys, so `<<: *anchor` fails with "could not
determine a constructor for the tag 'tag:yaml.org,2002:merge'" and a duplicate key with "found
duplicate key". Anchors and aliases without merge keys still load. PyPI's orquesta 1.2.0 uses
plain yaml.safe_load, which accepts both: this module gives the runtime the strict behaviour
without touching PyYAML's global loaders.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml import constructor, nodes


class StrictWorkflowLoader(yaml.SafeLoader):
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
        return yaml.load(text, StrictWorkflowLoader)
    except Exception as e:
        raise ValueError(f"Failed to load workflow definition because {e}.") from None
