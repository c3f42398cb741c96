"""The HTTP side: one threaded server on loopback, routes, authentication, st2's error shape.

Every route but `POST /auth/v1/tokens` needs a token (`X-Auth-Token` header or `x-auth-token`
query parameter) or an API key (`St2-Api-Key` header or `st2-api-key` query parameter), as st2's
auth middleware does. Errors are `{"faultstring": "..."}` with st2's status codes.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Pattern, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

LOG = logging.getLogger(__name__)

MAX_BODY = 1 << 20
SOCKET_TIMEOUT = 30.0
MAX_CONNECTIONS = 64  # connections served at once; more are closed at once (st2: nginx's cap)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once: a flood of connections
    cannot take every thread and file descriptor of the process."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            LOG.warning("connection from %s refused: %d connections are served already",
                        client_address, MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, str]
    headers: Any
    body: Any = None
    user: Optional[str] = None
    basic_auth: Optional[Tuple[str, str]] = None
    auth: Dict[str, Any] = field(default_factory=dict)  # how the user authenticated

    def json_body(self) -> Dict[str, Any]:
        if not isinstance(self.body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        return self.body

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() in ("1", "true", "yes")

    def int_param(self, name: str, default: int) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise HttpError(400, f'query parameter "{name}" must be an integer') from None


@dataclass
class Response:
    status: int = 200
    body: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    text: Optional[str] = None
    stream: Optional[Iterator[bytes]] = None


Handler = Callable[..., Any]


@dataclass
class Route:
    method: str
    pattern: Pattern[str]
    handler: Handler
    public: bool = False


class Router:
    def __init__(self) -> None:
        self.routes: List[Route] = []

    def add(self, method: str, path: str, handler: Handler, public: bool = False) -> None:
        """`path` with `{name}` segments (one path segment each); a trailing slash is optional."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path.rstrip("/"))
        self.routes.append(Route(method, re.compile(f"^{regex}/?$"), handler, public))

    def find(self, method: str, path: str) -> Tuple[Route, Dict[str, str]]:
        allowed = False
        for route in self.routes:
            match = route.pattern.match(path)
            if match:
                if route.method == method:
                    return route, match.groupdict()
                allowed = True
        if allowed:
            raise HttpError(405, f"The method is not allowed for the requested URL: {path}")
        raise HttpError(404, f"Not Found: {path}")


Authenticator = Callable[[Request], Optional[str]]


class ApiServer:
    """Serves a Router on host:port in threads; `authenticate` names the request's user."""

    def __init__(self, router: Router, authenticate: Authenticator, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.router = router
        self.authenticate = authenticate
        server = self

        class _Handler(BaseHTTPRequestHandler):
            server_version = "fleet-rollout-st2api"
            timeout = SOCKET_TIMEOUT  # a client that stops sending or reading is dropped

            def log_message(self, fmt: str, *args: Any) -> None:
                # the request line without its query string (the stream's token is there)
                text = (fmt % args).replace(self.path, self.path.split("?")[0])
                LOG.debug("%s %s", self.address_string(), text)

            def do_GET(self) -> None:
                server.handle(self, "GET")

            def do_POST(self) -> None:
                server.handle(self, "POST")

            def do_PUT(self) -> None:
                server.handle(self, "PUT")

            def do_DELETE(self) -> None:
                server.handle(self, "DELETE")

        self.httpd = BoundedHTTPServer((host, port), _Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       name="st2api")

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def host(self) -> str:
        return str(self.httpd.server_address[0])

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        if self.thread.is_alive():  # shutdown() waits for serve_forever: only when it runs
            self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ one request
    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        try:
            response = self._dispatch(h, method)
        except HttpError as e:
            response = Response(e.status, {"faultstring": e.message})
        except Exception:  # never a traceback (or a secret in one) to the client
            LOG.exception("%s %s failed", method, h.path.split("?")[0])
            response = Response(500, {"faultstring": "Internal Server Error"})
        self._write(h, response)

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> Response:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        req = Request(method, parts.path, query, h.headers)
        route, args = self.router.find(method, parts.path)
        args = {key: unquote(value) for key, value in args.items()}
        req.basic_auth = _basic_auth(h.headers.get("Authorization"))
        if not route.public:
            req.user = self.authenticate(req)
            if req.user is None:
                raise HttpError(401, _missing_credentials(req))
        req.body = _read_body(h)  # after authentication: strangers' bodies are not parsed
        result = route.handler(req, **args)
        if isinstance(result, Response):
            return result
        return Response(200, result)

    @staticmethod
    def _write(h: BaseHTTPRequestHandler, response: Response) -> None:
        h.send_response(response.status)
        for key, value in response.headers.items():
            h.send_header(key, value)
        if response.stream is not None:
            h.send_header("Content-Type", "text/event-stream; charset=UTF-8")
            h.send_header("Cache-Control", "no-cache")
            h.end_headers()
            try:
                for chunk in response.stream:
                    h.wfile.write(chunk)
                    h.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                close = getattr(response.stream, "close", None)
                if close:
                    close()
            return
        if response.status == 204:
            h.end_headers()
            return
        if response.text is not None:
            data = response.text.encode()
            h.send_header("Content-Type", "text/plain; charset=UTF-8")
        else:
            data = json.dumps(response.body, default=str).encode()
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)


def _read_body(h: BaseHTTPRequestHandler) -> Any:
    try:
        length = int(h.headers.get("Content-Length") or 0)
    except ValueError:
        raise HttpError(400, "bad Content-Length") from None
    if length <= 0:
        return None
    if length > MAX_BODY:
        raise HttpError(413, "the request body is too large")
    raw = h.rfile.read(length)
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise HttpError(400, "the request body is not valid JSON") from None


def _basic_auth(header: Optional[str]) -> Optional[Tuple[str, str]]:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise HttpError(401, "Invalid authorization header") from None
    name, sep, password = decoded.partition(":")
    if not sep:
        raise HttpError(401, "Invalid authorization header")
    return name, password


def _missing_credentials(req: Request) -> str:
    if any(req.headers.get(h) for h in ("X-Auth-Token", "St2-Api-Key")) or \
            any(q in req.query for q in ("x-auth-token", "st2-api-key")):
        return "Unauthorized - the token or API key is invalid or expired"
    return "Unauthorized - One of Token or API key required."
