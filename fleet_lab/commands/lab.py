"""`fleet-rollout lab up|status|down|traffic`: the virtual lab of BMCs and servers (and, with
`up --chatops`, IRC + errbot + the st2 API)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any, Dict, List, Optional

import requests

from fleet_lab import lab, monitoring
from fleet_lab.bmcsim.vendors import VENDOR_KEYS
from fleet_lab.chatops import stack


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("lab", help="the virtual lab (BMCs, servers, traffic)")
    sub = parser.add_subparsers(dest="lab_command", metavar="up|status|down|traffic")
    up = sub.add_parser("up", help="start the lab")
    up.add_argument("--hosts", type=int, default=6)
    up.add_argument("--backend", choices=["vm", "sim"], default="sim")
    up.add_argument("--sim-hosts", type=int, default=0, metavar="N",
                    help="with --backend vm: N more servers on the sim backend beside the VMs "
                    "(named after them; inventory groups lab_vm and lab_sim)")
    up.add_argument("--vendor", action="append", default=[],
                    help="vendor (repeat or comma list; cycled over hosts): "
                    + ", ".join(VENDOR_KEYS))
    up.add_argument("--sites", type=int, default=2)
    up.add_argument("--reboot-seconds", type=float, default=0.0)
    up.add_argument("--pps", type=int, default=0, help="UDP packets/s per server")
    up.add_argument("--rate-scale", type=float, default=1.0,
                    help="scale receive rates and default traffic (0-1; saves CPU)")
    up.add_argument("--chatops", action="store_true",
                    help="also IRC (ngircd), errbot + err-stackstorm and the st2 API for the "
                    "runtime home, with st2 users for the bot and each approver")
    up.add_argument("--prometheus", dest="prometheus", action="store_true", default=None,
                    help="a real node_exporter per server and one Prometheus scraping them "
                    f"(the default for a lab of up to {lab.MAX_MONITORED} servers)")
    up.add_argument("--no-prometheus", dest="prometheus", action="store_false",
                    help="no node_exporters and no Prometheus")
    up.add_argument("--counters", choices=["collector", "prometheus"], default="collector",
                    help="where the pack config reads counter windows: collector (the hosts "
                    "sample themselves, the default) or prometheus (the lab's Prometheus)")
    up.add_argument("--approver", action="append", default=[],
                    help="who may approve (repeat; default: the runtime's user)")
    up.add_argument("--state-dir", default=lab.DEFAULT_STATE_DIR)
    up.add_argument("--inventory", default=lab.DEFAULT_INVENTORY)
    up.add_argument("--timeout", type=float, default=900.0)
    up.set_defaults(func=cmd_up)
    status = sub.add_parser("status", help="show the lab's servers")
    status.add_argument("--state-dir", default=lab.DEFAULT_STATE_DIR)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    down = sub.add_parser("down", help="stop the lab and everything it started")
    down.add_argument("--state-dir", default=lab.DEFAULT_STATE_DIR)
    down.set_defaults(func=cmd_down)
    traffic = sub.add_parser("traffic", help="start or stop the lab's UDP traffic")
    traffic.add_argument("action", choices=["start", "stop"])
    traffic.add_argument("--pps", type=int, default=0)
    traffic.add_argument("--state-dir", default=lab.DEFAULT_STATE_DIR)
    traffic.set_defaults(func=cmd_traffic)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _vendors(values: List[str]) -> List[str]:
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    unknown = [v for v in out if v not in VENDOR_KEYS]
    if unknown:
        raise SystemExit(f"lab up: unknown vendor(s) {', '.join(unknown)}; known: "
                         f"{', '.join(VENDOR_KEYS)}")
    return out or ["generic"]


def _monitored(args: argparse.Namespace) -> bool:
    """--prometheus / --no-prometheus, else on for a lab of up to MAX_MONITORED servers (and
    always with --counters prometheus, which needs it)."""
    if args.prometheus is not None:
        return bool(args.prometheus)
    return args.counters == "prometheus" or \
        args.hosts + max(0, args.sim_hosts) <= lab.MAX_MONITORED


def cmd_up(args: argparse.Namespace) -> int:
    config = lab.LabConfig(hosts=args.hosts, backend=args.backend,
                           vendors=_vendors(args.vendor), sites=args.sites,
                           reboot_seconds=args.reboot_seconds, pps=args.pps,
                           rate_scale=args.rate_scale, chatops=args.chatops,
                           approvers=list(args.approver), sim_hosts=args.sim_hosts,
                           prometheus=_monitored(args), counters=args.counters)
    if config.hosts < 1:
        print("lab up: --hosts must be at least 1", file=sys.stderr)
        return 2
    try:
        config.validate()
    except ValueError as err:
        print(f"lab up: {str(err).replace('sim_hosts', '--sim-hosts')}".replace(
            "leave prometheus out", "--no-prometheus"), file=sys.stderr)
        return 2
    try:
        manifest = lab.up(config, args.state_dir, args.inventory, timeout=args.timeout)
    except KeyboardInterrupt:
        print("interrupted: lab stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as err:  # OSError: ngircd missing, a timeout, ...
        print(f"lab up: {err}", file=sys.stderr)
        return 1
    print(f"inventory:   {args.inventory}")
    print(f"pack config: {lab.paths(args.state_dir)['pack_config']}")
    print(f"CA:          {manifest['ca']}")
    for line in monitoring_lines(args.state_dir):
        print(line)
    for line in chat_lines(args.state_dir):
        print(line)
    return 0


def chat_lines(state_dir: str) -> List[str]:
    """The ChatOps part of the lab for people: where to chat, the API, the st2 CLI configs."""
    info = stack.read_info(state_dir)
    if info is None:
        return []
    running = stack.running(state_dir)
    state = ", ".join(f"{name} {pid or 'not running'}" for name, pid in running.items())
    lines = [f"chat:        IRC {info.irc_host}:{info.irc_port}, channel {info.channel} "
             f"(bot {info.bot_nick}, st2 route {info.route})",
             f"st2 API:     {info.api_url} (home {info.home})",
             f"processes:   {state}"]
    for user in info.users:
        lines.append(f"st2 as {user}: ST2_CONFIG_FILE={info.st2_config(user)} "
                     f"{stack.ST2_CLI} ...")
    return lines


def monitoring_lines(state_dir: str) -> List[str]:
    """The lab's Prometheus for people: where, what runs, its targets' health."""
    info = monitoring.read_info(state_dir)
    if info is None:
        return []
    now = monitoring.running(state_dir)
    lines = [f"prometheus:  {info['url']} (pid {now['prometheus'] or 'not running'}; user "
             f"{info['username']}, password in {monitoring.dirs(state_dir)['info']})",
             f"exporters:   {len(now['exporters'])}/{len(info.get('exporters') or {})} "
             f"node_exporter(s) on sim servers running"]
    if now["prometheus"]:
        try:
            seen = monitoring.targets(info)
            up = sorted(h for h, t in seen.items() if t["health"] == "up")
            down = sorted(set(info["targets"]) - set(up))
            lines.append(f"targets:     {len(up)}/{len(info['targets'])} up"
                         + (f"; down: {', '.join(down[:8])}" if down else ""))
        except (requests.RequestException, ValueError, KeyError) as err:
            lines.append(f"targets:     unknown ({str(err)[:120]})")
    return lines


def monitoring_doc(state_dir: str) -> Optional[Dict[str, Any]]:
    """The lab's Prometheus for machines (no password)."""
    info = monitoring.read_info(state_dir)
    if info is None:
        return None
    now = monitoring.running(state_dir)
    doc: Dict[str, Any] = {"url": info["url"], "pid": now["prometheus"],
                           "exporters": now["exporters"], "targets": None}
    if now["prometheus"]:
        try:
            doc["targets"] = monitoring.targets(info)
        except (requests.RequestException, ValueError, KeyError) as err:
            doc["targets_error"] = str(err)[:200]
    return doc


