"""The registered resources of a pack (st2's models): Action, Alias, Rule, Policy, TriggerType
and the Pack holding them."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from fleet_runtime.packs.builtin_content import RUNNERS


@dataclass
class Action:
    ref: str
    pack: str
    name: str
    runner_type: str
    parameters: Dict[str, Any]
    description: str = ""
    enabled: bool = True
    entry_point: Optional[str] = None
    notify: Optional[Dict[str, Any]] = None
    output_schema: Optional[Dict[str, Any]] = None
    metadata_file: str = ""
    pack_path: Optional[str] = None

    def runner(self) -> Dict[str, Any]:
        return RUNNERS[self.runner_type]

    def merged_parameters(self) -> Dict[str, Any]:
        """Runner parameters overridden by action parameters (what st2 validates against)."""
        merged = copy.deepcopy(self.runner()["runner_parameters"])
        for name, definition in self.parameters.items():
            if name in merged:
                merged[name].update(copy.deepcopy(definition))
            else:
                merged[name] = copy.deepcopy(definition)
        return merged

    def secret_parameters(self) -> List[str]:
        return [n for n, d in self.merged_parameters().items() if d.get("secret")]


@dataclass
class Alias:
    ref: str
    pack: str
    name: str
    action_ref: str
    formats: List[Any]
    enabled: bool = True
    description: Optional[str] = None
    ack: Dict[str, Any] = field(default_factory=dict)
    result: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    immutable_parameters: Dict[str, Any] = field(default_factory=dict)
    metadata_file: str = ""


@dataclass
class Rule:
    ref: str
    pack: str
    name: str
    trigger_type: str
    trigger_parameters: Dict[str, Any]
    criteria: Dict[str, Any]
    action_ref: str
    action_parameters: Dict[str, Any]
    enabled: bool = False
    description: str = ""
    metadata_file: str = ""


@dataclass
class Policy:
    ref: str
    pack: str
    name: str
    resource_ref: str
    policy_type: str
    parameters: Dict[str, Any]
    enabled: bool = True
    metadata_file: str = ""


@dataclass
class TriggerType:
    ref: str
    pack: str
    name: str
    description: str = ""
    payload_schema: Dict[str, Any] = field(default_factory=dict)
    parameters_schema: Dict[str, Any] = field(default_factory=dict)
    metadata_file: str = ""


@dataclass
class Pack:
    ref: str
    path: Optional[str]
    meta: Dict[str, Any]
    config_schema: Dict[str, Any] = field(default_factory=dict)
    actions: Dict[str, Action] = field(default_factory=dict)
    aliases: List[Alias] = field(default_factory=list)
    rules: List[Rule] = field(default_factory=list)
    policies: List[Policy] = field(default_factory=list)
    trigger_types: List[TriggerType] = field(default_factory=list)
