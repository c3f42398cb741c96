"""`/auth/v1/tokens` (st2auth: a token for a user of the flat file) and `/api/v1/apikeys`.

API keys under RBAC, as st2's auth controller with st2-rbac-backend: creating one needs
`api_key_create`, listing `api_key_list` (a system role has both); a user sees and deletes
their own keys when they may create keys, an admin anyone's; a key for another user is an
admin's to create."""
from __future__ import annotations

import logging
from typing import Any, Dict, List

from fleet_runtime.st2api import users as users_file
from fleet_runtime.st2api.credentials import TokenTtlError
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ApiService

LOG = logging.getLogger(__name__)


class Auth:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.creds = service.credentials

    def register(self, router: Router) -> None:
        router.add("POST", "/auth/v1/tokens", self.create_token, public=True)
        router.add("POST", "/auth/v1/tokens/validate", self.validate_token, public=True)
        router.add("GET", "/api/v1/apikeys", self.list_keys)
        router.add("POST", "/api/v1/apikeys", self.create_key)
        router.add("GET", "/api/v1/apikeys/{key_id}", self.get_key)
        router.add("DELETE", "/api/v1/apikeys/{key_id}", self.delete_key)

    def create_token(self, req: Request) -> Response:
        if req.basic_auth is None:
            raise HttpError(401, "Authorization header missing or invalid (Basic user:password)")
        name, password = req.basic_auth
        if not self.svc.login(name, password):
            LOG.info("authentication failed for user %r", name)  # never the password
            raise HttpError(401, "Invalid or missing credentials")
        body = req.body if isinstance(req.body, dict) else {}
        try:
            token = self.creds.issue_token(name, body.get("ttl"))
        except TokenTtlError as e:
            raise HttpError(400, str(e)) from None
        return Response(201, token)

    def validate_token(self, req: Request) -> Dict[str, Any]:
        token = req.json_body().get("token")
        return {"valid": bool(isinstance(token, str) and self.creds.token(token))}

    def _mine(self, req: Request, key_id: str, permission: str) -> Dict[str, Any]:
        key = self.creds.api_key(key_id)
        if key is None or (key["user"] != req.user and not self.svc.is_admin(req.user)):
            raise HttpError(404, f'Resource with a reference or id "{key_id}" not found')
        self.svc.check(self.svc.rbac.may(req.user, "api_key_create")
                       or self.svc.rbac.may_resource(req.user, permission, [f"api_key:{key_id}"]),
                       req.user, permission, f"api_key:{key_id}")
        return key

    def list_keys(self, req: Request) -> List[Dict[str, Any]]:
        self.svc.check(self.svc.rbac.may(req.user, "api_key_list"), req.user, "api_key_list")
        if self.svc.is_admin(req.user):
            return self.creds.api_keys()
        return self.creds.api_keys(req.user)

    def create_key(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "api_key_create"), req.user,
                       "api_key_create")
        body = req.body if isinstance(req.body, dict) else {}
        user = body.get("user") or req.user
        if user != req.user and not self.svc.is_admin(req.user):
            raise HttpError(403, f'Administrator access required for user "{req.user}" to'
                                 " create an API key for another user")
        try:
            users_file.check_name(str(user))
        except users_file.UsersFileError as e:
            raise HttpError(400, str(e)) from None
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise HttpError(400, '"metadata" must be an object')
        return Response(201, self.creds.create_api_key(str(user), metadata))

    def get_key(self, req: Request, key_id: str) -> Dict[str, Any]:
        return self._mine(req, key_id, "api_key_view")

    def delete_key(self, req: Request, key_id: str) -> Response:
        self._mine(req, key_id, "api_key_delete")
        self.creds.delete_api_key(key_id)
        return Response(204, None)