def host_rows(state_dir: str) -> List[Dict[str, Any]]:
    manifest = lab.read_manifest(state_dir)
    if not manifest:
        return []
    rows = []
    for host in manifest["hosts"]:
        row: Dict[str, Any] = {"host": host["name"],
                               "backend": lab.host_backend(manifest, host),
                               "vendor": host["vendor"], "site": host["site"],
                               "rack": host["rack"], "bmc": host["bmc_url"]}
        try:
            state = requests.get(f"{host['bmc_url']}/_sim/state", verify=manifest["ca"],
                                 timeout=5).json()
            row.update({"power": state["power_state"], "boot": state["boot_state"],
                        "snoop_mode": state["logical"].get("snoop_mode", "-"),
                        "interleaving": state["logical"].get("node_interleaving", "-"),
                        "pending": len(state["pending"]), "boots": state["boot_count"]})
        except (requests.RequestException, ValueError, KeyError):
            row.update({"power": "?", "boot": "unreachable"})
        rows.append(row)
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    pid = lab.daemon_pid(args.state_dir)
    manifest = lab.read_manifest(args.state_dir)
    rows = host_rows(args.state_dir) if pid else []
    if args.json:
        info = stack.read_info(args.state_dir)
        chat = dict(asdict(info), running=stack.running(args.state_dir)) if info else None
        print(json.dumps({"running": bool(pid), "pid": pid,
                          "backend": manifest and manifest.get("backend"),
                          "backends": manifest and manifest.get("backends"), "hosts": rows,
                          "chatops": chat, "prometheus": monitoring_doc(args.state_dir)}))
        return 0 if pid else 1
    if not pid:
        print(f"no lab running (state dir {args.state_dir})")
        return 1
    print(f"lab daemon {pid}, {lab.describe_backends(manifest) if manifest else 'backend ?'}, "
          f"{len(rows)} host(s)")
    cols = ["host", "backend", "vendor", "site", "rack", "power", "boot", "snoop_mode",
            "interleaving", "pending", "boots"]
    widths = {c: max([len(c)] + [len(str(r.get(c, "-"))) for r in rows]) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for row in rows:
        print("  ".join(str(row.get(c, "-")).ljust(widths[c]) for c in cols))
    for line in monitoring_lines(args.state_dir):
        print(line)
    for line in chat_lines(args.state_dir):
        print(line)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    was_running = lab.down(args.state_dir)
    print("lab stopped" if was_running else "no lab was running (leftovers cleaned)")
    return 0


def cmd_traffic(args: argparse.Namespace) -> int:
    settings = lab.set_traffic(args.state_dir, args.action == "start", args.pps or None)
    print(f"traffic {'on' if settings['enabled'] else 'off'} at {settings['pps']} packets/s "
          "per server")
    return 0
