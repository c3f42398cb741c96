"""A safe client over DMTF's python-redfish-library for one BMC.

The library's defaults are wrong for a fleet tool (docs/redfish.md): TLS unverified
unless a CA file is given, no timeout, POST/PATCH resent after timeouts (a Reset sent twice), no
re-login on 401.
This wrapper fixes all of them:

- TLS verified by default (the given CA bundle, else the operating system's CA store, never
  certifi's and never off); plain http only when the endpoint explicitly allows it.
- Answers are bounded and typed: a body larger than MAX_BODY_BYTES is refused while it is read,
  a 2xx body that is not a JSON object is a RedfishError naming the URI (see shape.py for the
  typed reads of fields).
- A timeout on every request.
- GETs retried with exponential backoff, honouring Retry-After on 503; writes never resent on a
  transport error: the caller gets `WriteOutcomeUnknown` and must check the BMC's state.
- Auth chosen per host: `auto` (a Redfish session when the service root offers
  `Links.Sessions`, HTTP basic otherwise), or `session` / `basic` when configured. A service that
  offers no sessions is never sent a session login.
- Re-login once on 401 (an expired session); the request is then repeated, which is safe because
  a 401 means the BMC did not act on it. Under basic auth a 401 is a refused password: no re-login.
- The session is always logged out (context manager), and passwords and session tokens never
  reach exceptions or logs.
- Reads are not repeated needlessly: the service root is read once per session, and a document
  read since the session's last write may be reused for a few seconds (`recent`, opt-in: BIOS
  state between snapshot and stage). Any write forgets them all; restart evidence and the
  post-reset reads always go to the wire.
- Request accounting is what went on the wire: every HTTP request the library sends (its own
  service-root GET and logout included, no logout under basic auth) is counted by method and kept
  in order (`sent`), so counts can be checked against the server's access log.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import random
import re
import ssl
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from urllib.parse import urlsplit

import redfish
import requests
from redfish.rest.v1 import (
    InvalidCredentialsError,
    RetriesExhaustedError,
    RisObject,
    ServerDownOrUnreachableError,
    SessionCreationError,
)

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.shape import Resource, check_uri, json_type

LOG = logging.getLogger(__name__)

_TRANSIENT_STATUSES = (502, 503, 504)
AUTH_MODES = ("auto", "session", "basic")
MAX_BODY_BYTES = 8 * 1024 * 1024  # no Redfish resource we read comes near this
_READ_CHUNK = 64 * 1024
RECENT_MAX_AGE = 5.0  # seconds a document read since the last write may be reused (`recent`)
DEBIAN_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"


class BodyTooLarge(Exception):
    """Raised inside the HTTP layer when a BMC answer exceeds MAX_BODY_BYTES."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"answer to {path} is larger than {limit} bytes")
        self.path = path
        self.limit = limit


class WriteOutcomeUnknown(RedfishError):
    """A write whose answer was lost: the BMC may or may not have carried it out. Not resent."""


class _ScrubFilter(logging.Filter):
    """Removes session tokens and passwords from the redfish library's own log records."""

    _patterns = [
        (re.compile(r"(X-Auth-Token['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+", re.I), r"\1<REDACTED>"),
        (re.compile(r"(\"Password\"\s*:\s*)\"(?:[^\"\\]|\\.)*\"", re.I), r'\1"<REDACTED>"'),
        (re.compile(r"(Authorization['\"]?\s*[:=]\s*['\"]?)(Basic|Bearer)\s+\S+", re.I),
         r"\1<REDACTED>"),
    ]

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is not ours to fix
            return True
        for pattern, repl in self._patterns:
            message = pattern.sub(repl, message)
        record.msg, record.args = message, None
        return True


for _name in ("redfish", "redfish.rest.v1"):
    logging.getLogger(_name).addFilter(_ScrubFilter())


