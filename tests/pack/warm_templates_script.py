"""Run by test_hostside_warm_templates.py in a process of its own (warm_templates.install changes
Ansible's classes for the whole process): renders the pack's playbook tasks with and without
the compiled-template cache and prints what it saw as JSON.

    python warm_templates_script.py cached|plain
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

from fleet_rollout.hostside import warm_templates
from fleet_rollout.paths import PACK_DIR

PLAYBOOKS = ("health.yml", "kernel.yml", "drain.yml", "undrain.yml", "drain_command.yml",
             "undrain_command.yml", "probe.yml", "counters.yml")
VARIABLES = {
    "fleet_host_script": str(Path(PACK_DIR) / "playbooks" / "files" / "fleet_host.py"),
    "fleet_collector_script": str(Path(PACK_DIR) / "playbooks" / "files" / "fleet_host.py"),
    "fleet_probe_binary": "/opt/probe dir/probe", "fleet_sysroot": "/srv/sys root",
    "fleet_kernel_action": "snapshot", "fleet_kernel_settings": {"sysctl": {"a.b": "1 2"}},
    "fleet_drain_method": "flag", "fleet_drain_argv": ["lb", "drain", "{host}"],
    "fleet_undrain_argv": ["lb", "undrain", "{host}"], "inventory_hostname": "lab-001",
}


def tasks(loader: DataLoader) -> list:
    manager = VariableManager(loader=loader, inventory=InventoryManager(loader, sources=[]))
    found = []
    for name in PLAYBOOKS:
        playbook = Playbook.load(str(Path(PACK_DIR) / "playbooks" / name),
                                 variable_manager=manager, loader=loader)
        for play in playbook.get_plays():
            for block in play.compile():
                found += [(name, task) for task in block.block if task.action != "meta"]
    return found


def render(loader: DataLoader, playbook: str, task) -> dict:
    changed = ["sysctl"] if playbook == "kernel.yml" else True  # what the host script prints
    variables = dict(VARIABLES, fleet_out={"rc": 0, "stdout": json.dumps({"changed": changed})})
    templar = Templar(loader=loader, variables=variables)
    args = {key: templar.template(value) for key, value in task.args.items()
            if key != "executable"}
    conditions = {attr: [templar.evaluate_conditional(c) for c in getattr(task, attr) or []]
                  for attr in warm_templates.CONDITIONALS}
    return {"args": args, "conditions": conditions}


def main(mode: str) -> int:
    init_plugin_loader()
    loader = DataLoader()
    seen: dict = {"rendered": {}, "precompiled": {}}
    if mode == "cached":
        assert warm_templates.install()
        warm_templates.begin_run()
    found = tasks(loader)
    if mode == "cached":
        for name, task in found:
            seen["precompiled"][f"{name}:{task.name}"] = warm_templates.precompile(task)
        seen["again"] = sum(warm_templates.precompile(task) for _name, task in found)
        seen["after_precompile"] = warm_templates.stats()
    for name, task in found:
        seen["rendered"][f"{name}:{task.name}"] = render(loader, name, task)
    if mode == "cached":
        seen["after_render"] = warm_templates.stats()
        warm_templates.begin_run()
        render(loader, *found[0])
        seen["next_run"] = warm_templates.stats()
    print(json.dumps(seen, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
