"""Where actions keep rollout state, over stand-ins of st2's datastore answers (a page of at
most 100 keys per listing; get_value answering None for every failure, as st2's
ActionDatastoreService does). The real APIs are exercised by the runtime's and the e2e tests
(tests/runtime/test_action_datastore_rbac.py, tests/e2e/test_st2api_rollout.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from fleet_rollout.config import load_pack_config
from fleet_rollout.st2api import ActionApi, ApiRefused
from fleet_rollout.statestore import KeyApiStore, state_store
from fleet_rollout.store import PAGE, ActionServiceStore, MemoryStore

CREDENTIALS = {"credentials": {"default": {"username": "u", "password": "p"}}}


class Item:
    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value


class St2ActionService:
    """st2's action_service: a listing answers one page; get_value answers None on failure."""

    def __init__(self, keys: Dict[str, str], failing: bool = False) -> None:
        self.keys, self.failing = keys, failing
        self.listings: List[Dict[str, Any]] = []

    def list_values(self, local: bool = True, prefix: Optional[str] = None,
                    limit: Optional[int] = None, offset: int = 0) -> List[Item]:
        if self.failing:
            raise RuntimeError("503 Server Error: Service Unavailable")
        self.listings.append({"prefix": prefix, "limit": limit, "offset": offset})
        names = sorted(k for k in self.keys if k.startswith(prefix or ""))
        return [Item(n, self.keys[n]) for n in names[offset:offset + (limit or PAGE)]]

    def get_value(self, name: str, local: bool = True) -> Optional[str]:
        return None if self.failing else self.keys.get(name)


def test_a_listing_reads_every_page() -> None:
    keys = {f"fleet_rollout.r1.host.h{i:04d}": str(i) for i in range(250)}
    service = St2ActionService(keys)
    assert ActionServiceStore(service).list("fleet_rollout.r1.host.") == keys
    assert [c["offset"] for c in service.listings] == [0, 100, 200]
    assert {c["limit"] for c in service.listings} == {PAGE}


def test_a_key_that_could_not_be_read_is_not_taken_for_absent() -> None:
    store = ActionServiceStore(St2ActionService({"a": "1"}))
    assert store.get("a") == "1"
    assert store.get("b") is None  # absent: the listing confirms it
    with pytest.raises(RuntimeError, match="503"):
        ActionServiceStore(St2ActionService({"a": "1"}, failing=True)).get("a")


class Answer:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self.body, self.text = status, body, str(body)

    def json(self) -> Any:
        return self.body


class KeysApi:
    """st2api's /api/v1/keys for the key `secret-key` (a page of 100 per listing)."""

    def __init__(self) -> None:
        self.keys: Dict[str, str] = {}
        self.seen: List[Dict[str, str]] = []

    def _auth(self, headers: Dict[str, str]) -> Optional[Answer]:
        self.seen.append(dict(headers))
        if headers.get("St2-Api-Key") != "secret-key":
            return Answer(401, {"faultstring": "Unauthorized"})
        return None

    def get(self, url: str, headers: Dict[str, str], timeout: float) -> Answer:
        from urllib.parse import parse_qs, unquote, urlsplit

        refused = self._auth(headers)
        if refused:
            return refused
        split = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        assert query["scope"] == "system"
        if split.path.endswith("/keys"):
            names = sorted(k for k in self.keys if k.startswith(query["prefix"]))
            start, limit = int(query["offset"]), int(query["limit"])
            assert limit <= 100
            return Answer(200, [{"name": n, "value": self.keys[n]}
                                for n in names[start:start + limit]])
        name = unquote(split.path.rsplit("/", 1)[1])
        if name not in self.keys:
            return Answer(404, {"faultstring": f'"{name}" not found'})
        return Answer(200, {"name": name, "value": self.keys[name]})

    def put(self, url: str, headers: Dict[str, str], json: Any, timeout: float) -> Answer:
        refused = self._auth(headers)
        if refused:
            return refused
        assert json["scope"] == "system"
        self.keys[json["name"]] = json["value"]
        return Answer(200, json)

    def delete(self, url: str, headers: Dict[str, str], timeout: float) -> Answer:
        from urllib.parse import unquote, urlsplit

        name = unquote(urlsplit(url).path.rsplit("/", 1)[1])
        if self.keys.pop(name, None) is None:
            return Answer(404, {"faultstring": "not found"})
        return Answer(204, None)


def test_the_state_account_keeps_state_through_its_api_key() -> None:
    http = KeysApi()
    store = KeyApiStore(ActionApi("http://st2/api/v1", "the-users-token", session=http,
                                  api_key="secret-key"))
    assert store.get("fleet_rollout.r1.meta") is None
    for i in range(205):
        store.set(f"fleet_rollout.r1.host.h{i:04d}", str(i))
    assert store.get("fleet_rollout.r1.host.h0007") == "7"
    assert len(store.list("fleet_rollout.r1.host.")) == 205
    store.delete("fleet_rollout.r1.host.h0007")
    store.delete("fleet_rollout.r1.host.h0007")  # absent already: nothing to do
    assert store.get("fleet_rollout.r1.host.h0007") is None
    assert all(h == {"St2-Api-Key": "secret-key"} for h in http.seen)  # never the token
    wrong = KeyApiStore(ActionApi("http://st2/api/v1", "t", session=http, api_key="other"))
    with pytest.raises(ApiRefused) as refused:
        wrong.get("fleet_rollout.r1.meta")
    assert refused.value.status == 401 and "other" not in str(refused.value)


def test_the_store_follows_the_pack_config(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = MemoryStore()
    keyed = load_pack_config(dict(CREDENTIALS, state_api_key="secret-key"))
    assert state_store(memory, keyed) is memory  # a Store given is used as it is
    service = St2ActionService({})
    assert isinstance(state_store(service, load_pack_config(CREDENTIALS)), ActionServiceStore)
    monkeypatch.setenv("ST2_ACTION_API_URL", "http://st2/api/v1")
    monkeypatch.setenv("ST2_ACTION_AUTH_TOKEN", "the-users-token")
    chosen = state_store(service, keyed)
    assert isinstance(chosen, KeyApiStore)
    assert chosen.api.headers == {"St2-Api-Key": "secret-key"}
    assert "secret-key" not in repr(keyed)
