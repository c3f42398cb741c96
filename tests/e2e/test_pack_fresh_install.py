"""A pack as `st2 pack install` leaves it: the git-tracked files, nothing built. The probe is
built on first use (fleet_rollout.probe.build) with the pack's own Makefile."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import locations

from fleet_rollout.probe.build import ensure_probe

ROOT = locations.ROOT


def fresh_pack(dest: Path) -> Path:
    """Copy what a git clone of the pack holds (tracked and new, not ignored files)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    assert not (dest / "probe" / "build").exists()
    return dest


def test_probe_is_built_on_first_use_and_then_reused(tmp_path):
    pack = fresh_pack(tmp_path / "fleet_rollout")
    binary = ensure_probe(pack_root=pack)
    assert binary == str(pack / "probe" / "build" / "fleet-probe")
    assert os.access(binary, os.X_OK)
    built = os.stat(binary).st_mtime_ns
    assert ensure_probe(pack_root=pack) == binary
    assert os.stat(binary).st_mtime_ns == built  # not rebuilt


def test_verify_probe_runs_from_a_freshly_installed_pack(tmp_path):
    """The library of the installed copy (not this checkout) runs the probe on a fake sysfs
    tree: before the fix it failed with 'probe binary ... is missing'."""
    pack = fresh_pack(tmp_path / "fleet_rollout")
    sysroot = tmp_path / "tree"
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT / 'tests' / 'fixtures' / 'probe')!r})
import sysfs_tree
from fleet_rollout.probe import LocalRunner, run_probe
import fleet_rollout
assert fleet_rollout.__file__.startswith({str(pack)!r}), fleet_rollout.__file__
sysfs_tree.uniform_tree(__import__('pathlib').Path({str(sysroot)!r}), 2, 2)
doc = run_probe(LocalRunner(host="fresh", sysroot={str(sysroot)!r}), budget_ms=200)
print(json.dumps({{"nodes": len(doc["topology"]["nodes"])}}))
"""
    env = dict(os.environ, PYTHONPATH=str(pack / "actions" / "lib"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"nodes": 2}
    assert (pack / "probe" / "build" / "fleet-probe").is_file()