class BmcEndpoint:
    """Where and how to reach one BMC. The password never shows in repr or str."""

    def __init__(self, host: str, address: str, username: str, password: str,
                 ca_bundle: Optional[str] = None, allow_http: bool = False,
                 timeout: float = 30.0, get_retries: int = 4, backoff: float = 1.0,
                 max_backoff: float = 30.0, vendor: Optional[str] = None,
                 auth: str = "auto") -> None:
        if auth not in AUTH_MODES:
            raise ValueError(f"auth must be one of {', '.join(AUTH_MODES)}, not {auth!r}")
        if "://" not in address:
            address = "https://" + address
        self.host = host
        self.address = address.rstrip("/")
        self.username = username
        self._password = password
        self.ca_bundle = ca_bundle or None
        self.allow_http = allow_http
        self.timeout = float(timeout)
        self.get_retries = int(get_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.vendor = vendor or None
        self.auth = auth

    @property
    def password(self) -> str:
        return self._password

    def __repr__(self) -> str:
        return (f"BmcEndpoint(host={self.host!r}, address={self.address!r}, "
                f"user={self.username!r}, auth={self.auth!r})")

    __str__ = __repr__


class Response:
    """What the BMC answered: status, headers (lower-case keys) and the JSON body if any.

    `body` is the decoded JSON object, or {} when the answer had no body or was not an object
    (`get` refuses the latter for successful answers); `parsed` is whatever was decoded."""

    def __init__(self, status: int, headers: Dict[str, str], body: Any, text: str,
                 path: str = "", host: Optional[str] = None) -> None:
        self.status = status
        self.headers = headers
        self.parsed = body
        self.body: Dict[str, Any] = body if isinstance(body, dict) else {}
        self.text = text
        self.path = path
        self.host = host

    def resource(self) -> Resource:
        """The body as a typed Resource (errors name the host and this URI)."""
        return Resource(self.body, self.host, self.path)

    @property
    def etag(self) -> Optional[str]:
        header = self.headers.get("etag")
        if header:
            return header
        value = self.body.get("@odata.etag")
        return value if isinstance(value, str) and value else None

    @property
    def location(self) -> Optional[str]:
        return self.headers.get("location")

    def retry_after(self, default: float) -> float:
        value = self.headers.get("retry-after")
        if value is None:
            return default
        try:
            return max(0.0, float(value))
        except ValueError:
            return default  # an HTTP date: fall back to our own backoff

    def notices(self) -> List[str]:
        """What a successful answer says in @Message.ExtendedInfo (at the top or in an error
        object), success messages left out: a BMC may accept a write with 200 and say there
        what it did not do."""
        out = []
        for info in _extended_info(self.body) + _extended_info(self.body.get("error")):
            message_id = str(info.get("MessageId") or "")
            if not message_id or message_id.endswith("Success"):
                continue
            related = [str(p) for p in info.get("RelatedProperties") or []
                       if isinstance(p, str)][:5]
            where = f" ({', '.join(related)})" if related else ""
            out.append(f"{message_id[:80]}{where}: {str(info.get('Message') or '')[:200]}")
        return out

    def error_message(self) -> str:
        """The BMC's own explanation of an error response, if it gave one."""
        err = self.body.get("error") if self.body else None
        if isinstance(err, dict):
            texts = [str(i.get("Message") or i.get("MessageId") or "")[:200]
                     for i in _extended_info(err)]
            return ("; ".join(t for t in texts if t)
                    or str(err.get("message") or err.get("code") or "")[:200])
        return self.text[:200] if self.text else ""


def _extended_info(holder: Any) -> List[Dict[str, Any]]:
    """The message objects of `holder`'s @Message.ExtendedInfo (none unless it is a list)."""
    found = holder.get("@Message.ExtendedInfo") if isinstance(holder, dict) else None
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def decode_json(raw: str) -> Any:
    """The JSON value of an answer's text; None when empty or not JSON (or nested absurdly)."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def system_ca_store(host: Optional[str] = None) -> str:
    """The operating system's CA store (file, else directory), as OpenSSL is configured.

    An empty `ca_bundle` means this store (config.schema.yaml), never certifi's bundle and never
    "no verification": a BMC certificate must chain to a CA the machine's administrator trusts.
    """
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, DEBIAN_CA_FILE):
        if candidate and os.path.isfile(candidate):
            return candidate
    for candidate in (paths.capath, os.path.dirname(DEBIAN_CA_FILE)):
        if candidate and os.path.isdir(candidate):
            return candidate
    raise RedfishError("no system CA store found (looked at "
                       f"{paths.cafile or paths.openssl_cafile}, {DEBIAN_CA_FILE}, "
                       f"{paths.capath or paths.openssl_capath}); give the BMC CA in the pack "
                       "config ca_bundle", host)


def _read_environment_once(http: requests.Session, address: str) -> None:
    """Take the proxy for this BMC from the environment (HTTPS_PROXY, NO_PROXY, ...) once, when
    the session opens, instead of at every request.

    requests reads the environment at every request of a session that trusts it: the proxy
    variables (0.5 ms of CPU a request measured here, a fifth of the client's own), and
    ~/.netrc, whose entry for the BMC's address would replace the configured credentials of a
    basic-auth session. The certificate store is ours anyway (verify is always a path here, so
    REQUESTS_CA_BUNDLE never applied). Every request of a session goes to the one BMC address,
    so the proxy decided for it holds for all of them."""
    http.proxies.update(requests.utils.get_environ_proxies(address))
    http.trust_env = False


def _cafile(endpoint: BmcEndpoint) -> str:
    if endpoint.ca_bundle:
        return endpoint.ca_bundle
    return system_ca_store(endpoint.host)


class RedfishSession:
    """One logged-in session with one BMC. Use as a context manager."""

    def __init__(self, endpoint: BmcEndpoint, sleep: Callable[[float], None] = time.sleep) -> None:
        self.endpoint = endpoint
        self._sleep = sleep
        self._client: Any = None
        self._logged_in = False
        self._basic_confirmed = False  # basic auth: a request has been accepted with it
        # what went on the wire: method -> count, and (method, path) in order
        self.requests: Counter = Counter()
        self.sent: List[Tuple[str, str]] = []
        self.root: Dict[str, Any] = {}
        self.auth: Optional[str] = None  # "session" | "basic" once open
        # documents read since the last write: path -> (monotonic time read, answer)
        self._recent: Dict[str, Tuple[float, Response]] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RedfishSession:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def host(self) -> str:
        return self.endpoint.host

    def open(self) -> None:
        ep = self.endpoint
        if ep.address.startswith("http://") and not ep.allow_http:
            raise RedfishError(
                f"BMC address {ep.address} is plain http; TLS is required (set "
                "allow_insecure_http only for labs)", ep.host)
        if not ep.address.startswith(("https://", "http://")):
            raise RedfishError(f"BMC address {ep.address} must start with https://", ep.host)
        self._client = redfish.redfish_client(
            base_url=ep.address, username=ep.username, password=ep.password,
            cafile=_cafile(ep), timeout=ep.timeout, max_retry=0, check_connectivity=False)
        _read_environment_once(self._client._session, ep.address)
        self._count_wire(self._client)
        root = self.get("/redfish/v1/")
        self.root = root.body
        # the library GETs the service root again at login unless it already holds it
        self._client.root = RisObject.parse(self.root)
        self._client.root_resp = root
        sessions_uri = root.resource().obj("Links").link("Sessions")
        self.auth = self._choose_auth(sessions_uri)
        if sessions_uri:
            self._client.login_url = sessions_uri
        self._login()

    def _choose_auth(self, sessions_uri: Optional[str]) -> str:
        ep = self.endpoint
        if ep.auth == "basic":
            return "basic"
        if sessions_uri:
            return "session"
        if ep.auth == "session":
            raise RedfishError("auth 'session' is configured but the service root offers no "
                               "sessions (no Links.Sessions); use auth 'basic' or 'auto' for "
                               "this BMC", ep.host)
        return "basic"

    def _count_wire(self, client: Any) -> None:
        """Count every request the library's HTTP session sends (redirects included)."""
        http = client._session
        send = http.send

        def counted_send(request: Any, **kwargs: Any) -> Any:
            method = str(request.method or "GET").upper()
            path = urlsplit(str(request.url)).path
            self.requests[method] += 1
            self.sent.append((method, path))
            wanted_stream = kwargs.get("stream", False)
            kwargs["stream"] = True
            response = send(request, **kwargs)
            if not wanted_stream:
                _read_capped(response, path)
            return response

        http.send = counted_send

    def _login(self) -> None:
        ep = self.endpoint
        if self.auth == "basic":
            # no login request: basic credentials ride on every request, and the first one
            # tells whether they are accepted (a 401 then is "invalid credentials")
            token = base64.b64encode(f"{ep.username}:{ep.password}".encode()).decode()
            self._client.set_authorization_key("Basic " + token)
            self._logged_in = True
            return
        attempt = 0
        while True:
            attempt += 1
            try:
                self._client.login(auth="session")
                self._logged_in = True
                return
            except InvalidCredentialsError:
                raise RedfishError(f"login as {ep.username!r} refused: invalid credentials",
                                   ep.host, status=401) from None
            except RetriesExhaustedError as err:
                if isinstance(err.__cause__ or err.__context__, BodyTooLarge):
                    raise RedfishError("session login: answer larger than "
                                       f"{MAX_BODY_BYTES} bytes; refused", ep.host) from None
                if attempt > ep.get_retries:
                    raise RedfishError(f"login failed after {attempt} attempts: "
                                       f"{self._scrub(str(err)).splitlines()[0]}", ep.host,
                                       transient=True) from None
                self._sleep(self._backoff(attempt, None))
            except (SessionCreationError, ServerDownOrUnreachableError) as err:
                if attempt > ep.get_retries:
                    raise RedfishError(f"login failed after {attempt} attempts: "
                                       f"{self._scrub(str(err)).splitlines()[0]}", ep.host,
                                       transient=True) from None
                self._sleep(self._backoff(attempt, None))
            except Exception as err:  # the library choked on a malformed login answer
                raise RedfishError(f"session login at {self._client.login_url}: the BMC's answer "
                                   f"could not be read ({type(err).__name__})", ep.host) from None

    def close(self) -> None:
        if self._client is None:
            return
        try:
            if self._logged_in:
                self._client.logout()  # DELETE of the session; nothing sent under basic auth
        except Exception as err:  # logout must never mask the real outcome
            LOG.warning("%s: logout failed: %s", self.host, self._scrub(str(err)))
        finally:
            self._logged_in = False
            self._client = None

    # ------------------------------------------------------------------ helpers
    def _scrub(self, text: str) -> str:
        password = self.endpoint.password
        if password:
            text = text.replace(password, "<REDACTED>")
        return text

    def _backoff(self, attempt: int, response: Optional[Response]) -> float:
        ep = self.endpoint
        delay = min(ep.max_backoff, ep.backoff * (2 ** (attempt - 1)))
        delay = delay * (0.75 + random.random() * 0.5)  # jitter: a fleet must not retry in step
        if response is not None:
            delay = min(ep.max_backoff, response.retry_after(delay))
        return delay

    def _raw(self, method: str, path: str, body: Any = None,
             headers: Optional[Dict[str, str]] = None) -> Response:
        if self._client is None:
            raise RedfishError("session is not open", self.host)
        call = getattr(self._client, method.lower())
        kwargs: Dict[str, Any] = {"headers": headers or {}, "timeout": self.endpoint.timeout,
                                  "max_retry": 0}
        if body is not None:
            kwargs["body"] = body
        try:
            resp = call(path, **kwargs)
        except RetriesExhaustedError as err:
            too_large = err.__cause__ or err.__context__
            if isinstance(too_large, BodyTooLarge):
                raise RedfishError(f"{method} {path}: answer larger than {too_large.limit} bytes;"
                                   " refused (not a Redfish resource this tool reads)",
                                   self.host) from None
            raise
        text = resp.text or ""
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if self._logged_in and resp.status != 401:
            self._basic_confirmed = True
        return Response(resp.status, hdrs, decode_json(text), text, path, self.host)

    def _transport_error(self, err: BaseException) -> str:
        cause = err.__cause__ or err.__context__ or err
        name = type(cause).__name__
        text = self._scrub(str(cause)).splitlines()[0] if str(cause) else name
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSLError" in name:
            return (f"TLS verification failed ({text[:160]}); give the BMC CA in the pack "
                    "config ca_bundle")
        return f"{name}: {text[:200]}"

    # ------------------------------------------------------------------ requests
    def get(self, path: str, ok: Iterable[int] = (200,)) -> Response:
        """GET with retries (transport errors, 502/503/504), re-login on 401."""
        attempt = 0
        relogged = False
        while True:
            attempt += 1
            try:
                resp = self._raw("GET", path)
            except RetriesExhaustedError as err:
                if attempt > self.endpoint.get_retries:
                    raise RedfishError(f"GET {path}: unreachable after {attempt} attempts: "
                                       f"{self._transport_error(err)}", self.host,
                                       transient=True) from None
                self._sleep(self._backoff(attempt, None))
                continue
            if resp.status == 401 and self._retry_after_401(relogged):
                relogged = True
                attempt -= 1
                continue
            if resp.status in _TRANSIENT_STATUSES:
                if attempt > self.endpoint.get_retries:
                    raise RedfishError(f"GET {path}: HTTP {resp.status} after {attempt} attempts",
                                       self.host, status=resp.status, transient=True)
                self._sleep(self._backoff(attempt, resp))
                continue
            if resp.status not in tuple(ok):
                raise RedfishError(f"GET {path}: HTTP {resp.status} {resp.error_message()}",
                                   self.host, status=resp.status)
            self._check_object(resp)
            if resp.status == 200:
                self._recent[path] = (time.monotonic(), resp)
            return resp

    def recent(self, path: str, max_age: float = RECENT_MAX_AGE) -> Response:
        """`path` as read by this session since its last write and at most `max_age` seconds
        ago, else GET it. Only for documents that change by our writes (or a reset, which is a
        write): never for restart evidence."""
        seen = self._recent.get(path)
        if seen is not None and time.monotonic() - seen[0] <= max_age:
            return seen[1]
        return self.get(path)

    def forget(self) -> None:
        """Drop every document `recent` could reuse (done before every write)."""
        self._recent.clear()

    def resource(self, path: str) -> Resource:
        """GET `path` and return its JSON object as a typed Resource."""
        return self.get(path).resource()

    def _check_object(self, resp: Response) -> None:
        """A successful answer with a body must be one JSON object (Redfish resources are)."""
        if not 200 <= resp.status < 300 or not resp.text.strip():
            return
        if resp.parsed is None:
            raise RedfishError(f"GET {resp.path}: HTTP {resp.status} answer is not JSON",
                               self.host, status=resp.status)
        if not isinstance(resp.parsed, dict):
            raise RedfishError(f"GET {resp.path}: answer is {json_type(resp.parsed)}, expected "
                               "a JSON object", self.host, status=resp.status)

    def _retry_after_401(self, relogged: bool) -> bool:
        """A 401: log in again once (session), or say the credentials are refused (basic)."""
        if not self._logged_in:
            return False
        if self.auth == "basic":
            if not self._basic_confirmed:
                raise RedfishError(f"login as {self.endpoint.username!r} refused: invalid "
                                   "credentials (HTTP basic auth)", self.host, status=401)
            return False  # accepted before, refused now: the caller gets the 401
        if relogged:
            return False
        LOG.info("%s: session expired (401); logging in again", self.host)
        self._logged_in = False
        self._login()
        return True

    def write(self, method: str, path: str, body: Any = None,
              headers: Optional[Dict[str, str]] = None,
              ok: Iterable[int] = (200, 201, 202, 204)) -> Response:
        """POST/PATCH/DELETE exactly once. Re-sent only after a 401, which the BMC did not act on.

        A transport error raises WriteOutcomeUnknown: the caller must look at the BMC's state to
        learn whether the write happened. 503 raises a transient RedfishError (not carried out).
        """
        relogged = False
        self.forget()  # whatever happens to this write, what was read before may be stale
        while True:
            try:
                resp = self._raw(method, path, body, headers)
            except RetriesExhaustedError as err:
                raise WriteOutcomeUnknown(
                    f"{method} {path}: no answer ({self._transport_error(err)}); the BMC may "
                    "have carried it out; not resent", self.host, transient=True) from None
            if resp.status == 401 and self._retry_after_401(relogged):
                relogged = True
                continue
            if resp.status not in tuple(ok):
                raise RedfishError(f"{method} {path}: HTTP {resp.status} {resp.error_message()}",
                                   self.host, status=resp.status,
                                   transient=resp.status in _TRANSIENT_STATUSES)
            return resp

    def post(self, path: str, body: Any, **kw: Any) -> Response:
        return self.write("POST", path, body, **kw)

    def patch(self, path: str, body: Any, etag: Optional[str] = None, **kw: Any) -> Response:
        headers = {"If-Match": etag} if etag else None
        return self.write("PATCH", path, body, headers=headers, **kw)

    def delete(self, path: str, **kw: Any) -> Response:
        return self.write("DELETE", path, None, **kw)

    def _monitor_path(self, location: str) -> str:
        """The task monitor path of a Location header (same BMC only)."""
        parts = urlsplit(location)
        if parts.scheme or parts.netloc:
            own = urlsplit(self.endpoint.address)
            if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):
                raise RedfishError(f"task monitor Location points to another server "
                                   f"({parts.scheme}://{parts.netloc}); not followed", self.host)
        return check_uri(parts.path, self.host, "task monitor Location header")

    def wait_task(self, response: Response, timeout: float = 300.0) -> Response:
        """Follow a 202 task monitor until the task is done, honouring Retry-After."""
        if response.status != 202 or not response.location:
            return response
        monitor = self._monitor_path(response.location)
        deadline = time.monotonic() + timeout
        current = response
        while current.status == 202:
            if time.monotonic() > deadline:
                raise RedfishError(f"task {monitor} not finished after {timeout:.0f}s", self.host,
                                   transient=True)
            self._sleep(min(self.endpoint.max_backoff, current.retry_after(1.0)))
            current = self.get(monitor, ok=(200, 201, 202, 204))
        state = current.resource().text("TaskState")
        if state in ("Exception", "Killed", "Cancelled"):
            raise RedfishError(f"task {monitor} ended {state}: {current.error_message()}",
                               self.host)
        return current


def _read_capped(response: Any, path: str, limit: Optional[int] = None) -> None:
    """Read a streamed requests.Response into memory, refusing more than `limit` bytes."""
    limit = MAX_BODY_BYTES if limit is None else limit
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        response.close()
        raise BodyTooLarge(path, limit)
    chunks: List[bytes] = []
    size = 0
    for chunk in response.iter_content(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            response.close()
            raise BodyTooLarge(path, limit)
        chunks.append(chunk)
    response._content = b"".join(chunks)
    response._content_consumed = True


def odata_id(obj: Any) -> Optional[str]:
    if isinstance(obj, dict):
        value = obj.get("@odata.id")
        return str(value) if value else None
    return None


def split_etag(value: Optional[str]) -> Tuple[bool, Optional[str]]:
    """(weak, bare value) of an ETag header."""
    if not value:
        return False, None
    value = value.strip()
    if value.startswith("W/"):
        return True, value[2:]
    return False, value
