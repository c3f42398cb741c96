"""Fixtures shared by test modules."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.process_support import BASE_NICE, LOWER_PRIORITY, set_nice
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


# The modules that boot QEMU guests share one xdist worker (`make test` runs workers in parallel,
# --dist loadgroup): their guests are booted once per module (module-scoped fixtures), not once
# per worker that draws one of their tests, and at most one of them runs beside the VM demo
# (CPU-bound TCG guests on two cores). The VM demo is not in their group: behind them on one
# worker it would make the suite's critical path longer than the suite.
VM_MODULES = ("test_hostside_vm.py", "test_lab_vm_boot.py", "test_lab_vm_grub.py")


@pytest.fixture(scope="module", autouse=True)
def _cpu_share(request: pytest.FixtureRequest) -> None:
    """The VM modules' tests (their guests are booted by module fixtures, after this autouse one)
    at the session's priority, every other module's below it (tests/process_support.py); the
    VM demo raises its own subprocess back (tests/e2e/test_demo.py)."""
    name = os.path.basename(str(request.node.fspath))
    set_nice(BASE_NICE if name in VM_MODULES else BASE_NICE + LOWER_PRIORITY)


# tryfirst: xdist's own hook (--dist loadgroup) reads the xdist_group marks to name each test's
# group, so the marks must be on the items before it runs; added after, they are ignored
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list) -> None:
    # Run order by module name, whatever its directory (tests/pack, runtime, lab, e2e): the
    # end-to-end modules mix with the fast ones across the xdist workers instead of all
    # starting at once beside the VM demo (all of them at once load two cores so much that the
    # VMs' receivers drop alike under every BIOS setting and the demo's verdicts change). The
    # VM group does not start first: the VM demo would then have the whole mix of other tests
    # beside it for its whole run. The sim demo runs first and the VM demo after it on the same
    # worker (a worker starts a test once it holds the next one).
    items.sort(key=lambda item: os.path.basename(str(item.fspath)))
    for item in items:
        name = os.path.basename(str(item.fspath))
        if name in VM_MODULES:
            item.add_marker(pytest.mark.xdist_group("vm"))


def pytest_xdist_node_collection_finished(node: object, ids: list) -> None:
    """Under --dist loadgroup, a worker's xdist renames each grouped test `<nodeid>@<group>`
    and the controller schedules by the names it gets here. pytest 9.2 ignores the rename: the
    VM modules' tests were spread over every worker, each booting its module's guests again (up
    to 12 TCG guests at once beside the VM demo). Stop the run rather than let that pass."""
    lost = [i for i in ids if i.split("::")[0].rsplit("/", 1)[-1] in VM_MODULES and "@vm" not in i]
    if lost:
        pytest.exit(f"--dist loadgroup: {len(lost)} VM tests ({lost[0]}, ...) came without their "
                    "'@vm' group: this pytest and pytest-xdist do not keep xdist_group marks "
                    "(see the pytest pin in requirements-dev.txt)", returncode=4)
