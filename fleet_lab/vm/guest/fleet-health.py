"""fleet-lab guest health check: HTTP on port 8080.

GET / or /health: 200 "ok" while the host is in service, 503 "maintenance" while the drain flag
/etc/fleet/maintenance exists. GET /udp: the UDP receiver's counters as JSON. HEAD: the same
without a body. One request per connection (HTTP/1.0), answered in this one thread.

Small on purpose: the lab's load balancer asks every 2 s, and in a TCG guest http.server cost
54 ms of a host core per request (a thread per request, the email package parsing the headers)
and 2.7 s to import at each boot; this imports only os, socket, sys and time.

Options (for tests on the host; the guest runs it without any): --bind ADDR, --port N,
--flag PATH, --udp-stats PATH.
"""
import os
import socket
import sys
import time

PORT = 8080
FLAG = "/etc/fleet/maintenance"
UDP_STATS = "/run/fleet/udp.json"
# A client gets this long in all to send its request (and as long to take the answer): a silent
# or dripping one holds the next ones only that long. The lab's load balancer waits 1 s.
CLIENT_SECONDS = 2.0
MAX_REQUEST = 8192  # bytes of request line and headers
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           503: "Service Unavailable"}


def answer(method, path, flag, udp_stats):
    """(status, body, content type) for a request."""
    if method not in ("GET", "HEAD"):
        return 405, "only GET and HEAD\n", "text/plain"
    path = path.split("?", 1)[0]
    if path in ("/", "/health"):
        if os.path.exists(flag):
            return 503, "maintenance\n", "text/plain"
        return 200, "ok\n", "text/plain"
    if path == "/udp":
        try:
            with open(udp_stats) as handle:
                return 200, handle.read(), "application/json"
        except OSError:
            return 503, "udp receiver not running\n", "text/plain"
    return 404, "not found\n", "text/plain"


def read_head(conn):
    """The request's line and headers (bytes up to the blank line), None when they are too
    long; socket.timeout when they are not all there within CLIENT_SECONDS (the client is
    dropped unanswered)."""
    data = b""
    deadline = time.monotonic() + CLIENT_SECONDS
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout(f"no whole request within {CLIENT_SECONDS:.0f} s")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    return data


def serve_one(conn, flag, udp_stats):
    head = read_head(conn)
    conn.settimeout(CLIENT_SECONDS)
    words = head.split(b"\r\n" if b"\r\n" in head else b"\n", 1)[0].split() if head else []
    if len(words) == 3 and words[2].startswith(b"HTTP/"):
        method = words[0].decode("ascii", "replace")
        status, body, ctype = answer(method, words[1].decode("ascii", "replace"), flag,
                                     udp_stats)
    else:
        method, status, body, ctype = "GET", 400, "bad request\n", "text/plain"
    data = body.encode()
    reply = (f"HTTP/1.0 {status} {REASONS[status]}\r\nServer: fleet-lab-health/2\r\n"
             f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
             "Connection: close\r\n\r\n").encode()
    conn.sendall(reply if method == "HEAD" else reply + data)


def serve(sock, flag, udp_stats):
    while True:
        try:
            conn, _addr = sock.accept()
        except InterruptedError:
            continue
        try:
            serve_one(conn, flag, udp_stats)
        except OSError:
            pass  # a client that went away or stayed silent: the next one
        finally:
            conn.close()


def options(argv):
    """--name value pairs; anything else is an error."""
    known = {"--bind": "0.0.0.0", "--port": str(PORT), "--flag": FLAG, "--udp-stats": UDP_STATS}
    if len(argv) % 2 or any(name not in known for name in argv[::2]):
        sys.exit("usage: fleet-health.py [--bind ADDR] [--port N] [--flag PATH] "
                 "[--udp-stats PATH]")
    known.update(zip(argv[::2], argv[1::2]))
    return known


def main(argv=None):
    opts = options(sys.argv[1:] if argv is None else argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((opts["--bind"], int(opts["--port"])))
    sock.listen(64)
    if opts["--port"] == "0":  # a test's free port: say which
        print(sock.getsockname()[1], flush=True)
    serve(sock, opts["--flag"], opts["--udp-stats"])


if __name__ == "__main__":
    main()
