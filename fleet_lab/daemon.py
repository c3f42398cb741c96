"""The lab daemon (`python -m fleet_lab.daemon --state-dir D`): BMCs, servers and traffic.

Started and stopped by `fleet-rollout lab up/down`. SIGTERM/SIGINT stop everything it started:
the BMC listeners, every VM, the traffic source. A lab with sim servers beside its VMs runs both
backends at once (fleet_lab.hosts.DispatchBackend): one BMC simulator for all servers, UDP
traffic to the VMs and the same traffic settings as counter arithmetic for the sim servers.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from fleet_lab.bmcsim.bmc_state import Timing
from fleet_lab.bmcsim.fleet import BmcFleet, FleetConfig
from fleet_lab.hosts import BootConfig, DispatchBackend
from fleet_lab.lab import LabConfig, load_config, paths
from fleet_lab.simhost import SimBackend
from fleet_lab.traffic import SimCounters, TrafficSettings, UdpSender


class SimLabBackend(SimBackend):
    """SimBackend whose boots also reset the host's counter model (a reboot zeroes counters)."""

    def __init__(self, root: str, counters: SimCounters, os_boot: float = 0.0) -> None:
        super().__init__(root, os_boot)
        self.counters = counters

    def booted(self, config: BootConfig) -> None:
        self.counters.booted(config)

    def power_off(self, host: str) -> None:
        super().power_off(host)
        self.counters.powered_off(host)

    def close(self) -> None:
        return None


def free_port_range(count: int) -> int:
    """A free block of `count` ports, searched from a random start so that labs started at the
    same moment (parallel tests, two users) do not race for the same block."""
    start = random.randrange(24000, 60000 - count)
    for base in itertools.chain(range(start, 60000 - count, 97), range(24000, start, 97)):
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free range of ports on 127.0.0.1")


def vm_options(config: LabConfig) -> Dict[str, Any]:
    """What the lab's configuration asks of its VM backend beyond the defaults."""
    return {"rcvbuf": config.guest_rcvbuf} if config.guest_rcvbuf else {}


