"""`python -m fleet_lab.vm`: build the guest image, list or stop the VMs of a lab state directory.

    python -m fleet_lab.vm build [--force] [--cache DIR]
    python -m fleet_lab.vm status STATE_DIR [--json]
    python -m fleet_lab.vm down STATE_DIR [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet_lab.vm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the guest image (cached)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument("--cache", type=Path, default=None, help="cache directory")
    for name, text in (("status", "list running VMs"), ("down", "stop every VM")):
        cmd = sub.add_parser(name, help=text + " of a lab state directory")
        cmd.add_argument("state_dir", type=Path)
        cmd.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "build":
        from fleet_lab.vm.image import ensure_image

        image = ensure_image(args.cache, force=args.force)
        print(f"image {image.image_id}: kernel {image.kernel}, initrd {image.initrd}, "
              f"key {image.key}")
        return 0

    from fleet_lab.vm.backend import cleanup_state_dir, running_vms

    if args.command == "status":
        vms = running_vms(args.state_dir)
        if args.json:
            print(json.dumps(vms))
        else:
            print(f"{'host':<24} pid")
            for host, pid in sorted(vms.items()):
                print(f"{host:<24} {pid}")
        return 0
    stopped = cleanup_state_dir(args.state_dir)
    print(json.dumps(stopped) if args.json else f"stopped {len(stopped)} VM(s): "
          + ", ".join(stopped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
