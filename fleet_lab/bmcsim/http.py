"""HTTP(S) front of the simulated BMCs: one aiohttp app, one listening port per BMC."""
from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
import ssl
import time
from typing import Any, Dict, List, Optional

from aiohttp import web

from fleet_lab.bmcsim import payloads
from fleet_lab.bmcsim.bmc_state import Bmc, SimError

# aiohttp logs a traceback when a handler cuts its own connection on purpose (fault injection)
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

_WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
TASK_SECONDS = 0.3
MAX_PAD_BYTES = 64 * 1024 * 1024


class _Dropped(Exception):
    """Raised after the handler cut the connection to simulate a lost response."""


def _json(status: int, body: Optional[Dict[str, Any]], headers: Optional[Dict[str, str]] = None
          ) -> web.Response:
    hdrs = {"OData-Version": "4.0", "Cache-Control": "no-cache"}
    hdrs.update(headers or {})
    if body is None:
        return web.Response(status=status, headers=hdrs)
    return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                        headers=hdrs)


def _error(err: SimError) -> web.Response:
    return _json(err.status, payloads.error(err.status, err.message_id, err.message, err.related))


def _etag_matches(header: str, etag: str) -> bool:
    def bare(value: str) -> str:
        value = value.strip()
        return value[2:] if value.startswith("W/") else value
    return any(bare(part) == bare(etag) or part.strip() == "*" for part in header.split(","))


