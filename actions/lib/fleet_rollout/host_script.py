"""The host-side script (playbooks/files/fleet_host.py), which the playbooks ship to each host,
loaded here as a module: its tables (the kernel settings' allow lists) are the pack's too, so
the check at plan time and the one on the host never differ."""
from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Optional

from fleet_rollout.paths import PLAYBOOK_DIR

PATH = os.path.join(PLAYBOOK_DIR, "files", "fleet_host.py")
_LOADED: Optional[ModuleType] = None


def load() -> ModuleType:
    global _LOADED
    if _LOADED is None:
        spec = importlib.util.spec_from_file_location("fleet_rollout_host_script", PATH)
        if spec is None or spec.loader is None:
            raise ImportError(f"{PATH}: the host script is missing")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED = module
    return _LOADED
