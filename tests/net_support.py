"""A loopback TCP listener for tests that stand in for a host's network service."""
from __future__ import annotations

import socket
import threading


class LoopbackListener:
    """Accepts connections on 127.0.0.1 (`port`, or a free one) in a thread of its own, counts
    them in `accepted` and gives each to `handle` in that thread (a slow handle delays the
    next accept, as a starved service does). The default handle closes the connection."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        conn.close()

    def close(self) -> None:
        self.sock.close()
