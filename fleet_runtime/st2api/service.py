"""The API bound to one runtime home: who is asking, and how changes reach the engine.

Reads come straight from the runtime database. Changes (run, pause, resume, cancel, respond)
are requests to the engine process through the database, as the other `fleet-rollout` commands
hand theirs to a running engine (st2api hands them to st2actionrunner through the message
bus): the API process never runs workflow code.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

from fleet_runtime import runtime_errors as errors
from fleet_runtime.rbac import AccessDenied
from fleet_runtime.st2api import users as users_file
from fleet_runtime.st2api.credentials import Credentials
from fleet_runtime.st2api.http import HttpError, Request

# RuntimeErrorBase subclasses and the status st2 answers with.
_STATUS = {
    "NotFoundError": 404,
    "ParameterError": 400,
    "AliasError": 400,
    "ExecutionStateError": 400,
    "InquiryError": 400,
    "SchemaError": 400,
}


ID_PATTERN = re.compile(r"^[0-9a-f]{6,32}$")  # an execution id, or a unique prefix of one
LOGINS_AT_ONCE = 4  # bcrypt checks in parallel: a flood of logins cannot take every core


class ApiService:
    def __init__(self, runtime: Any, users_path: Path, admins: Optional[List[str]] = None
                 ) -> None:
        self.rt = runtime
        self.users_path = Path(users_path)
        self.users = users_file.load(self.users_path)
        self._users_stamp: Optional[tuple] = None
        self.rbac = runtime.home.rbac(list(admins or []))
        self.credentials = Credentials(str(runtime.home.db_path),
                                       runtime.home.api_key_ttl_days * 86400.0)
        self._logins = threading.BoundedSemaphore(LOGINS_AT_ONCE)

    # ------------------------------------------------------------------ who
    def current_users(self) -> Dict[str, bytes]:
        """The users file as it is now (read again when it changed): a user removed from it
        loses their tokens and API keys at once."""
        try:
            stamp = self.users_path.stat()
            key = (stamp.st_mtime_ns, stamp.st_size)
        except OSError:
            return {}
        if key != self._users_stamp:
            try:
                self.users = users_file.load(self.users_path)
            except users_file.UsersFileError:
                self.users = {}
            self._users_stamp = key
        return self.users

    def authenticate(self, req: Request) -> Optional[str]:
        token = req.headers.get("X-Auth-Token") or req.query.get("x-auth-token")
        if token:
            found = self.credentials.token(token)
            if found is None:
                return None
            if found["user"] not in self.current_users():  # removed from the users file
                return None
            req.auth = {"method": "authentication token", "token_expire": found["expiry"]}
            return str(found["user"])
        key = req.headers.get("St2-Api-Key") or req.query.get("st2-api-key")
        if key:
            user = self.credentials.user_for_api_key(key)
            if user is None or user not in self.current_users():
                return None
            req.auth = {"method": "api key"}
            return user
        return None

    def login(self, name: str, password: str) -> bool:
        with self._logins:
            return users_file.verify(self.current_users(), name, password)

    def is_admin(self, user: Optional[str]) -> bool:
        return self.rbac.is_admin(user)

    def check(self, allowed: bool, user: Optional[str], permission: str,
              resource_uid: Optional[str] = None) -> None:
        """403 as st2 answers a missing RBAC grant."""
        if not allowed:
            raise HttpError(403, str(AccessDenied(str(user), permission, resource_uid)))

    # ------------------------------------------------------------------ changes
    def call(self, op: str, payload: Dict[str, Any]) -> Any:
        """Hand a change to the engine process and wait for its answer."""
        if not self.rt.engine_alive():
            raise HttpError(503, "the runtime's engine is not running (`fleet-rollout api`"
                                 " starts one; or run `fleet-rollout engine --forever`)")
        try:
            return self.rt.submit(op, payload)
        except errors.RuntimeErrorBase as e:
            if type(e) is errors.RuntimeErrorBase and "went away" in str(e):
                raise HttpError(503, str(e)) from None
            raise http_error(self.rt.masker.masked_error(e)) from None


def http_error(e: errors.RuntimeErrorBase) -> HttpError:
    name = type(e).__name__
    status = _STATUS.get(name, 400)
    if name == "InquiryError" and "not authorized" in str(e):
        status = 403
    return HttpError(status, str(e))
