"""Where the tests find the repository and their fixtures: the one place that knows the
layout (tests/<area>/test_*.py import these instead of counting parents of __file__)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: the pack's root
FIXTURES = ROOT / "tests" / "fixtures"
