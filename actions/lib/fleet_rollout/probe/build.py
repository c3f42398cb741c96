"""Build fleet-probe on first use.

`st2 pack install` copies the pack and creates its virtualenv; it runs no build step. So the
action that needs the probe builds it with the pack's own probe/Makefile (the same flags as
`make probe`), once, under a lock: into probe/build/ when the pack directory is writable (it is
for the st2 user), else into ~/.cache/fleet_rollout/probe/. make rebuilds only when the source
changed.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from fleet_rollout.errors import ConfigError
from fleet_rollout.probe.output import PACK_ROOT

BINARY_NAME = "fleet-probe"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


def build_dir(pack_root: Path = PACK_ROOT) -> Path:
    inside = pack_root / "probe" / "build"
    if _writable(inside):
        return inside
    return Path(os.path.expanduser("~/.cache/fleet_rollout/probe"))


def ensure_probe(pack_root: Path = PACK_ROOT, out_dir: Optional[Path] = None,
                 timeout: float = 300) -> str:
    """The path of an up-to-date fleet-probe binary, built if needed."""
    source_dir = pack_root / "probe"
    if not (source_dir / "Makefile").is_file():
        raise ConfigError(f"{source_dir}: the probe's sources are missing from the pack")
    out = Path(out_dir) if out_dir is not None else build_dir(pack_root)
    out.mkdir(parents=True, exist_ok=True)
    binary = out / BINARY_NAME
    make = shutil.which("make")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if make is None or compiler is None:
        if os.access(binary, os.X_OK):
            return str(binary)
        raise ConfigError(f"{binary} is not built and this machine has no "
                          f"{'make' if make is None else 'C compiler'}: install make and gcc "
                          "(with static libc) on the action runners, or run "
                          f"`make -C {source_dir}` once")
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run([make, "-s", "-C", str(source_dir), f"BUILD={out}",
                               f"CC={compiler}", f"{out}/{BINARY_NAME}"],
                              capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0 or not os.access(binary, os.X_OK):
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ConfigError(f"building {binary} failed: {' | '.join(detail) or 'no output'}")
    return str(binary)
