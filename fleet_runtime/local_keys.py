"""`/api/v1/keys` of the engine's local API: the system-scoped datastore as st2api serves it to
actions (st2api controllers/v1/keyvalue.py), and the API keys that act as their users.

With RBAC, as st2-rbac-backend resolves key_value_pair grants: a system-scoped key is read by a
user with a system role or any key_value_pair grant on `key_value_pair:st2kv.system:<name>`,
set with `key_value_pair_set`, deleted with `key_value_pair_delete`; a listing leaves out what
the user may not read. A listing answers a page (st2's api.max_page_size, 100) unless an admin
asks for more. Secrets stay masked unless an admin asks to decrypt them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from fleet_runtime import datastore as ds
from fleet_runtime.rbac import AccessDenied, Rbac
from fleet_runtime.st2api import users as users_file
from fleet_runtime.st2api.credentials import Credentials

MASK = "********"
PAGE = 100  # st2's api.max_page_size


def key_uid(name: str) -> str:
    return f"key_value_pair:{ds.FULL_SYSTEM_SCOPE}:{name}"


class ApiKeyUsers:
    """Who an API key acts as: its user while the key is enabled and unexpired and the user is
    still in the home's users file (st2api-users)."""

    def __init__(self, home: Any) -> None:
        self.credentials = Credentials(str(home.db_path), home.api_key_ttl_days * 86400.0)
        self.users_path = home.path / users_file.USERS_FILE

    def user_for(self, key: Optional[str]) -> Optional[str]:
        if not key:
            return None
        user = self.credentials.user_for_api_key(key)
        if user is None:
            return None
        try:
            known = users_file.load(self.users_path)
        except (OSError, users_file.UsersFileError):
            return None
        return user if user in known else None


class LocalKeys:
    def __init__(self, store: ds.Datastore, rbac: Optional[Rbac]) -> None:
        self.store = store
        self.rbac = rbac

    def _may(self, user: str, permission: str, name: str) -> bool:
        return self.rbac is None or self.rbac.may_resource(user, permission, [key_uid(name)])

    def _require(self, user: str, permission: str, name: str) -> None:
        if not self._may(user, permission, name):
            raise AccessDenied(user, permission, key_uid(name))

    def _admin(self, user: str) -> bool:
        return self.rbac is None or self.rbac.is_admin(user)

    @staticmethod
    def _system(query: Dict[str, str]) -> None:
        if ds.full_scope(query.get("scope") or ds.SYSTEM_SCOPE) != ds.FULL_SYSTEM_SCOPE:
            raise ValueError("the local API serves system-scoped keys only (scope=system)")

    def _decrypt(self, user: str, query: Dict[str, str]) -> bool:
        decrypt = (query.get("decrypt") or "").lower() in ("1", "true", "yes")
        if decrypt and not self._admin(user):
            raise AccessDenied(user, "key_value_pair_view (decrypt: administrators only)",
                               None)
        return decrypt

    @staticmethod
    def _view(item: Dict[str, Any], decrypted: bool) -> Dict[str, Any]:
        out = {"name": item["name"], "value": item["value"], "scope": ds.FULL_SYSTEM_SCOPE,
               "secret": bool(item["secret"]), "encrypted": bool(item["secret"]) and not
               decrypted, "id": f"{ds.FULL_SYSTEM_SCOPE}:{item['name']}",
               "uid": key_uid(item["name"])}
        if item["secret"] and not decrypted:
            out["value"] = MASK
        return out

    def dispatch(self, method: str, path: str, body: Any, user: str) -> Tuple[int, Any]:
        """GET /keys, GET|PUT|DELETE /keys/<name> (path with its query string)."""
        split = urlsplit(path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        parts = [p for p in split.path.split("/") if p][2:]
        try:
            self._system(query if method != "PUT" else dict(query, **_scope_of(body)))
            if parts == ["keys"] and method == "GET":
                return 200, self.list(user, query)
            if len(parts) == 2 and parts[0] == "keys":
                name = unquote(parts[1])
                if method == "GET":
                    return self.get(user, name, query)
                if method == "PUT":
                    return self.put(user, name, body)
                if method == "DELETE":
                    return self.delete(user, name)
        except (ValueError, ds.DatastoreError) as e:
            return 400, {"faultstring": str(e)}
        return 404, {"faultstring": f"{method} {split.path} is not supported by the local API"}

    def list(self, user: str, query: Dict[str, str]) -> List[Dict[str, Any]]:
        decrypt = self._decrypt(user, query)
        limit = int(query.get("limit") or PAGE)
        offset = int(query.get("offset") or 0)
        if limit == -1 and not self._admin(user):
            raise AccessDenied(user, "key_value_pair_list (limit=-1: administrators only)",
                               None)
        if limit == 0 or limit < -1 or offset < 0:
            raise ValueError(f"limit {limit} / offset {offset}: a positive limit, offset >= 0")
        if limit > PAGE and not self._admin(user):
            raise ValueError(f"limit {limit} is over the maximum page size {PAGE}")
        items = [i for i in self.store.list(query.get("prefix") or None, ds.SYSTEM_SCOPE,
                                            None, decrypt)
                 if self._may(user, "key_value_pair_view", i["name"])]
        chosen = items[offset:] if limit == -1 else items[offset:offset + limit]
        return [self._view(i, decrypt) for i in chosen]

    def get(self, user: str, name: str, query: Dict[str, str]) -> Tuple[int, Any]:
        self._require(user, "key_value_pair_view", name)
        decrypt = self._decrypt(user, query)
        for item in self.store.list(name, ds.SYSTEM_SCOPE, None, decrypt):
            if item["name"] == name:
                return 200, self._view(item, decrypt)
        return 404, {"faultstring": f'Resource with a reference or id "{name}" not found'}

    def put(self, user: str, name: str, body: Any) -> Tuple[int, Any]:
        self._require(user, "key_value_pair_set", name)
        value = (body or {}).get("value") if isinstance(body, dict) else None
        if not isinstance(value, str):
            raise ValueError('"value" must be a string')
        self.store.set(name, value, ds.SYSTEM_SCOPE, None, bool(body.get("secret")))
        return self.get(user, name, {})

    def delete(self, user: str, name: str) -> Tuple[int, Any]:
        self._require(user, "key_value_pair_delete", name)
        if not self.store.delete(name, ds.SYSTEM_SCOPE, None):
            return 404, {"faultstring": f'Resource with a reference or id "{name}" not found'}
        return 204, None


def _scope_of(body: Any) -> Dict[str, str]:
    scope = body.get("scope") if isinstance(body, dict) else None
    return {"scope": str(scope)} if scope else {}
