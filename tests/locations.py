"""Where the tests find the repository and their fixtures: the one place that knows the
layout (tests/<area>/test_*.py import these instead of counting parents of __file__)."""
from __future__ import annotations

from fleet_runtime.paths import REPO_ROOT

ROOT = REPO_ROOT  # the repository: the pack's root
FIXTURES = ROOT / "tests" / "fixtures"
