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