class Daemon:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.p = paths(self.state_dir)
        self.config: LabConfig = load_config(self.state_dir)
        from fleet_lab.vm.drop_model import RATE_SCALE_ENV

        os.environ[RATE_SCALE_ENV] = str(self.config.rate_scale or 1.0)
        self.stopping = asyncio.Event()

    def progress(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        with open(self.p["progress"], "a") as handle:
            handle.write(line + "\n")
        print(line, flush=True)

    def reboot_seconds(self) -> float:
        """The simulated servers' reboot (the lab's setting, else the backend's default)."""
        config = self.config
        return config.reboot_seconds or (4.0 if config.backend == "vm" else 3.0)

    def _backend(self) -> DispatchBackend:
        """The servers' backends (vm, sim or both), each host routed to the one that runs it."""
        config = self.config
        kinds = config.backends()
        backends: Dict[str, Any] = {}
        if "vm" in kinds:
            from fleet_lab.vm.backend import VmBackend

            self.progress("preparing the VM image (cached after the first build)")
            backends["vm"] = VmBackend(Path(self.state_dir), progress=self.progress,
                                       **vm_options(config))
        if "sim" in kinds:
            self.counters = SimCounters(self.p["hosts"])
            # the OS starts as long after POST as the BMC simulator's timing says (the
            # BMC shows OSRunning then): until then the host answers with its last boot
            backends["sim"] = SimLabBackend(self.p["hosts"], self.counters,
                                            Timing(self.reboot_seconds()).os_boot)
        routes = {name: config.backend_of(index)
                  for index, name in enumerate(config.host_names())}
        return DispatchBackend(backends, routes)

    def manifest(self, fleet: BmcFleet, backend: DispatchBackend, ready: bool) -> Dict[str, Any]:
        hosts: List[Dict[str, Any]] = []
        for index, bmc in enumerate(fleet.bmcs):
            kind = backend.kind(bmc.name)
            entry: Dict[str, Any] = {
                "name": bmc.name, "vendor": bmc.spec.key, "bmc_url": fleet.url(index),
                "site": self.config.site_of(index), "rack": self.config.rack_of(index),
                "backend": kind}
            if kind == "vm":
                ports = backend.backends["vm"].ports(bmc.name)
                entry.update({"ssh_port": ports.ssh, "health_port": ports.health,
                              "udp_port": ports.udp, "exporter_port": ports.exporter})
            else:
                entry["sysroot"] = backend.backends["sim"].sysroot(bmc.name)
            hosts.append(entry)
        vm = backend.backends.get("vm")
        return {"backend": self.config.backend, "backends": self.config.backends(),
                "pid": os.getpid(), "ready": ready,
                "ca": fleet.ca_path, "state_dir": self.state_dir, "hosts": hosts,
                "ssh_key": str(vm.key_path) if vm is not None else None,
                "known_hosts": str(vm.known_hosts_path) if vm is not None else None,
                "traffic": self.p["traffic"], "started": time.time()}

    def _up_line(self, fleet: BmcFleet, backend: DispatchBackend, seconds: float) -> str:
        """'servers up: 9/16 (vm 3/6, sim 6/10; 12s)', or without the split for one backend."""
        up = {kind: 0 for kind in backend.backends}
        for bmc in fleet.bmcs:
            if bmc.boot_state == "OSRunning":
                up[backend.kind(bmc.name)] += 1
        total = len(fleet.bmcs)
        split = ""
        if len(backend.backends) > 1:
            split = ", ".join(f"{kind} {up[kind]}/{len(backend.hosts(kind))}"
                              for kind in self.config.backends()) + "; "
        return f"servers up: {sum(up.values())}/{total} ({split}{seconds:.0f}s)"

    def write_manifest(self, doc: Dict[str, Any]) -> None:
        tmp = self.p["manifest"] + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(doc, handle, indent=1)
        os.replace(tmp, self.p["manifest"])

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        config = self.config
        backend = await loop.run_in_executor(None, self._backend)
        reboot = self.reboot_seconds()
        total = config.total_hosts()
        base = config.base_port or free_port_range(total)
        fleet = BmcFleet(FleetConfig(
            count=total, base_port=base, vendors=config.vendors,
            username=config.username, password=config.password, tls=True,
            state_dir=self.state_dir, reboot_seconds=reboot, host_prefix="lab",
            os_boot_timeout=600.0), backend)
        names = [bmc.name for bmc in fleet.bmcs]
        if names != config.host_names():  # the routes are by name: they must be the BMCs'
            raise RuntimeError(f"BMC names {names[:3]}... differ from the lab's host names")
        if not os.path.exists(self.p["traffic"]):
            default_pps = config.pps or int(3500 * (config.rate_scale or 1.0))
            TrafficSettings(enabled=True, pps=default_pps).save(self.p["traffic"])
        traffic: List[asyncio.Task] = []
        try:
            await fleet.service.start()
            self.progress(f"{total} BMC(s) listening on 127.0.0.1:{base}-"
                          f"{base + total - 1} ({', '.join(sorted(set(config.vendors)))})")
            if len(backend.backends) > 1:
                self.progress("servers: " + "; ".join(
                    f"{_span(backend.hosts(kind))} on the {kind} backend"
                    for kind in config.backends()))
            self.write_manifest(self.manifest(fleet, backend, ready=False))
            started = time.monotonic()
            last = ""
            while not self.stopping.is_set():
                line = self._up_line(fleet, backend, time.monotonic() - started)
                if line.rsplit(" ", 1)[0] != last.rsplit(" ", 1)[0]:  # not the seconds
                    self.progress(line)
                    last = line
                if all(b.boot_state == "OSRunning" for b in fleet.bmcs):
                    break
                await asyncio.sleep(0.5)
            vm = backend.backends.get("vm")
            if vm is not None:  # real UDP to the guests' forwarded ports
                targets = {name: vm.ports(name).as_dict() for name in backend.hosts("vm")}
                traffic.append(loop.create_task(UdpSender(targets, self.p["traffic"]).run()))
            if "sim" in backend.backends:  # the same settings as counter arithmetic
                traffic.append(loop.create_task(self._sim_traffic()))
            self.write_manifest(self.manifest(fleet, backend, ready=True))
            self.progress("lab ready")
            await self.stopping.wait()
        finally:
            self.progress("stopping the lab")
            for task in traffic:
                task.cancel()
            await fleet.service.stop()
            await loop.run_in_executor(None, backend.close)
            self.progress("lab stopped")
        return 0

    async def _sim_traffic(self) -> None:
        """The sim hosts' counters move every `sim_tick(hosts)` seconds: a real kernel's
        counters move continuously, and a step of 2 s put up to 25% quantisation noise into a
        10 s counter window (canary and control hosts read at different moments of a step
        were judged as a traffic change)."""
        while True:
            await asyncio.sleep(sim_tick(len(self.counters.hosts)))
            settings = TrafficSettings.load(self.p["traffic"])
            # each host's counters move by the time since its own last write, measured in the
            # executor that writes them, not by the event loop's wake-ups
            await asyncio.get_running_loop().run_in_executor(None, self.counters.tick, settings)


def sim_tick(hosts: int) -> float:
    """Seconds between counter updates of `hosts` sim hosts: 0.5 s (a 10 s window is then
    within 5% of its traffic) up to 500 hosts, then longer so that the lab daemon writes about
    1,000 hosts' counters a second (2,000 hosts: 2 s)."""
    return max(0.5, hosts / 1000.0)


def _span(names: List[str]) -> str:
    """'lab-007..lab-016 (10)', 'lab-001' or 'none'."""
    if not names:
        return "none"
    if len(names) == 1:
        return names[0]
    return f"{names[0]}..{names[-1]} ({len(names)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    daemon = Daemon(args.state_dir)
    with open(daemon.p["pid"], "w") as handle:
        handle.write(str(os.getpid()))
    try:
        return asyncio.run(daemon.run())
    except Exception as err:  # the log is where `lab up` looks
        daemon.progress(f"lab failed: {type(err).__name__}: {err}")
        raise
    finally:
        try:
            os.remove(daemon.p["pid"])
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
