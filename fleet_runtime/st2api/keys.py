"""`/api/v1/keys`: the datastore (st2api controllers/v1/keyvalue.py).

Secrets are masked unless `decrypt=true`, which st2 allows on system-scoped keys to
administrators only; user-scoped keys are the requester's own (another user's: admins).
With RBAC, as in st2's keyvalue controller, a system-scoped key is read only by a user with a
system role or a `key_value_pair_view` (or list, set, delete, all) grant on
`key_value_pair:st2kv.system:<name>`; a listing shows the others nothing of them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from fleet_runtime import datastore as ds
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ApiService

MASK = "********"


class Keys:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.store = service.rt.datastore

    def register(self, router: Router) -> None:
        router.add("GET", "/api/v1/keys", self.list)
        router.add("GET", "/api/v1/keys/{name}", self.get)
        router.add("PUT", "/api/v1/keys/{name}", self.put)
        router.add("DELETE", "/api/v1/keys/{name}", self.delete)

    def _scope(self, raw: Optional[str], default: str) -> str:
        try:
            return "all" if (raw or default) == "all" else ds.full_scope(raw or default)
        except ds.DatastoreError as e:
            raise HttpError(400, str(e)) from None

    def _user(self, req: Request, wanted: Optional[str]) -> str:
        if wanted and wanted != req.user:
            if not self.svc.is_admin(req.user):
                raise HttpError(403, f'"user" attribute can only be provided by admins when'
                                     f' RBAC is enabled (user "{req.user}")')
            return wanted
        assert req.user is not None
        return req.user

    def _check_decrypt(self, req: Request, scope: str) -> bool:
        decrypt = req.flag("decrypt")
        if decrypt and scope != ds.FULL_USER_SCOPE and not self.svc.is_admin(req.user):
            raise HttpError(403, "Decrypt option requires administrator access")
        return decrypt

    def _may_read_system(self, req: Request, name: str) -> bool:
        return self.svc.rbac.may_resource(req.user, "key_value_pair_view",
                                          [system_key_uid(name)])

    @staticmethod
    def _view(item: Dict[str, Any], decrypted: bool) -> Dict[str, Any]:
        out = dict(item)
        out["id"] = f"{item['scope']}:{item['name']}"
        out["uid"] = f"key_value_pair:{item['scope']}:{item['name']}"
        out["encrypted"] = bool(item["secret"]) and not decrypted
        if item["secret"] and not decrypted:
            out["value"] = MASK
        if out.get("expire_timestamp") is None:
            out.pop("expire_timestamp", None)
        return out

    def list(self, req: Request) -> Response:
        scope = self._scope(req.query.get("scope"), "all")
        user = self._user(req, req.query.get("user"))
        decrypt = self._check_decrypt(req, scope)
        prefix = req.query.get("prefix") or None
        items: List[Dict[str, Any]] = []
        if scope in ("all", ds.FULL_SYSTEM_SCOPE):
            items += [i for i in self.store.list(prefix, ds.SYSTEM_SCOPE, None, decrypt)
                      if self._may_read_system(req, i["name"])]
        if scope in ("all", ds.FULL_USER_SCOPE):
            items += self.store.list(prefix, ds.USER_SCOPE, user, decrypt)
        body = [self._view(i, decrypt) for i in items]
        return Response(200, body, {"X-Total-Count": str(len(body))})

    def get(self, req: Request, name: str) -> Dict[str, Any]:
        scope = self._scope(req.query.get("scope"), "system")
        if scope == "all":
            raise HttpError(400, "scope all is only for listing")
        user = self._user(req, req.query.get("user"))
        decrypt = self._check_decrypt(req, scope)
        short = ds.SYSTEM_SCOPE if scope == ds.FULL_SYSTEM_SCOPE else ds.USER_SCOPE
        if short == ds.SYSTEM_SCOPE:
            self.svc.check(self._may_read_system(req, name), req.user, "key_value_pair_view",
                           system_key_uid(name))
        for item in self.store.list(name, short, user, decrypt):
            if item["name"] == name:
                return self._view(item, decrypt)
        raise HttpError(404, f'Resource with a reference or id "{name}" not found')

    def put(self, req: Request, name: str) -> Dict[str, Any]:
        body = req.json_body()
        scope = self._scope(body.get("scope") or req.query.get("scope"), "system")
        if scope == "all":
            raise HttpError(400, "a key is set in scope system or user")
        user = self._user(req, body.get("user"))
        if scope == ds.FULL_SYSTEM_SCOPE and not self.svc.is_admin(req.user):
            raise HttpError(403, f'User "{req.user}" doesn\'t have required permission'
                                 ' "key_value_pair_set" on system-scoped keys')
        value = body.get("value")
        if not isinstance(value, str):
            raise HttpError(400, '"value" must be a string')
        ttl = body.get("ttl")
        if ttl is not None and (not isinstance(ttl, int) or ttl < 1):
            raise HttpError(400, '"ttl" must be a positive integer')
        short = ds.SYSTEM_SCOPE if scope == ds.FULL_SYSTEM_SCOPE else ds.USER_SCOPE
        self.store.set(name, value, short, user, bool(body.get("secret")), ttl)
        return self.get(_with_scope(req, short, user), name)

    def delete(self, req: Request, name: str) -> Response:
        scope = self._scope(req.query.get("scope"), "system")
        user = self._user(req, req.query.get("user"))
        if scope == ds.FULL_SYSTEM_SCOPE and not self.svc.is_admin(req.user):
            raise HttpError(403, f'User "{req.user}" doesn\'t have required permission'
                                 ' "key_value_pair_delete" on system-scoped keys')
        short = ds.SYSTEM_SCOPE if scope == ds.FULL_SYSTEM_SCOPE else ds.USER_SCOPE
        if not self.store.delete(name, short, user):
            raise HttpError(404, f'Resource with a reference or id "{name}" not found')
        return Response(204, None)


def system_key_uid(name: str) -> str:
    return f"key_value_pair:{ds.FULL_SYSTEM_SCOPE}:{name}"


def _with_scope(req: Request, scope: str, user: str) -> Request:
    query = {"scope": scope, "user": user}
    return Request(req.method, req.path, query, req.headers, None, req.user)
