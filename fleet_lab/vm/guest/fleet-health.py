"""fleet-lab guest health check: HTTP on port 8080.

GET / or /health: 200 "ok" while the host is in service, 503 "maintenance" while the drain flag
/etc/fleet/maintenance exists. GET /udp: the UDP receiver's counters as JSON.
"""
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = 8080
FLAG = "/etc/fleet/maintenance"
UDP_STATS = "/run/fleet/udp.json"


class Handler(BaseHTTPRequestHandler):
    server_version = "fleet-lab-health/1"

    def _send(self, code, body, ctype="text/plain"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/", "/health"):
            if os.path.exists(FLAG):
                self._send(503, "maintenance\n")
            else:
                self._send(200, "ok\n")
        elif path == "/udp":
            try:
                with open(UDP_STATS) as handle:
                    self._send(200, handle.read(), "application/json")
            except OSError:
                self._send(503, "udp receiver not running\n")
        else:
            self._send(404, "not found\n")

    do_HEAD = do_GET

    def log_message(self, format, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
