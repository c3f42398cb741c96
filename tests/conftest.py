"""Fixtures shared by test modules."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.st2api_support import RUNTIME_PACK, ST2API_PACK, St2Api

# Never the user's: a test that names no runtime home or host-vars cache of its own gets this
# process's private one (each xdist worker is its own process), removed at exit.
_PRIVATE = tempfile.mkdtemp(prefix="fleet-tests-")
atexit.register(shutil.rmtree, _PRIVATE, True)
os.environ["FLEET_ROLLOUT_HOME"] = os.path.join(_PRIVATE, "home")
os.environ["FLEET_ROLLOUT_CACHE_DIR"] = os.path.join(_PRIVATE, "cache")


@pytest.fixture
def st2_api(tmp_path: Path) -> Iterator[St2Api]:
    """The runtime's st2 API (and its engine) with the test packs, stopped by PID after."""
    server = St2Api(tmp_path, [RUNTIME_PACK, ST2API_PACK]).start()
    try:
        yield server
    finally:
        server.stop()


# Tests that boot QEMU guests (`make test` runs xdist workers in parallel, --dist loadgroup):
# the VM demo (6 guests, the longest test) has a worker of its own, the VM modules share another,
# so at most two VM workloads (about ten mostly idle TCG guests) run at once on the two cores.
VM_MODULES = ("test_hostside_vm.py", "test_lab_vm_boot.py")
VM_DEMO = "test_make_demo_end_to_end[vm]"


# The longest tests first (xdist hands work out in collection order): the VM demo alone takes
# 12-16 minutes here, so it must start at once for `make test` to end near its length.
LONG_FIRST = (VM_DEMO, "test_hostside_vm.py", "test_lab_vm_boot.py",
              "test_make_demo_end_to_end[sim]", "test_rollout_sim.py",
              "test_runtime_killresume.py", "test_st2api_rollout.py", "test_lab_chatops.py",
              "test_pack_approvals.py")


def _rank(item: Any) -> int:
    name = os.path.basename(str(item.fspath))
    for rank, mark in enumerate(LONG_FIRST):
        if item.name == mark or name == mark:
            return rank
    return len(LONG_FIRST)


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        name = os.path.basename(str(item.fspath))
        if item.name == VM_DEMO:
            item.add_marker(pytest.mark.xdist_group("vm-demo"))
        elif name in VM_MODULES:
            item.add_marker(pytest.mark.xdist_group("vm"))
    items.sort(key=_rank)  # stable: the rest keep their order
