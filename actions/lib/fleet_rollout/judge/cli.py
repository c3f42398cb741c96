"""`fleet-rollout judge`: replay the canary judge on per-host counter windows.

    fleet-rollout judge --input FILE.json [--policy FILE.yaml] [--json] [--all-hosts]

Exit codes: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input (message on stderr).
The input format is described in docs/judge.md.
"""
from __future__ import annotations

import argparse
import json
import sys

from fleet_rollout.errors import FleetRolloutError
from fleet_rollout.judge import judge, load_judge_input, load_policy
from fleet_rollout.judge.explain import render_text

EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "judge",
        help="judge canary vs control NIC drop counters (PASS/FAIL/INCONCLUSIVE)",
        description=(
            "Run the canary judge on per-host counter windows (canary and control, pre and "
            "post; format in docs/judge.md). Exit code: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, "
            "2 bad input."
        ),
    )
    parser.add_argument("--input", required=True, metavar="FILE.json",
                        help="per-host counter windows")
    parser.add_argument("--policy", metavar="FILE.yaml",
                        help="thresholds, guards and drop metric (default: built-in policy)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--all-hosts", action="store_true",
                        help="list control hosts too in the text report")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.policy)
        data = load_judge_input(args.input, policy.metric)
    except FleetRolloutError as exc:
        print(f"fleet-rollout judge: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    verdict = judge(data, policy)
    if args.json:
        json.dump(verdict.to_dict(), sys.stdout, indent=2, sort_keys=True, allow_nan=False,
                  default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(verdict, all_hosts=args.all_hosts))
    return verdict.exit_code
