"""End-to-end tests: whole rollouts on the sim lab and the VMs, the demo, the st2 CLI against
the runtime's API, chat approvals. Each is marked `e2e` (`pytest -m "not e2e"` leaves them)."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
