"""An action's datastore under RBAC, as st2's: action_service acts as the execution's user
(their key_value_pair grants apply), and an API key acts as its user through the action API
(the pack's state account, state_api_key)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.st2api_support import RUNTIME_PACK, St2Api

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[St2Api]:
    server = St2Api(tmp_path, [RUNTIME_PACK], roles={"sre-bob": ["admin"]}).start()
    try:
        yield server
    finally:
        server.stop()


def _run(api: St2Api, user: str, action: str, parameters: dict) -> dict:
    posted = api.http("POST", "/api/v1/executions", user=user,
                      json={"action": action, "parameters": parameters})
    assert posted.status_code == 201, posted.text
    return api.wait_status(posted.json()["id"], ("succeeded", "failed"), timeout=120)


def _key(api: St2Api, name: str) -> int:
    return api.http("GET", f"/api/v1/keys/{name}?scope=system", user="st2admin").status_code


def test_action_service_keeps_the_users_grants(api: St2Api) -> None:
    """sre-alice may run the pack's actions but holds no grant on the key: her action cannot
    set it; sre-bob's (st2's admin role) can."""
    parameters = {"key": "fleet_rollout.r-1.meta", "value": "v", "local": False}
    refused = _run(api, "sre-alice", "rt_test.kv", parameters)
    assert refused["status"] == "failed"
    assert "key_value_pair_set" in str(refused["result"])
    assert _key(api, "fleet_rollout.r-1.meta") == 404
    done = _run(api, "sre-bob", "rt_test.kv", parameters)
    assert done["status"] == "succeeded", done["result"]
    assert done["result"]["result"]["after"] == "v"
    assert done["result"]["result"]["listed"] == ["fleet_rollout.r-1.meta"]


def test_an_api_key_acts_as_its_user_until_the_user_is_removed(api: St2Api) -> None:
    admins_key = api.fleet(["api", "apikey", "sre-bob"]).stdout.strip().splitlines()[-1]
    alices_key = api.fleet(["api", "apikey", "sre-alice"]).stdout.strip().splitlines()[-1]
    parameters = {"key": "fleet_rollout.r-2.meta", "value": "v2"}
    done = _run(api, "sre-alice", "rt_test.keys_by_api_key", dict(parameters,
                                                                  api_key=admins_key))
    out = done["result"]["result"]
    assert out["put"][0] == 200 and out["get"] == [200, out["get"][1]]
    assert out["get"][1]["value"] == "v2"
    assert [k["name"] for k in out["list"][1]] == ["fleet_rollout.r-2.meta"]
    assert out["delete"][0] == 204
    assert admins_key not in str(done)  # a secret parameter: masked in what is shown
    # her own key acts as her: no grant on the key
    mine = _run(api, "sre-alice", "rt_test.keys_by_api_key", dict(parameters,
                                                                  api_key=alices_key))
    assert mine["result"]["result"]["put"][0] == 403
    assert mine["result"]["result"]["list"] == [200, []]
    # a key of a user no longer in the users file, or no key at all, authenticates nobody
    users = api.home / "st2api-users"
    users.write_text("".join(line + "\n" for line in users.read_text().splitlines()
                             if not line.startswith("sre-bob:")))
    gone = _run(api, "sre-alice", "rt_test.keys_by_api_key", dict(parameters,
                                                                  api_key=admins_key))
    assert {k: v[0] for k, v in gone["result"]["result"].items()} == {
        "put": 401, "get": 401, "list": 401, "delete": 401}
    assert _key(api, "fleet_rollout.r-2.meta") in (401, 404)