class BmcService:
    """Serves many Bmc objects; the local port of a connection says which BMC it talks to."""

    def __init__(self, bmcs: List[Bmc], ssl_context: Optional[ssl.SSLContext]) -> None:
        self.bmcs = bmcs
        self.by_port = {b.port: b for b in bmcs}
        self.ssl_context = ssl_context
        self.app = web.Application(client_max_size=1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner: Optional[web.AppRunner] = None
        # lab fault injection: BMC name -> path -> what a GET of that path answers instead
        self.overrides: Dict[str, Dict[str, Dict[str, Any]]] = {}

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        for bmc in self.bmcs:
            site = web.TCPSite(self.runner, "127.0.0.1", bmc.port, ssl_context=self.ssl_context,
                               backlog=256, reuse_address=True)
            await site.start()
        for bmc in self.bmcs:
            bmc.start_host()

    async def stop(self) -> None:
        for bmc in self.bmcs:
            task = getattr(bmc, "_reboot", None)
            if task is not None and not task.done():
                task.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    # ------------------------------------------------------------------ entry
    async def handle(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        bmc = self.by_port.get(sockname[1]) if sockname else None
        if bmc is None:
            return _json(404, None)
        path = request.path.rstrip("/") or "/"
        if path.startswith("/_sim"):
            return await self._admin(bmc, request, path)
        if time.monotonic() < bmc.unreachable_until:
            self._cut(request)
            raise _Dropped()
        if bmc.faults.latency_ms:
            await asyncio.sleep(bmc.faults.latency_ms / 1000.0)
        if bmc.faults.unavailable > 0:
            bmc.faults.unavailable -= 1
            bmc.count("503")
            return _json(503, payloads.error(503, "Base.1.8.ServiceTemporarilyUnavailable",
                                             "The service is temporarily unavailable.", []),
                         {"Retry-After": str(bmc.faults.retry_after_s)})
        is_session = path.startswith(payloads.uris(bmc)["sessions"]) and request.method != "GET"
        bmc.count(f"session_{request.method}" if is_session else request.method)
        try:
            response = await self._dispatch(bmc, request, path)
        except SimError as err:
            return _error(err)
        if request.method in _WRITE_METHODS and bmc.faults.drop_after_write > 0 and not (
                path.startswith(payloads.uris(bmc)["sessions"])):
            bmc.faults.drop_after_write -= 1
            bmc.count("dropped")
            self._cut(request)
            raise _Dropped()
        return response

    @staticmethod
    def _cut(request: web.Request) -> None:
        transport = request.transport
        if transport is not None:
            transport.abort()

    # ------------------------------------------------------------------ auth
    def _authenticated(self, bmc: Bmc, request: web.Request) -> bool:
        token = request.headers.get("X-Auth-Token")
        if token:
            return bmc.session_for_token(token) is not None
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            return secrets.compare_digest(user, bmc.username) and secrets.compare_digest(
                password, bmc.password)
        return False

    async def _body(self, request: web.Request) -> Dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SimError(400, "Base.1.8.MalformedJSON", "The request body is not valid JSON."
                           ) from None
        if not isinstance(body, dict):
            raise SimError(400, "Base.1.8.MalformedJSON", "The request body must be an object.")
        return body

    # ------------------------------------------------------------------ routes
    async def _dispatch(self, bmc: Bmc, request: web.Request, path: str) -> web.Response:
        u = {k: v.rstrip("/") or "/" for k, v in payloads.uris(bmc).items()}
        method = request.method
        override = self.overrides.get(bmc.name, {}).get(path)
        if method == "GET" and override is not None:
            return _override_response(override)
        if path in ("/redfish", "/redfish/v1"):
            if path == "/redfish":
                return _json(200, {"v1": "/redfish/v1/"})
            return _json(200, payloads.service_root(bmc))
        if path == u["sessions"] and method == "POST" and not bmc.faults.no_sessions:
            return await self._login(bmc, request)
        if not self._authenticated(bmc, request):
            return _json(401, payloads.error(401, "Base.1.8.NoValidSession",
                                             "There is no valid session established.", []),
                         {"WWW-Authenticate": 'Basic realm="BMC"'})
        if method == "GET":
            return self._get(bmc, path, u)
        if method == "PATCH" and path == u["settings"]:
            return await self._patch_settings(bmc, request)
        if method == "POST" and path == u["reset"]:
            body = await self._body(request)
            bmc.reset(str(body.get("ResetType", "")))
            return _json(204, None)
        if method == "POST" and path == u["jobs"] and bmc.spec.commit.startswith("job"):
            body = await self._body(request)
            job = bmc.create_job(str(body.get("TargetSettingsURI", "")))
            return _json(200, None, {"Location": f"{u['jobs']}/{job.id}"})
        if method == "DELETE" and path.startswith(u["jobs"] + "/") and bmc.spec.commit.startswith(
                "job"):
            bmc.delete_job(path.rsplit("/", 1)[1])
            return _json(200, None)
        if method == "POST" and path == u["clear_pending"] and bmc.spec.key.startswith("dell"):
            bmc.clear_pending()
            return _json(200, None)
        if method == "DELETE" and path.startswith(u["sessions"] + "/"):
            session_id = path.rsplit("/", 1)[1]
            if bmc.sessions.pop(session_id, None) is None:
                raise SimError(404, "Base.1.8.ResourceMissingAtURI", f"No session {session_id}.")
            return _json(204, None)
        if path in u.values() or path.startswith(u["jobs"]):
            raise SimError(405, "Base.1.8.OperationNotAllowed",
                           f"{method} is not allowed on {path}.")
        raise SimError(404, "Base.1.8.ResourceMissingAtURI", f"The resource at {path} was not "
                       "found.")

    async def _login(self, bmc: Bmc, request: web.Request) -> web.Response:
        body = await self._body(request)
        user, password = str(body.get("UserName", "")), str(body.get("Password", ""))
        if not (secrets.compare_digest(user, bmc.username)
                and secrets.compare_digest(password, bmc.password)):
            return _json(401, payloads.error(401, "Base.1.8.NoValidSession",
                                             "Invalid user name or password.", []))
        session_id, token = bmc.create_session()
        location = f"{payloads.uris(bmc)['sessions']}/{session_id}"
        return _json(201, payloads.session(bmc, session_id),
                     {"X-Auth-Token": token, "Location": location})

    def _get(self, bmc: Bmc, path: str, u: Dict[str, str]) -> web.Response:
        simple = {
            u["systems"]: payloads.systems, u["system"]: payloads.system,
            u["registries"]: payloads.registries, u["registry_file"]: payloads.registry_file,
            u["registry_json"]: payloads.attribute_registry, u["managers"]: payloads.managers,
            u["manager"]: payloads.manager, u["session_service"]: payloads.session_service,
            u["sessions"]: payloads.sessions,
        }
        if path in simple:
            return _json(200, simple[path](bmc))
        if path == u["bios"]:
            return _json(200, payloads.bios(bmc), {"ETag": bmc.settings_etag})
        if path == u["settings"]:
            return _json(200, payloads.settings(bmc), {"ETag": bmc.settings_etag})
        if bmc.spec.commit.startswith("job"):
            if path == u["jobs"]:
                return _json(200, payloads.jobs(bmc))
            if path.startswith(u["jobs"] + "/"):
                item = bmc.jobs.get(path.rsplit("/", 1)[1])
                if item is not None:
                    return _json(200, payloads.job(bmc, item))
        if path.startswith(u["sessions"] + "/"):
            session_id = path.rsplit("/", 1)[1]
            if session_id in bmc.sessions:
                return _json(200, payloads.session(bmc, session_id))
        if path.startswith(u["task_monitors"] + "/"):
            task_id = path.rsplit("/", 1)[1]
            done_at = bmc.tasks.get(task_id)
            if done_at is not None:
                if time.monotonic() < done_at:
                    return _json(202, payloads.task(bmc, task_id, False), {"Retry-After": "1"})
                del bmc.tasks[task_id]
                return _json(204, None)
        raise SimError(404, "Base.1.8.ResourceMissingAtURI", f"The resource at {path} was not "
                       "found.")

    async def _patch_settings(self, bmc: Bmc, request: web.Request) -> web.Response:
        if_match = request.headers.get("If-Match")
        if if_match is None and bmc.spec.requires_if_match:
            raise SimError(428, "Base.1.8.PreconditionRequired",
                           "An If-Match header is required to modify this resource.")
        if if_match is not None and not _etag_matches(if_match, bmc.settings_etag):
            raise SimError(412, "Base.1.8.PreconditionFailed",
                           "The ETag supplied did not match the ETag of the resource.")
        body = await self._body(request)
        apply_time = body.pop("@Redfish.SettingsApplyTime", None)
        apply_on_reset = False
        if apply_time is not None:
            if bmc.spec.rejects_apply_time or not bmc.spec.supports_apply_time:
                raise SimError(400, "Base.1.8.PropertyUnknown",
                               "The property @Redfish.SettingsApplyTime is not in the list of "
                               "valid properties for the resource.",
                               ["/@Redfish.SettingsApplyTime"])
            if not isinstance(apply_time, dict) or apply_time.get("ApplyTime") != "OnReset":
                raise SimError(400, "Base.1.8.PropertyValueNotInList",
                               "ApplyTime must be OnReset.", ["/@Redfish.SettingsApplyTime"])
            apply_on_reset = True
        body = {k: v for k, v in body.items() if not k.startswith("@odata")}
        if bmc.spec.flat_body:
            attributes = body
            if "Attributes" in attributes:
                raise SimError(400, "Base.1.8.PropertyUnknown", "The property Attributes is not "
                               "in the list of valid properties for the resource.",
                               ["/Attributes"])
        else:
            extra = sorted(k for k in body if k != "Attributes")
            if extra or not isinstance(body.get("Attributes"), dict):
                raise SimError(400, "Base.1.8.PropertyUnknown",
                               f"Expected only an Attributes object; got {extra or 'none'}.",
                               [f"/{k}" for k in extra])
            attributes = body["Attributes"]
        dropped = bmc.patch_settings(attributes, apply_on_reset)
        if dropped is not None:  # fault invalid_accepted: 200, the error only in the body
            name, value = dropped["name"], dropped["value"]
            return _json(200, payloads.error(
                200, "Base.1.8.PropertyValueNotInList", f"The value {value} for the property "
                f"{name} is not supported on this platform; it was not applied.",
                [f"/Attributes/{name}"]))
        if bmc.spec.patch_returns_task:
            task_id = secrets.token_hex(6)
            bmc.tasks[task_id] = time.monotonic() + TASK_SECONDS
            return _json(202, payloads.task(bmc, task_id, False),
                         {"Location": f"{payloads.uris(bmc)['task_monitors']}/{task_id}",
                          "Retry-After": "1"})
        return _json(200, payloads.error(200, "Base.1.8.Success",
                                         "Successfully completed request.", []))

    # ------------------------------------------------------------------ admin (lab only)
    async def _admin_responses(self, bmc: Bmc, request: web.Request) -> web.Response:
        """Malformed answers on demand: POST {"path", "body"|"raw", "status", "content_type",
        "pad_bytes"} makes every GET of `path` answer that instead of the real resource (auth
        not checked, so the service root can be replaced too); DELETE removes them all."""
        mine = self.overrides.setdefault(bmc.name, {})
        if request.method == "DELETE":
            mine.clear()
            return _json(204, None)
        if request.method == "POST":
            spec = await request.json()
            problem = _override_problem(spec)
            if problem:
                return _json(400, {"error": problem})
            mine[spec["path"].rstrip("/") or "/"] = spec
        return _json(200, {"paths": sorted(mine)})

    # ------------------------------------------------------------------ admin (lab only)
    async def _admin(self, bmc: Bmc, request: web.Request, path: str) -> web.Response:
        if path == "/_sim/state" and request.method == "GET":
            return _json(200, bmc.state_document())
        if path == "/_sim/faults":
            if request.method == "POST":
                body = await request.json()
                try:
                    bmc.faults.update(body)
                except ValueError as err:
                    return _json(400, {"error": str(err)})
                if body.get("expire_sessions"):
                    bmc.expire_sessions()
                if float(body.get("unreachable_s", 0) or 0) > 0:
                    bmc.unreachable_until = time.monotonic() + float(body["unreachable_s"])
                    bmc.faults.unreachable_s = 0.0
            return _json(200, bmc.faults.to_dict())
        if path == "/_sim/responses":
            return await self._admin_responses(bmc, request)
        if path == "/_sim/counters" and request.method == "DELETE":
            bmc.counters.clear()
            bmc.resets.clear()
            return _json(204, None)
        return _json(404, {"error": f"no admin endpoint {path}"})


def _override_problem(spec: Any) -> Optional[str]:
    if not isinstance(spec, dict) or not isinstance(spec.get("path"), str):
        return "expected an object with a string path"
    if "body" not in spec and not isinstance(spec.get("raw"), str):
        return "give body (any JSON value) or raw (text)"
    pad = spec.get("pad_bytes", 0)
    if not isinstance(pad, int) or not 0 <= pad <= MAX_PAD_BYTES:
        return f"pad_bytes must be an integer from 0 to {MAX_PAD_BYTES}"
    return None


def _override_response(spec: Dict[str, Any]) -> web.Response:
    """The injected answer: JSON (any value, NaN allowed) or raw text, padded with spaces."""
    text = spec["raw"] if "raw" in spec else json.dumps(spec["body"])
    text += " " * int(spec.get("pad_bytes", 0))
    return web.Response(status=int(spec.get("status", 200)), text=text,
                        content_type=str(spec.get("content_type", "application/json")),
                        headers={"OData-Version": "4.0", "Cache-Control": "no-cache"})
