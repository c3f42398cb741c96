"""A fleet of simulated BMCs: build them, serve them, run them in the foreground or a thread."""
from __future__ import annotations

import asyncio
import json
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from fleet_lab.bmcsim.bmc_state import Bmc, Timing
from fleet_lab.bmcsim.faults import Faults
from fleet_lab.bmcsim.http import BmcService
from fleet_lab.bmcsim.tls import ensure_certificates, server_context
from fleet_lab.bmcsim.vendors import vendor
from fleet_lab.hosts import HostBackend


@dataclass
class FleetConfig:
    count: int
    base_port: int
    vendors: List[str]  # cycled over the BMCs
    username: str = "admin"
    password: str = "lab-password"
    tls: bool = True
    state_dir: Optional[str] = None
    reboot_seconds: float = 20.0
    faults: Dict[str, Any] = field(default_factory=dict)
    host_prefix: str = "lab"
    os_boot_timeout: float = 600.0


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, needed))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def host_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index + 1:03d}"


class BmcFleet:
    def __init__(self, config: FleetConfig, backend: Optional[HostBackend] = None) -> None:
        for key in config.vendors:
            vendor(key)  # fail early on a bad vendor name
        if config.count < 1:
            raise ValueError("--count must be at least 1")
        self.config = config
        self.ca_path: Optional[str] = None
        ssl_context = None
        if config.tls:
            cert_dir = os.path.join(config.state_dir or ".", "tls")
            self.ca_path, cert, key = ensure_certificates(cert_dir)
            ssl_context = server_context(cert, key)
        self.bmcs: List[Bmc] = []
        for index in range(config.count):
            faults = Faults()
            faults.update(config.faults)
            bmc = Bmc(host_name(config.host_prefix, index), config.base_port + index,
                      vendor(config.vendors[index % len(config.vendors)]), config.username,
                      config.password, Timing(config.reboot_seconds), backend, config.state_dir,
                      faults, config.os_boot_timeout)
            if faults.unreachable_s > 0:
                bmc.unreachable_until = time.monotonic() + faults.unreachable_s
                faults.unreachable_s = 0.0
            self.bmcs.append(bmc)
        self.service = BmcService(self.bmcs, ssl_context)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        _raise_fd_limit(config.count * 4 + 256)

    @property
    def scheme(self) -> str:
        return "https" if self.config.tls else "http"

    def url(self, index: int) -> str:
        return f"{self.scheme}://127.0.0.1:{self.bmcs[index].port}"

    def describe(self) -> List[Dict[str, Any]]:
        return [{"host": b.name, "url": f"{self.scheme}://127.0.0.1:{b.port}",
                 "vendor": b.spec.key} for b in self.bmcs]

    def write_manifest(self) -> Optional[str]:
        if not self.config.state_dir:
            return None
        path = os.path.join(self.config.state_dir, "bmcs.json")
        os.makedirs(self.config.state_dir, exist_ok=True)
        with open(path, "w") as handle:
            json.dump({"ca": self.ca_path, "bmcs": self.describe()}, handle, indent=1)
        return path

    # --------------------------------------------------------------- foreground
    async def serve_forever(self, ready: Optional[threading.Event] = None) -> None:
        self.loop = asyncio.get_running_loop()
        await self.service.start()
        self.write_manifest()
        if ready is not None:
            ready.set()
        try:
            while True:
                await asyncio.sleep(3600)
        finally:
            await self.service.stop()

    # --------------------------------------------------------------- background (tests, bench)
    def start_in_thread(self) -> BmcFleet:
        ready = threading.Event()
        errors: List[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self.service.start())
            except BaseException as err:  # report bind errors to the caller
                errors.append(err)
                ready.set()
                return
            self.write_manifest()
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.service.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="bmc-sim", daemon=True)
        self._thread.start()
        ready.wait(60)
        if errors:
            raise errors[0]
        return self

    def call(self, func: Any, *args: Any) -> Any:
        """Run func(*args) on the simulator's loop and return its result (thread-safe)."""
        assert self.loop is not None

        async def wrapper() -> Any:
            return func(*args)
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(30)

    def stop(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
