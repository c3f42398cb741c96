"""A minimal local stand-in for the st2 API that actions call (127.0.0.1 only).

st2 gives every action execution `ST2_ACTION_API_URL` and a short-lived `ST2_ACTION_AUTH_TOKEN`;
actions use them e.g. to answer an inquiry from chat. The engine serves the same endpoints on
an ephemeral loopback port, with one token per running execution, acting as the execution's
context user as st2's action tokens do (st2actions/container/base.py _create_auth_token), with
that user's RBAC grants once the home has RBAC definitions (fleet_runtime/rbac.py:
action_execute to start, execution_stop to pause, resume, cancel or complete, inquiry_respond
to answer; a home without an rbac/ directory serves one owner, whose executions act freely):

    GET  /api/v1/inquiries            pending inquiries  [{id, route, ttl, users, roles, schema}]
    GET  /api/v1/inquiries/<id>       one pending inquiry
    PUT  /api/v1/inquiries/<id>       {"id": ..., "response": {...}} -> {"id", "response"}
    POST /api/v1/executions           {"action": ref, "parameters": {...}} -> the new execution
                                      (201), started as the token's user
    GET  /api/v1/executions           ?action=<ref>&status=<status>&parent=<id>&limit=<n>: the
                                      executions that match, newest first (st2's default
                                      limit, 50; at most 100)
    GET  /api/v1/executions/<id>      an execution (secrets masked; execution_view)
    GET  /api/v1/executions/<id>/children   its direct children (record_answer reads the answer)
    PUT  /api/v1/executions/<id>      {"status": "pausing" | "resuming" | "canceling"}, or a
                                      completed status and a result: st2's update_status, which
                                      completes the execution as given (a workflow's tasks are
                                      left as they are)
    GET  /api/v1/actionalias/<ref>    an action alias (chatops.format_execution_result)
    GET  /api/v1/keys                 ?prefix=&limit=&offset=: system-scoped keys, a page at a
                                      time (fleet_runtime/local_keys.py)
    GET|PUT|DELETE /api/v1/keys/<name>  one system-scoped key

A request carries the execution's token (X-Auth-Token), or an API key (St2-Api-Key) of a user
in the home's users file: it then acts as that user, as st2api does (the pack's state account).
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, Optional, Tuple

from fleet_runtime.local_keys import ApiKeyUsers, LocalKeys
from fleet_runtime.rbac import AccessDenied, alias_uid
from fleet_runtime.runtime_errors import (
    ExecutionStateError,
    InquiryError,
    NotFoundError,
    RuntimeErrorBase,
)
from fleet_runtime.st2api import views
from fleet_runtime.st2api.http import MAX_BODY, SOCKET_TIMEOUT, BoundedHTTPServer


class LocalApi:
    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        rbac = runtime.home.rbac()
        self.rbac = rbac if rbac.defined else None
        self.tokens: Dict[str, str] = {}
        self._lock = threading.Lock()
        self.keys = LocalKeys(runtime.datastore, self.rbac)
        self.key_users = ApiKeyUsers(runtime.home)
        api = self

        class Handler(BaseHTTPRequestHandler):
            timeout = SOCKET_TIMEOUT  # a client that stops sending or reading is dropped

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                data = b"" if code == 204 else json.dumps(body, default=str).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                user = api.user_for(self.headers.get("X-Auth-Token")) or \
                    api.key_users.user_for(self.headers.get("St2-Api-Key"))
                if user is None:
                    self._send(401, {"faultstring": "Unauthorized - invalid or missing token"})
                    return
                body = None
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    self._send(400, {"faultstring": "bad Content-Length"})
                    return
                if length > MAX_BODY:
                    self._send(413, {"faultstring": "the request body is too large"})
                    return
                if length > 0:
                    try:
                        body = json.loads(self.rfile.read(length))
                    except ValueError:
                        self._send(400, {"faultstring": "request body is not JSON"})
                        return
                code, payload = api.dispatch(method, self.path, body, user)
                self._send(code, payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self.server = BoundedHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="local-st2-api")
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/api/v1"

    def issue_token(self, user: str) -> str:
        token = secrets.token_hex(16)
        with self._lock:
            self.tokens[token] = user
        return token

    def revoke(self, token: Optional[str]) -> None:
        with self._lock:
            self.tokens.pop(token or "", None)

    def user_for(self, token: Optional[str]) -> Optional[str]:
        with self._lock:
            return self.tokens.get(token or "")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ endpoints
    def dispatch(self, method: str, path: str, body: Any, user: str) -> Tuple[int, Any]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts[:2] != ["api", "v1"]:
            return 404, {"faultstring": f"unknown path {path}"}
        parts = parts[2:]
        try:
            if parts[:1] == ["keys"]:
                return self.keys.dispatch(method, path, body, user)
            if parts == ["inquiries"] and method == "GET":
                rows = self.runtime.store.find_executions(
                    "runner='inquirer' AND status='pending'")
                return 200, [views.inquiry(r) for r in rows]
            if len(parts) == 2 and parts[0] == "inquiries":
                record = self.runtime.inquiry(parts[1])
                if method == "GET":
                    if record["status"] != "pending":
                        return 400, {"faultstring": f'Inquiry "{record["id"]}" is'
                                                    f' {record["status"]}.'}
                    return 200, views.inquiry(record)
                if method == "PUT":
                    if self.rbac is not None:
                        parent = record.get("parent_id")
                        found = self.runtime.store.get_execution(parent) if parent else None
                        self.rbac.require_inquiry(user, "inquiry_respond", record["id"],
                                                  found["action"] if found else None)
                    response = (body or {}).get("response")
                    result = self.runtime.respond(record["id"], response, requester=user)
                    return 200, {"id": result["id"], "response": result["response"]}
            if len(parts) == 2 and parts[0] == "actionalias" and method == "GET":
                for alias in self.runtime.registry.aliases:
                    if parts[1] in (alias.ref, alias.name):
                        uid = alias_uid(alias.pack, alias.name)
                        if self.rbac is not None and not self.rbac.may_resource(
                                user, "action_alias_view", [uid, f"pack:{alias.pack}"]):
                            raise AccessDenied(user, "action_alias_view", uid)
                        return 200, views.alias(alias)
                return 404, {"faultstring": f'Resource with a reference or id "{parts[1]}"'
                                            " not found"}
            if len(parts) == 2 and parts[0] == "executions" and method == "GET":
                from fleet_runtime import render

                record = self.runtime._execution(parts[1])
                self._may_view(user, record)
                return 200, render.public(self.runtime.registry, record)
            if parts == ["executions"] and method == "POST":
                return self._start(body, user)
            if parts == ["executions"] and method == "GET":
                return self._list(path)
            if len(parts) == 2 and parts[0] == "executions" and method == "PUT":
                return self._control(parts[1], body, user)
            if len(parts) == 3 and parts[0] == "executions" and parts[2] == "children" \
                    and method == "GET":  # st2: depth=1, the direct children
                from fleet_runtime import render

                record = self.runtime._execution(parts[1])
                self._may_view(user, record)
                return 200, [render.public(self.runtime.registry, child) for child in
                             self.runtime.store.find_executions("parent_id=?", (record["id"],))]
        except AccessDenied as e:
            return 403, {"faultstring": str(e)}
        except NotFoundError as e:
            return 404, {"faultstring": str(e)}
        except InquiryError as e:
            code = 403 if "not authorized" in str(e) else 400
            return code, {"faultstring": str(e)}
        except ExecutionStateError as e:  # st2: respond's resume of a pausing parent, 500
            return 500, {"faultstring": str(e)}
        except RuntimeErrorBase as e:
            return 400, {"faultstring": str(e)}
        return 404, {"faultstring": f"{method} {path} is not supported by the local API"}

    def _may_view(self, user: str, record: Dict[str, Any]) -> None:
        """st2's execution_view: action_view on the execution's action (or its pack)."""
        if self.rbac is not None:
            self.rbac.require_execution(user, "execution_view", record["id"],
                                        record["action"])

    def _start(self, body: Any, user: str) -> Tuple[int, Any]:
        """st2api's POST /executions: the action and its parameters (literals, never
        rendered), started as `user`; answers 201 with the new execution."""
        from fleet_runtime import render

        if not isinstance(body, dict) or not isinstance(body.get("action"), str):
            return 400, {"faultstring": "the body needs `action`: the action's ref"}
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            return 400, {"faultstring": "`parameters` must be an object"}
        if body["action"] not in self.runtime.registry.actions:
            return 404, {"faultstring": f'Action "{body["action"]}" cannot be found.'}
        if self.rbac is not None:
            self.rbac.require_action(user, "action_execute", body["action"])
        started = self.runtime.submit_queued("run", {
            "action": body["action"], "parameters": parameters, "context": {"user": user}})
        return 201, render.public(self.runtime.registry, self.runtime._execution(started["id"]))

    def _list(self, path: str) -> Tuple[int, Any]:
        """st2api's GET /executions with its action, status and parent filters."""
        from urllib.parse import parse_qs, urlsplit

        from fleet_runtime import render

        query = {k: v[-1] for k, v in parse_qs(urlsplit(path).query).items()}
        where, args = ["1=1"], []
        for name, column in (("action", "action"), ("status", "status"),
                             ("parent", "parent_id")):
            if query.get(name):
                where.append(f"{column}=?")
                args.append(query[name])
        try:
            limit = min(100, max(1, int(query.get("limit") or 50)))
        except ValueError:
            return 400, {"faultstring": f"limit {query.get('limit')!r}: an integer"}
        rows = self.runtime.store.find_executions(" AND ".join(where), args,
                                                  order="created_ts DESC, rowid DESC",
                                                  limit=limit)
        return 200, [render.public(self.runtime.registry, row) for row in rows]

    def _ended(self, ex_id: str, timeout: float = 60.0) -> Dict[str, Any]:
        """The execution once the engine has recorded its end: st2's update_status writes
        the end before the PUT answers, so a GET right after it reads the completed
        status."""
        from fleet_runtime.statuses import COMPLETED

        deadline = time.monotonic() + timeout
        record = self.runtime._execution(ex_id)
        while record["status"] not in COMPLETED and time.monotonic() < deadline:
            time.sleep(0.05)
            record = self.runtime._execution(ex_id)
        return record

    def _control(self, ex_id: str, body: Any, user: str) -> Tuple[int, Any]:
        """st2api's PUT /executions/<id>: pause, resume and cancel as `user` (recorded as
        paused_by / resumed_by / cancelled_by), or a completed status with its result."""
        from fleet_runtime import render
        from fleet_runtime.statuses import COMPLETED, CONTROL_OF

        record = self.runtime._execution(ex_id)
        if self.rbac is not None:
            self.rbac.require_execution(user, "execution_stop", record["id"],
                                        record["action"])
        # a dead runner's execution: st2 completed its LiveAction, which this refusal reads
        if record["status"] in COMPLETED or record["id"] in \
                self.runtime.dead_runner_executions():
            return 400, {"faultstring": "Execution is already in completed state."}
        status = str((body or {}).get("status"))
        if status in COMPLETED:
            self.runtime.complete(record["id"], status, (body or {}).get("result"))
            return 200, render.public(self.runtime.registry, self._ended(record["id"]))
        op = CONTROL_OF.get(status)
        if op is None:
            return 400, {"faultstring": "Failed updating execution: status must be pausing,"
                                        " resuming, canceling or a completed status"}
        answer = getattr(self.runtime, op)(record["id"], requester=user)
        shown = render.public(self.runtime.registry, record)
        shown["status"] = answer.get("status", shown.get("status"))
        return 200, shown

