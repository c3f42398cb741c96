"""The datastore (st2's key-value store): system and user scopes, secrets, TTLs.

Secrets are encrypted with a Fernet key kept in the runtime home (`crypto.key`, mode 0600); like
st2, reading a secret without `decrypt` returns the ciphertext. Used by the engine (st2kv(),
`{{ st2kv.system.x }}`), the CLI (`fleet-rollout key ...`) and python actions
(`self.action_service.get_value/set_value`), which open the same SQLite file.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from fleet_runtime.database import KV_SCHEMA, thread_connection

SYSTEM_SCOPE = "system"
USER_SCOPE = "user"
FULL_SYSTEM_SCOPE = "st2kv.system"
FULL_USER_SCOPE = "st2kv.user"
_SCOPES = {SYSTEM_SCOPE: FULL_SYSTEM_SCOPE, USER_SCOPE: FULL_USER_SCOPE}



class DatastoreError(Exception):
    pass


def full_scope(scope: str) -> str:
    if scope in _SCOPES:
        return _SCOPES[scope]
    if scope in _SCOPES.values():
        return scope
    raise DatastoreError(f"Scope {scope} is not in allowed scopes list: {sorted(_SCOPES)}.")


class Crypto:
    """Fernet encryption with a key file created on first use."""

    def __init__(self, key_path: Path) -> None:
        self.key_path = Path(key_path)
        self._fernet: Any = None

    def _get(self) -> Any:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            if not self.key_path.exists():
                key = Fernet.generate_key()
                fd = os.open(str(self.key_path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(key)
            self._fernet = Fernet(self.key_path.read_bytes().strip())
        return self._fernet

    def encrypt(self, value: str) -> str:
        return str(self._get().encrypt(value.encode("utf-8")).decode("ascii"))

    def decrypt(self, token: str) -> str:
        return str(self._get().decrypt(token.encode("ascii")).decode("utf-8"))


class Datastore:
    """Key-value pairs in the runtime database."""

    def __init__(self, db_path: str, key_path: Path) -> None:
        self.db_path = str(db_path)
        self.crypto = Crypto(key_path)
        self._local = threading.local()
        self._secret_cache: Optional[Tuple[Any, List[str]]] = None
        self._conn().executescript(KV_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        return thread_connection(self._local, self.db_path)

    @staticmethod
    def storage_name(name: str, scope: str, user: Optional[str]) -> str:
        if full_scope(scope) == FULL_USER_SCOPE:
            if not user:
                raise DatastoreError("A user is required for the user scope.")
            return f"{user}:{name}"
        return name

    def set(
        self,
        name: str,
        value: Any,
        scope: str = SYSTEM_SCOPE,
        user: Optional[str] = None,
        secret: bool = False,
        ttl: Optional[float] = None,
    ) -> None:
        if not name:
            raise DatastoreError("A key name is required.")
        text = value if isinstance(value, str) else str(value)
        stored = self.crypto.encrypt(text) if secret else text
        expire = time.time() + float(ttl) if ttl else None
        self._conn().execute(
            "INSERT INTO kv(scope, name, value, secret, expire_ts, updated_ts)"
            " VALUES(?,?,?,?,?,?) ON CONFLICT(scope, name) DO UPDATE SET value=excluded.value,"
            " secret=excluded.secret, expire_ts=excluded.expire_ts,"
            " updated_ts=excluded.updated_ts",
            (
                full_scope(scope),
                self.storage_name(name, scope, user),
                stored,
                1 if secret else 0,
                expire,
                time.time(),
            ),
        )

    def _row(self, name: str, scope: str, user: Optional[str]) -> Optional[sqlite3.Row]:
        row = self._conn().execute(
            "SELECT * FROM kv WHERE scope=? AND name=?",
            (full_scope(scope), self.storage_name(name, scope, user)),
        ).fetchone()
        if row is not None and row["expire_ts"] is not None and row["expire_ts"] <= time.time():
            self._conn().execute(
                "DELETE FROM kv WHERE scope=? AND name=? AND expire_ts<=?",
                (row["scope"], row["name"], time.time()),
            )
            return None
        return row

    def get(
        self,
        name: str,
        scope: str = SYSTEM_SCOPE,
        user: Optional[str] = None,
        decrypt: bool = False,
    ) -> Optional[str]:
        row = self._row(name, scope, user)
        if row is None:
            return None
        value = row["value"]
        if row["secret"] and decrypt and value is not None:
            return self.crypto.decrypt(value)
        return value

    def exists(self, name: str, scope: str = SYSTEM_SCOPE, user: Optional[str] = None) -> bool:
        return self._row(name, scope, user) is not None

    def delete(self, name: str, scope: str = SYSTEM_SCOPE, user: Optional[str] = None) -> bool:
        cur = self._conn().execute(
            "DELETE FROM kv WHERE scope=? AND name=?",
            (full_scope(scope), self.storage_name(name, scope, user)),
        )
        return cur.rowcount > 0

    def list(
        self,
        prefix: Optional[str] = None,
        scope: str = SYSTEM_SCOPE,
        user: Optional[str] = None,
        decrypt: bool = False,
    ) -> List[Dict[str, Any]]:
        fscope = full_scope(scope)
        stored_prefix = self.storage_name(prefix or "", scope, user)
        rows = self._conn().execute(
            "SELECT * FROM kv WHERE scope=? AND substr(name, 1, ?)=? ORDER BY name",
            (fscope, len(stored_prefix), stored_prefix),
        ).fetchall()
        now = time.time()
        result = []
        for row in rows:
            if row["expire_ts"] is not None and row["expire_ts"] <= now:
                continue
            name = row["name"]
            if fscope == FULL_USER_SCOPE:
                name = name.split(":", 1)[1]
            value = row["value"]
            if row["secret"] and decrypt:
                value = self.crypto.decrypt(value)
            result.append(
                {
                    "name": name,
                    "value": value,
                    "secret": bool(row["secret"]),
                    "scope": fscope,
                    "user": user if fscope == FULL_USER_SCOPE else None,
                    "expire_timestamp": row["expire_ts"],
                }
            )
        return result

    def secret_values(self) -> List[str]:
        """The decrypted values of every system key stored encrypted (to mask them in outputs);
        decrypted again only when a key changed."""
        conn = self._conn()
        stamp = tuple(conn.execute(
            "SELECT COUNT(*), MAX(updated_ts) FROM kv WHERE secret=1").fetchone())
        cached = self._secret_cache
        if cached is not None and cached[0] == stamp:
            return list(cached[1])
        values = []
        # system-scoped secrets only: a user's own encrypted keys are private to them, and
        # one user's key must not mask (and so change) what everyone else is shown
        for row in conn.execute("SELECT value FROM kv WHERE secret=1 AND value IS NOT NULL"
                                " AND scope=?", (FULL_SYSTEM_SCOPE,)):
            try:
                values.append(self.crypto.decrypt(row["value"]))
            except Exception:  # not ours (another key file): nothing to mask it with
                continue
        self._secret_cache = (stamp, values)
        return list(values)

    # -------------------------------------------------------------- st2kv() semantics
    def expression_get(self, user: str, key: str, decrypt: bool = False) -> Optional[str]:
        """st2kv('system.x') reads system key x; st2kv('x') reads the user's key x."""
        if key.startswith("system."):
            scope, name = SYSTEM_SCOPE, key[len("system.") :]
        else:
            scope, name = USER_SCOPE, key
        row = self._row(name, scope, user)
        if row is None:
            raise KeyError(
                f'The key "{self.storage_name(name, scope, user)}" does not exist in the'
                f' StackStorm datastore.'
            )
        value = row["value"]
        if row["secret"] and decrypt and value is not None:
            return self.crypto.decrypt(value)
        return value
