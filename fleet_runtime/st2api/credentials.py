"""Tokens and API keys, as st2auth and st2api issue them.

A token (`X-Auth-Token`) is issued for a user who authenticated with a password; it expires
after `ttl` seconds (st2's default 24 h). An API key (`St2-Api-Key`) is shown once, at
creation, as st2 does; unlike st2's, it expires `api_key_ttl` seconds after it was created
(the runtime setting `api_key_ttl_days`, default 90): a key that leaks does not open the API
for ever, and a bot's key is rotated by creating a new one. Both are kept only as SHA-256
hashes in the runtime database, so a copy of the database does not let anyone in.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import secrets
import threading
import time
import uuid
from typing import Any, Dict, List, Optional

from fleet_runtime.database import thread_connection

DEFAULT_TOKEN_TTL = 86400
MAX_TOKEN_TTL = 86400
DEFAULT_API_KEY_TTL = 90 * 86400

SCHEMA = """
CREATE TABLE IF NOT EXISTS st2_tokens (
    token_hash TEXT PRIMARY KEY, id TEXT, user TEXT NOT NULL, expiry_ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS st2_apikeys (
    id TEXT PRIMARY KEY, key_hash TEXT UNIQUE NOT NULL, user TEXT NOT NULL,
    metadata TEXT NOT NULL, created_ts REAL NOT NULL, enabled INTEGER NOT NULL);
"""


class TokenTtlError(ValueError):
    pass


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


class Credentials:
    def __init__(self, db_path: str, api_key_ttl: float = DEFAULT_API_KEY_TTL) -> None:
        self.db_path = db_path
        self.api_key_ttl = api_key_ttl
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    def _conn(self) -> Any:
        return thread_connection(self._local, self.db_path)

    # ------------------------------------------------------------------ tokens
    def issue_token(self, user: str, ttl: Optional[int] = None) -> Dict[str, Any]:
        if ttl is None:
            ttl = DEFAULT_TOKEN_TTL
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 1:
            raise TokenTtlError("ttl must be a positive integer")
        if ttl > MAX_TOKEN_TTL:  # st2auth: "TTL specified %s is greater than max allowed %s."
            raise TokenTtlError(f"TTL specified {ttl} is greater than max allowed"
                                f" {MAX_TOKEN_TTL}.")
        token = secrets.token_hex(16)
        token_id = uuid.uuid4().hex[:24]
        expiry = time.time() + ttl
        self._conn().execute("INSERT INTO st2_tokens VALUES (?, ?, ?, ?)",
                             (_hash(token), token_id, user, expiry))
        self._conn().execute("DELETE FROM st2_tokens WHERE expiry_ts < ?", (time.time(),))
        return {"id": token_id, "user": user, "token": token, "expiry": iso(expiry),
                "metadata": {}}

    def token(self, token: str) -> Optional[Dict[str, Any]]:
        """The live token's user and expiry, None when unknown or expired."""
        row = self._conn().execute("SELECT user, expiry_ts FROM st2_tokens WHERE token_hash=?",
                                   (_hash(token),)).fetchone()
        if row is None or row[1] < time.time():
            return None
        return {"user": str(row[0]), "expiry": iso(row[1])}

    def revoke_token(self, token: str) -> None:
        self._conn().execute("DELETE FROM st2_tokens WHERE token_hash=?", (_hash(token),))

    # ------------------------------------------------------------------ API keys
    def create_api_key(self, user: str, metadata: Optional[Dict[str, Any]] = None
                       ) -> Dict[str, Any]:
        key = secrets.token_urlsafe(36)
        key_id = uuid.uuid4().hex[:24]
        now = time.time()
        self._conn().execute("INSERT INTO st2_apikeys VALUES (?, ?, ?, ?, ?, 1)",
                             (key_id, _hash(key), user, json.dumps(metadata or {}), now))
        view = self.api_key(key_id)
        assert view is not None
        view["key"] = key  # shown once
        return view

    def user_for_api_key(self, key: str) -> Optional[str]:
        """The key's user; None when it is unknown, disabled or expired."""
        row = self._conn().execute(
            "SELECT user, created_ts FROM st2_apikeys WHERE key_hash=? AND enabled=1",
            (_hash(key),)).fetchone()
        if row is None or float(row[1]) + self.api_key_ttl < time.time():
            return None
        return str(row[0])

    def api_keys(self, user: Optional[str] = None) -> List[Dict[str, Any]]:
        sql = "SELECT id, key_hash, user, metadata, created_ts, enabled FROM st2_apikeys"
        args: tuple = ()
        if user is not None:
            sql += " WHERE user=?"
            args = (user,)
        return [self.key_view(row) for row in self._conn().execute(sql + " ORDER BY created_ts",
                                                                    args)]

    def api_key(self, key_id: str) -> Optional[Dict[str, Any]]:
        row = self._conn().execute(
            "SELECT id, key_hash, user, metadata, created_ts, enabled FROM st2_apikeys"
            " WHERE id=?", (key_id,)).fetchone()
        return self.key_view(row) if row else None

    def delete_api_key(self, key_id: str) -> bool:
        cur = self._conn().execute("DELETE FROM st2_apikeys WHERE id=?", (key_id,))
        return cur.rowcount > 0

    def key_view(self, row: Any) -> Dict[str, Any]:
        expires = float(row[4]) + self.api_key_ttl
        return {"id": row[0], "uid": "api_key:********", "key_hash": "********", "user": row[2],
                "metadata": json.loads(row[3]), "created_at": iso(row[4]),
                "expires_at": iso(expires), "expired": expires < time.time(),
                "enabled": bool(row[5])}
