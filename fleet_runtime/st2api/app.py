"""Assemble the API: routes of every resource on one server, the stream hub, the state file."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Optional

from fleet_runtime.st2api.alias_executions import AliasExecutions
from fleet_runtime.st2api.auth import Auth
from fleet_runtime.st2api.catalog import Catalog
from fleet_runtime.st2api.executions import Executions
from fleet_runtime.st2api.http import ApiServer, Router
from fleet_runtime.st2api.inquiries import Inquiries
from fleet_runtime.st2api.keys import Keys
from fleet_runtime.st2api.service import ApiService
from fleet_runtime.st2api.stream import StreamHub

STATE_FILE = "st2api.json"


class St2Api:
    """The st2 API of one runtime, served on host:port (loopback by default)."""

    def __init__(self, runtime: Any, users_path: Path, host: str = "127.0.0.1",
                 port: int = 0, admins: Optional[List[str]] = None) -> None:
        self.service = ApiService(runtime, users_path, admins)
        self.router = Router()
        for resource in (Auth, Catalog, Executions, Inquiries, Keys, AliasExecutions):
            resource(self.service).register(self.router)
        self.hub = StreamHub(self.service)
        self.hub.register(self.router)
        self.server = ApiServer(self.router, self.service.authenticate, host, port)
        self.state_path = Path(runtime.home.path) / STATE_FILE

    @property
    def base_url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}"

    def urls(self) -> dict:
        """What the st2 CLI needs (ST2_AUTH_URL, ST2_API_URL, ST2_STREAM_URL)."""
        return {"ST2_BASE_URL": self.base_url, "ST2_AUTH_URL": self.base_url + "/auth/v1",
                "ST2_API_URL": self.base_url + "/api/v1",
                "ST2_STREAM_URL": self.base_url + "/stream/v1"}

    def start(self) -> None:
        self.hub.start()
        self.server.start()
        state = {"pid": os.getpid(), "port": self.server.port, "host": self.server.host}
        state.update(self.urls())
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_path)

    def close(self) -> None:
        self.hub.close()
        self.server.close()
        try:
            if json.loads(self.state_path.read_text()).get("pid") == os.getpid():
                self.state_path.unlink()
        except (OSError, ValueError):
            pass


def read_state(home: Path) -> Optional[dict]:
    """The running API's address, as `fleet-rollout api serve` wrote it (None if absent)."""
    try:
        return dict(json.loads((Path(home) / STATE_FILE).read_text()))
    except (OSError, ValueError):
        return None
