"""The real `st2` CLI (st2client 3.9 from PyPI, a subprocess) against the runtime's st2 API:
auth, run, execution list/get/tail/re-run/pause/resume/cancel, inquiry list/respond, key list,
action-alias execute. Nothing is mocked: the API, its engine and the CLI are real processes
talking HTTP on 127.0.0.1."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.st2api_support import RUNTIME_PACK, St2Api

pytestmark = pytest.mark.timeout(300)



def test_every_endpoint_but_login_needs_a_token_or_api_key(st2_api: St2Api) -> None:
    for method, path in (("GET", "/api/v1/executions"), ("GET", "/api/v1/actions"),
                         ("GET", "/api/v1/keys"), ("GET", "/stream/v1/stream"),
                         ("POST", "/api/v1/executions"), ("PUT", "/api/v1/inquiries/x")):
        r = requests.request(method, st2_api.base + path, timeout=10)
        assert r.status_code == 401, (method, path, r.status_code)
        assert "Token or API key required" in r.json()["faultstring"]
    r = requests.get(st2_api.base + "/api/v1/executions", timeout=10,
                     headers={"X-Auth-Token": "0123456789abcdef"})
    assert r.status_code == 401 and "invalid or expired" in r.json()["faultstring"]
    bad = requests.post(st2_api.base + "/auth/v1/tokens", auth=("sre-alice", "wrong"), timeout=10)
    assert bad.status_code == 401
    assert "wrong" not in bad.text
    listening = st2_api.state["host"]
    assert listening == "127.0.0.1"
    users = st2_api.home / "st2api-users"
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    assert "alice-pw-1" not in users.read_text()


def test_api_refuses_a_users_file_others_can_read(tmp_path: Path) -> None:
    server = St2Api(tmp_path, [RUNTIME_PACK])
    os.chmod(server.home / "st2api-users", 0o644)
    with pytest.raises(AssertionError, match="readable by others"):
        server.start()
    server.stop()


def test_st2_run_and_execution_list_get(st2_api: St2Api) -> None:
    run = st2_api.st2_json(["run", "rt_test.greet", "name=ops"])
    assert run["status"] == "succeeded"
    assert run["context"]["user"] == "sre-alice"
    assert run["result"]["result"]["text"] == "hello ops"
    listed = st2_api.st2_json(["execution", "list", "-n", "10"])
    assert run["id"] in [e["id"] for e in listed]
    got = st2_api.st2_json(["execution", "get", run["id"]], user="sre-bob")
    assert got["parameters"] == {"name": "ops"}
    # by action: the module's API has run many executions, more than one page of the list
    table = st2_api.st2(["execution", "list", "--action", "rt_test.greet"]).stdout
    assert "rt_test.greet" in table and "sre-alice" in table
    st2_api.st2(["run", "rt_test.greet", "name=bob"], user="sre-bob")
    mine = st2_api.http("GET", "/api/v1/executions?user=sre-bob&limit=1&parent=null")
    assert mine.headers["X-Total-Count"] == "1"
    assert [e["context"]["user"] for e in mine.json()] == ["sre-bob"]
    both = st2_api.http("GET", "/api/v1/executions?action=rt_test.greet&limit=1&offset=1")
    assert both.headers["X-Total-Count"] == "2" and both.json()[0]["id"] == run["id"]
    assert st2_api.http("GET", "/api/v1/executions?limit=500").status_code == 400
    rules = st2_api.st2_json(["rule", "list", "-p", "rt_test"])
    assert rules and all(r["pack"] == "rt_test" for r in rules)


def test_secret_parameters_are_masked_in_every_view(st2_api: St2Api) -> None:
    run = st2_api.st2_json(["run", "rt_test.secret_echo", "password=hunter2-secret"])
    assert run["parameters"]["password"] == "********"
    for args in (["execution", "get", run["id"], "-j"], ["execution", "list", "-j"]):
        out = st2_api.st2(args).stdout
        assert "hunter2-secret" not in out
    raw = st2_api.http("GET", f"/api/v1/executions/{run['id']}?show_secrets=true")
    assert raw.json()["parameters"]["password"] == "********"  # st2: administrators only
    result = st2_api.http("GET", f"/api/v1/executions/{run['id']}/result")
    assert result.status_code == 200 and "hunter2-secret" not in result.text
    admin = st2_api.http("GET", f"/api/v1/executions/{run['id']}?show_secrets=true",
                     user="st2admin")
    assert admin.json()["parameters"]["password"] == "hunter2-secret"


def test_workflow_inquiry_respond_refused_then_allowed(st2_api: St2Api) -> None:
    wf_id = st2_api.run_async(["rt_test.ask_flow", 'users=["sre-alice"]'])
    inquiry = None
    for _ in range(100):
        pending = st2_api.st2_json(["inquiry", "list"])
        if pending:
            inquiry = pending[0]
            break
        time.sleep(0.3)
    assert inquiry is not None and inquiry["users"] == ["sre-alice"]
    refused = st2_api.st2(["inquiry", "respond", "-r", '{"approved": true}', inquiry["id"]],
                      user="sre-bob", check=False)
    assert refused.returncode != 0
    assert 'User "sre-bob" is not authorized' in refused.stdout + refused.stderr
    bad = st2_api.st2(["inquiry", "respond", "-r", '{"approved": "yes"}', inquiry["id"]],
                  check=False)
    assert bad.returncode != 0 and "did not pass schema validation" in bad.stdout + bad.stderr
    ok = st2_api.st2(["inquiry", "respond", "-r", '{"approved": true, "comment": "go"}',
                  inquiry["id"]])
    assert "Response accepted" in ok.stdout
    final = st2_api.wait_status(wf_id, ("succeeded", "failed"))
    assert final["status"] == "succeeded"
    assert final["result"]["output"]["decision"] == "approved"
    assert final["context"]["resumed_by"] == "sre-alice"
    shown = st2_api.st2(["execution", "get", wf_id]).stdout
    assert "approve" in shown and "core.ask" in shown  # the child task table


def test_pause_resume_cancel_and_rerun(st2_api: St2Api) -> None:
    # steps long enough that pause, resume and cancel (three st2 CLI processes) land inside the
    # second step even on a loaded machine
    wf_id = st2_api.run_async(["st2api_test.slow_steps", "seconds=15"])
    st2_api.wait_status(wf_id, ("running",))
    paused = st2_api.st2(["execution", "pause", wf_id], user="sre-bob")
    assert "pausing" in paused.stdout or "paused" in paused.stdout
    record = st2_api.wait_status(wf_id, ("paused",))
    assert record["context"]["paused_by"] == "sre-bob"
    st2_api.st2(["execution", "resume", wf_id])
    record = st2_api.wait_status(wf_id, ("running", "succeeded"))
    assert record["context"]["resumed_by"] == "sre-alice"
    canceled = st2_api.st2(["execution", "cancel", wf_id])
    assert "canceling" in canceled.stdout.lower() or "canceled" in canceled.stdout.lower()
    record = st2_api.wait_status(wf_id, ("canceled",), timeout=60)
    assert record["context"]["cancelled_by"] == "sre-alice"
    done = st2_api.st2(["execution", "cancel", wf_id], check=False)
    assert "canceled" in (done.stdout + done.stderr).lower()
    rerun = st2_api.st2_json(["execution", "re-run", wf_id, "seconds=0"])
    assert rerun["id"] != wf_id
    assert rerun["parameters"] == {"seconds": 0}
    final = st2_api.wait_status(rerun["id"], ("succeeded", "failed"))
    assert final["status"] == "succeeded"
    assert final["context"]["re-run"] == {"ref": wf_id}


def test_execution_tail_follows_a_workflow_to_its_end(st2_api: St2Api) -> None:
    # long enough for the tail (a st2 CLI process) to attach before the first step ends, also
    # on a loaded machine (pytest workers and TCG guests sharing two cores)
    wf_id = st2_api.run_async(["st2api_test.slow_steps", "seconds=15"])
    tail = st2_api.st2(["execution", "tail", wf_id], timeout=90)
    out = tail.stdout
    assert "Child execution (task=first)" in out and "has finished (status=succeeded)" in out
    assert f"Execution {wf_id} has completed (status=succeeded)." in out


def test_key_list_masks_secrets_and_decrypt_is_for_admins(st2_api: St2Api) -> None:
    st2_api.st2(["key", "set", "bmc_password", "s3cret-bmc", "-e"], user="st2admin")
    st2_api.st2(["key", "set", "site", "ams"], user="st2admin")
    refused = st2_api.st2(["key", "set", "x", "y"], check=False)  # system scope: admins
    assert refused.returncode != 0
    keys = {k["name"]: k for k in st2_api.st2_json(["key", "list"], user="st2admin")}
    assert keys["site"]["value"] == "ams"
    assert keys["bmc_password"]["value"] == "********" and keys["bmc_password"]["secret"]
    listed = st2_api.st2(["key", "list"], user="st2admin").stdout
    assert "s3cret-bmc" not in listed
    denied = st2_api.st2(["key", "list", "--decrypt"], check=False)
    assert denied.returncode != 0
    assert "administrator access" in denied.stdout + denied.stderr
    decrypted = {k["name"]: k for k in st2_api.st2_json(["key", "list", "--decrypt"],
                                                    user="st2admin")}
    assert decrypted["bmc_password"]["value"] == "s3cret-bmc"


def test_action_alias_execute_runs_as_the_authenticated_user(st2_api: St2Api) -> None:
    out = st2_api.st2(["action-alias", "execute", "greet world"], user="sre-bob").stdout
    assert "Matching Action-alias: 'rt_test.greet'" in out
    ex_id = out.split("st2 execution get")[1].split()[0]
    final = st2_api.wait_status(ex_id, ("succeeded", "failed"))
    assert final["status"] == "succeeded"
    assert final["parameters"] == {"name": "world"}
    assert final["context"]["user"] == "sre-bob"
    assert final["context"]["action_alias_ref"]["name"] == "greet"
    assert not final["context"].get("api_user")  # the CLI speaks for nobody else
    nomatch = st2_api.st2(["action-alias", "execute", "make coffee"], check=False)
    assert nomatch.returncode != 0 and "matched no patterns" in nomatch.stdout + nomatch.stderr


def test_api_keys_authenticate_and_are_shown_once(st2_api: St2Api) -> None:
    created = st2_api.st2_json(["apikey", "create", "-m", '{"used_by": "errbot"}'],
                           user="chatops_bot")
    key = created["key"]
    listed = st2_api.st2(["apikey", "list", "-j"], user="chatops_bot").stdout
    assert key not in listed and created["id"] in listed
    r = requests.get(st2_api.base + "/api/v1/executions", headers={"St2-Api-Key": key},
                     timeout=10)
    assert r.status_code == 200
    env = st2_api.cli_env("sre-alice")
    env["ST2_API_KEY"] = key
    env["ST2_CONFIG_FILE"] = str(st2_api.tmp / "empty.conf")
    (st2_api.tmp / "empty.conf").write_text("")
    from tests.st2api_support import st2_cli

    who = subprocess.run([str(st2_cli()), "run", "rt_test.greet", "name=k", "-j"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert who.returncode == 0, who.stderr
    body = json.loads(who.stdout[who.stdout.index("{"):])
    assert body["context"]["user"] == "chatops_bot"
    st2_api.st2(["apikey", "delete", created["id"]], user="chatops_bot")
    r = requests.get(st2_api.base + "/api/v1/executions", headers={"St2-Api-Key": key},
                     timeout=10)
    assert r.status_code == 401


def test_inquiry_roles_are_the_requesters_own(tmp_path: Path) -> None:
    server = St2Api(tmp_path, [RUNTIME_PACK],
                    home_settings={"user_roles": {"sre-alice": ["approver"]}}).start()
    try:
        wf_id = server.run_async(["rt_test.ask_flow", 'roles=["approver"]'], user="sre-bob")
        inquiry = None
        for _ in range(100):
            pending = server.http("GET", "/api/v1/inquiries").json()
            if pending:
                inquiry = pending[0]
                break
            time.sleep(0.3)
        assert inquiry is not None and inquiry["roles"] == ["approver"]
        body = {"id": inquiry["id"], "response": {"approved": True}}
        refused = server.http("PUT", f"/api/v1/inquiries/{inquiry['id']}", user="sre-bob",
                              json=body)
        assert refused.status_code == 403
        assert "roles of sre-bob: tests_runner" in refused.json()["faultstring"]
        ok = server.http("PUT", f"/api/v1/inquiries/{inquiry['id']}", json=body)
        assert ok.status_code == 200, ok.text
        assert server.wait_status(wf_id, ("succeeded",))["context"]["resumed_by"] == "sre-alice"
    finally:
        server.stop()


def test_requests_outside_what_st2_accepts_are_refused(st2_api: St2Api) -> None:
    # an alias execution may only use the alias's own formats (no caller-made patterns)
    foreign = st2_api.http("POST", "/api/v1/aliasexecution",
                           json={"name": "greet", "format": "(a+)+$", "command": "aaaa"})
    assert foreign.status_code == 400 and "is not available on the alias" in foreign.text
    own = st2_api.http("POST", "/api/v1/aliasexecution",
                       json={"name": "greet", "format": "greet {{name}}", "command": "greet x"})
    assert own.status_code == 201, own.text
    long = st2_api.http("POST", "/api/v1/actionalias/match", json={"command": "a=b " * 2000})
    assert long.status_code == 400
    # ids are ids: no SQL LIKE wildcards or other text reaches the database
    for bad in ("______", "%25%25%25%25%25%25", "..%2F..%2Fetc"):
        assert st2_api.http("GET", f"/api/v1/executions/{bad}").status_code == 404, bad
    # API keys: hashes masked, names checked
    key = st2_api.http("POST", "/api/v1/apikeys", json={}).json()
    listed = st2_api.http("GET", "/api/v1/apikeys").json()
    assert [k["key_hash"] for k in listed] == ["********"] and key["key"] not in str(listed)
    bad_user = st2_api.http("POST", "/api/v1/apikeys", user="st2admin",
                            json={"user": "alice:x"})
    assert bad_user.status_code == 400
    gone = st2_api.http("DELETE", f"/api/v1/apikeys/{key['id']}")
    assert gone.status_code == 204 and gone.content == b""
