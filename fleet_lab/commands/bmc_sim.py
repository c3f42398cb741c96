"""`fleet-rollout bmc-sim`: run N simulated BMCs on 127.0.0.1 in the foreground."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from fleet_lab.bmcsim.faults import parse_fault_args
from fleet_lab.bmcsim.vendors import VENDOR_KEYS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bmc-sim", help="run simulated Redfish BMCs on 127.0.0.1",
        description="Run N simulated BMCs on 127.0.0.1 ports P..P+N-1 in one process.")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--base-port", type=int, default=8443)
    parser.add_argument("--vendor", default="generic",
                        help="vendor, or a comma list cycled over the BMCs: "
                        + ", ".join(VENDOR_KEYS))
    parser.add_argument("--no-tls", action="store_true", help="serve plain http")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default=None,
                        help="BMC password (default: $FLEET_BMC_PASSWORD or 'lab-password')")
    parser.add_argument("--state-dir", default=None,
                        help="persist BIOS state, CA and manifest here")
    parser.add_argument("--reboot-seconds", type=float, default=20.0)
    parser.add_argument("--backend", choices=["none", "sim"], default="none",
                        help="host backend told about every boot (sim: fake sysfs trees)")
    parser.add_argument("--fault", action="append", default=[], metavar="KEY=VALUE",
                        help="fault for every BMC, e.g. latency_ms=200 (see docs/bmc-simulator.md)")
    parser.add_argument("--json", action="store_true", help="print the BMC list as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet_lab.bmcsim.fleet import BmcFleet, FleetConfig

    try:
        faults = parse_fault_args(args.fault)
    except ValueError as err:
        print(f"bmc-sim: {err}", file=sys.stderr)
        return 2
    password = args.password or os.environ.get("FLEET_BMC_PASSWORD") or "lab-password"
    config = FleetConfig(count=args.count, base_port=args.base_port,
                         vendors=[v.strip() for v in args.vendor.split(",") if v.strip()],
                         username=args.user, password=password, tls=not args.no_tls,
                         state_dir=args.state_dir, reboot_seconds=args.reboot_seconds,
                         faults=faults)
    backend = None
    if args.backend == "sim":
        from fleet_lab.simhost import SimBackend

        backend = SimBackend(os.path.join(args.state_dir or ".", "hosts"))
    try:
        fleet = BmcFleet(config, backend)
    except ValueError as err:
        print(f"bmc-sim: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"ca": fleet.ca_path, "bmcs": fleet.describe()}))
    else:
        print(f"{len(fleet.bmcs)} BMC(s) on 127.0.0.1:{args.base_port}-"
              f"{args.base_port + args.count - 1} ({fleet.scheme})")
        if fleet.ca_path:
            print(f"CA certificate: {fleet.ca_path}")
        shown = fleet.describe()
        print(f"{'HOST':<12} {'URL':<28} VENDOR")
        for row in shown[:20]:
            print(f"{row['host']:<12} {row['url']:<28} {row['vendor']}")
        if len(shown) > 20:
            print(f"... and {len(shown) - 20} more")
    sys.stdout.flush()
    try:
        asyncio.run(fleet.serve_forever())
    except KeyboardInterrupt:
        pass
    return 0
