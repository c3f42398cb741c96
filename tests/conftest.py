"""Fixtures shared by test modules."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.st2api_support import RUNTIME_PACK, ST2API_PACK, St2Api


@pytest.fixture
def st2_api(tmp_path: Path) -> Iterator[St2Api]:
    """The runtime's st2 API (and its engine) with the test packs, stopped by PID after."""
    server = St2Api(tmp_path, [RUNTIME_PACK, ST2API_PACK]).start()
    try:
        yield server
    finally:
        server.stop()
