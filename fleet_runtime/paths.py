"""Where the runtime sits: the checkout it ships in (the fleet_rollout pack's root, when it is
there) and its built-in packs. The one place that computes them."""
from __future__ import annotations

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent
REPO_ROOT = RUNTIME_DIR.parent
BUILTIN_PACKS_DIR = RUNTIME_DIR / "builtin_packs"
