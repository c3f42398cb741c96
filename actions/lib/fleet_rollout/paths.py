"""Where the pack's own files are: its directory (the one with pack.yaml) and what is in it.

The one place that knows where this library sits in the pack (actions/lib/fleet_rollout/):
everything else asks here, so moving the library moves one line.
"""
from __future__ import annotations

import os

LIBRARY_DIR = os.path.dirname(os.path.abspath(__file__))  # actions/lib/fleet_rollout
LIB_DIR = os.path.dirname(LIBRARY_DIR)  # actions/lib: what st2 puts on the python path
PACK_DIR = os.path.dirname(os.path.dirname(LIB_DIR))
PROFILES_DIR = os.path.join(PACK_DIR, "profiles")
PLAYBOOK_DIR = os.path.join(PACK_DIR, "playbooks")
PROBE_DIR = os.path.join(PACK_DIR, "probe")


def private_dir(path: str) -> str:
    """`path` as a directory only its owner can read (0700), created if missing: the action
    runner's local caches (host variables, rendered reports) under the pack's state_dir."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
