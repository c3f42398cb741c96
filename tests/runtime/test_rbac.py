"""StackStorm RBAC on the runtime's APIs (fleet_runtime/rbac.py): the definition files as
st2-rbac-backend reads them, how grants resolve, and what a user without a grant is refused
through the real st2 CLI and the HTTP API, with the pack's own roles (rbac/roles)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator, List

import pytest
import yaml
from locations import ROOT
from st2api_support import RUNTIME_PACK, St2Api

from fleet_runtime import rbac


def _role(directory: Path, name: str, grants: List[dict]) -> None:
    (directory / "roles").mkdir(parents=True, exist_ok=True)
    (directory / "roles" / f"{name}.yaml").write_text(yaml.safe_dump(
        {"name": name, "enabled": True, "permission_grants": grants}))


def _assign(directory: Path, user: str, roles: List[str]) -> None:
    rbac.write_assignment(directory, user, roles)


@pytest.fixture
def defs(tmp_path: Path) -> Path:
    d = tmp_path / "rbac"
    _role(d, "runner", [{"resource_uid": "pack:fleet_rollout",
                         "permission_types": ["action_execute"]},
                        {"resource_uid": "action:core:echo",
                         "permission_types": ["action_view"]},
                        {"permission_types": ["execution_list"]}])
    _role(d, "answerer", [{"resource_uid": "inquiry:any",
                           "permission_types": ["inquiry_respond"]}])
    _role(d, "global_answerer", [{"permission_types": ["inquiry_respond"]}])
    _assign(d, "gus", ["global_answerer"])
    _assign(d, "ann", ["runner"])
    _assign(d, "ivy", ["answerer"])
    _assign(d, "obs", ["observer"])
    return d


def test_grants_resolve_as_st2_rbac_backend_does(defs: Path) -> None:
    r = rbac.Rbac(defs, system_admins=["stanley"], admins=["st2admin"])
    # a pack grant covers its actions; execute implies view; nothing outside the grant
    assert r.may_action("ann", "action_execute", "fleet_rollout.rollout")
    assert r.may_action("ann", "action_view", "fleet_rollout.abort")
    assert not r.may_action("ann", "action_execute", "core.local")
    assert r.may_action("ann", "action_view", "core.echo")
    assert not r.may_action("ann", "action_execute", "core.echo")
    # an execution's stop and view come from its action
    assert r.may_execution("ann", "execution_stop", "fleet_rollout.rollout")
    assert not r.may_execution("ann", "execution_stop", "core.local")
    assert r.may_execution("ann", "execution_view", "core.echo")
    assert r.may("ann", "execution_list") and not r.may("ann", "inquiry_list")
    # an inquiry: an inquiry grant, or execute on the workflow that asked it
    assert r.may_inquiry("ivy", "inquiry_respond", "other.flow")
    # a grant without a resource_uid is never found by st2-rbac-backend's inquiry resolver
    assert not r.may_inquiry("gus", "inquiry_respond", "other.flow")
    assert r.may_inquiry("ann", "inquiry_respond", "fleet_rollout.question")
    assert not r.may_inquiry("ann", "inquiry_respond", "core.ask_flow")
    # system roles: observer reads, admins do everything; no assignment: nothing
    assert r.may_action("obs", "action_view", "core.local")
    assert not r.may_action("obs", "action_execute", "core.local")
    assert r.may_action("stanley", "action_execute", "core.local")
    assert r.may_action("st2admin", "action_execute", "core.local")
    assert r.is_admin("st2admin") and not r.is_admin("ann")
    for permission in ("action_execute", "action_view"):
        assert not r.may_action("nobody", permission, "core.local")
    assert not r.may("nobody", "execution_list")
    with pytest.raises(rbac.AccessDenied, match='User "nobody" doesn\'t have required'
                                                ' permission "action_execute" on resource'
                                                ' "action:core:local"'):
        r.require_action("nobody", "action_execute", "core.local")


def test_changed_files_are_read_again(defs: Path) -> None:
    r = rbac.Rbac(defs)
    assert not r.may_action("bea", "action_execute", "fleet_rollout.plan")
    _assign(defs, "bea", ["runner"])
    assert r.may_action("bea", "action_execute", "fleet_rollout.plan")
    _assign(defs, "bea", [])
    assert not r.may_action("bea", "action_execute", "fleet_rollout.plan")


@pytest.mark.parametrize("grant,field", [
    ({"permission_types": ["action_run"]}, "unknown permission type 'action_run'"),
    ({"resource_uid": "pack:x", "permission_types": ["inquiry_respond"]},
     "does not apply to resource 'pack:x'"),
    ({"permission_types": []}, "permission_types"),
])
def test_a_bad_role_file_is_named_with_its_field(tmp_path: Path, grant: dict, field: str
                                                 ) -> None:
    d = tmp_path / "rbac"
    _role(d, "bad", [grant])
    with pytest.raises(rbac.RbacError) as err:
        rbac.load(d)
    assert "bad.yaml" in str(err.value) and field in str(err.value)


def test_an_assignment_of_an_undefined_or_system_role(tmp_path: Path) -> None:
    d = tmp_path / "rbac"
    _assign(d, "ann", ["nosuchrole"])
    with pytest.raises(rbac.RbacError, match="ann.yaml: roles: no role 'nosuchrole'"):
        rbac.load(d)
    _role(d, "admin", [{"permission_types": ["execution_list"]}])
    with pytest.raises(rbac.RbacError, match="'admin' is a system role"):
        rbac.load(d)


def test_the_packs_roles_load_and_grant_what_they_say(tmp_path: Path) -> None:
    names = ["fleet_rollout_operator", "fleet_rollout_approver", "fleet_rollout_viewer",
             "fleet_rollout_chatops"]
    assert set(rbac.load(ROOT / "rbac").roles) >= set(names)
    d = tmp_path / "rbac"
    (d / "roles").mkdir(parents=True)
    for name in names:
        (d / "roles" / f"{name}.yaml").write_text((ROOT / "rbac" / "roles" /
                                                  f"{name}.yaml").read_text())
        _assign(d, name.replace("fleet_rollout_", ""), [name])
    r = rbac.Rbac(d)
    # the st2 CLI lists runner types before it runs anything
    assert all(r.may(u, "runner_type_list") for u in ("operator", "approver", "viewer",
                                                      "chatops"))
    # answering: an inquiry grant with an inquiry uid, as st2-rbac-backend finds it
    assert r.may_inquiry("approver", "inquiry_respond", "core.other")
    assert r.may_inquiry("chatops", "inquiry_respond", "core.other")
    assert not r.may_inquiry("viewer", "inquiry_respond", "core.other")
    assert r.may_inquiry("operator", "inquiry_respond", "fleet_rollout.question")
    assert not r.may_action("viewer", "action_execute", "fleet_rollout.rollout")


# ------------------------------------------------------------------ through the API
@pytest.fixture
def api(tmp_path: Path) -> Iterator[St2Api]:
    server = St2Api(tmp_path, [RUNTIME_PACK], default_pack=True).start()
    try:
        yield server
    finally:
        server.stop()


def _executions_of(api: St2Api, user: str) -> list:
    listed = api.http("GET", f"/api/v1/executions?user={user}&limit=100", user="st2admin")
    assert listed.status_code == 200, listed.text
    return listed.json()


def test_a_user_without_a_grant_runs_nothing(api: St2Api, tmp_path: Path) -> None:
    """sre-carol is authenticated but has no role: core.local (the st2 CLI and the API),
    the pack's actions, reading executions and answering are all refused with 403, and
    nothing runs."""
    marker = tmp_path / "ran"
    out = api.st2(["run", "core.local", f"cmd=touch {marker}"], user="sre-carol", check=False)
    assert out.returncode != 0
    assert 'User "sre-carol" doesn\'t have required permission' in out.stdout + out.stderr
    posted = api.http("POST", "/api/v1/executions", user="sre-carol",
                      json={"action": "core.local", "parameters": {"cmd": f"touch {marker}"}})
    assert posted.status_code == 403, posted.text
    assert "action_execute" in posted.json()["faultstring"]
    for ref in ("fleet_rollout.rollout", "fleet_rollout.abort", "fleet_rollout.rollback"):
        refused = api.http("POST", "/api/v1/executions", user="sre-carol",
                           json={"action": ref, "parameters": {"rollout_id": "r-1"}})
        assert refused.status_code == 403, (ref, refused.text)
    assert api.http("GET", "/api/v1/executions", user="sre-carol").status_code == 403
    assert api.http("GET", "/api/v1/inquiries", user="sre-carol").status_code == 403
    time.sleep(1)
    assert not marker.exists()
    assert _executions_of(api, "sre-carol") == []


def test_a_viewer_reads_but_cannot_start_abort_or_roll_back(api: St2Api) -> None:
    for args in (["fleet_rollout.rollout", "profile=home-snoop", "targets=all"],
                 ["fleet_rollout.abort", "rollout_id=r-1"],
                 ["fleet_rollout.rollback", "rollout_id=r-1"],
                 ["fleet_rollout.respond", "rollout_id=r-1", "decision=approve"]):
        out = api.st2(["run"] + args, user="sre-viewer", check=False)
        assert out.returncode != 0, args
        assert "doesn't have required permission \"action_execute\"" in out.stdout + out.stderr
    assert _executions_of(api, "sre-viewer") == []
    assert api.http("GET", "/api/v1/executions?limit=5", user="sre-viewer").status_code == 200
    # the operator's role runs the pack's actions, and only those
    ran = api.http("POST", "/api/v1/executions", user="sre-operator",
                   json={"action": "fleet_rollout.status", "parameters": {"rollout_id": "r-1"}})
    assert ran.status_code == 201, ran.text
    assert api.http("POST", "/api/v1/executions", user="sre-operator",
                    json={"action": "core.local", "parameters": {"cmd": "id"}}
                    ).status_code == 403
    me = api.http("GET", "/api/v1/user", user="sre-operator").json()
    assert me["rbac"]["enabled"] is True
    assert me["rbac"]["roles"] == ["fleet_rollout_operator", "fleet_rollout_approver"]


def test_system_keys_are_read_only_with_a_grant_and_rules_with_rule_grants(api: St2Api) -> None:
    """As st2's keyvalue controller with RBAC: a system-scoped key is listed and read only by
    a system role or a grant on it; a user's own keys are theirs. Rules need rule_list /
    rule_view."""
    api.st2(["key", "set", "bmc_password", "s3cret-bmc", "-e"], user="st2admin")
    api.st2(["key", "set", "site", "ams"], user="st2admin")
    api.st2(["key", "set", "mine", "carols", "--scope", "user"], user="sre-carol")
    listed = {k["name"] for k in api.http("GET", "/api/v1/keys", user="sre-carol").json()}
    assert listed == {"mine"}
    for name in ("site", "bmc_password"):
        refused = api.http("GET", f"/api/v1/keys/{name}", user="sre-carol")
        assert refused.status_code == 403, refused.text
        assert f"key_value_pair:st2kv.system:{name}" in refused.json()["faultstring"]
    # the tests' role is granted view on `site` alone
    runner = {k["name"] for k in api.http("GET", "/api/v1/keys?scope=system").json()}
    assert runner == {"site"}
    assert api.http("GET", "/api/v1/keys/site").json()["value"] == "ams"
    assert api.http("GET", "/api/v1/keys/bmc_password").status_code == 403
    admin = {k["name"] for k in api.http("GET", "/api/v1/keys?scope=system",
                                         user="st2admin").json()}
    assert {"site", "bmc_password"} <= admin

    assert api.http("GET", "/api/v1/rules", user="sre-carol").status_code == 403
    [rule] = api.http("GET", "/api/v1/rules?pack=fleet_rollout&limit=1").json()
    assert api.http("GET", f"/api/v1/rules/{rule['ref']}", user="sre-carol").status_code == 403
    assert api.http("GET", f"/api/v1/rules/{rule['ref']}", user="sre-viewer").status_code == 403
    assert api.http("GET", f"/api/v1/rules/{rule['ref']}").status_code == 403  # list only
    shown = api.http("GET", f"/api/v1/rules/{rule['ref']}", user="st2admin").json()
    assert shown["ref"] == rule["ref"]


def test_api_keys_need_their_grants(api: St2Api) -> None:
    """As st2 with RBAC: no api_key_create, no key; no api_key_list, no listing; a user who
    may create keys manages their own, an admin anyone's."""
    refused = api.http("POST", "/api/v1/apikeys", user="sre-carol", json={})
    assert refused.status_code == 403 and "api_key_create" in refused.json()["faultstring"]
    assert api.http("GET", "/api/v1/apikeys", user="sre-viewer").status_code == 403
    made = api.http("POST", "/api/v1/apikeys", user="sre-bob", json={}).json()
    assert [k["id"] for k in api.http("GET", "/api/v1/apikeys", user="sre-bob").json()] == [
        made["id"]]
    assert api.http("GET", f"/api/v1/apikeys/{made['id']}", user="sre-alice"
                    ).status_code == 404  # someone else's key
    carols = api.http("POST", "/api/v1/apikeys", user="st2admin",
                      json={"user": "sre-carol"}).json()
    assert carols["user"] == "sre-carol"
    assert api.http("DELETE", f"/api/v1/apikeys/{carols['id']}", user="sre-carol"
                    ).status_code == 403
    assert api.http("DELETE", f"/api/v1/apikeys/{carols['id']}", user="st2admin"
                    ).status_code == 204


def test_aliases_need_their_grants(tmp_path: Path) -> None:
    """As st2 with RBAC: listing, matching, help and one alias need action_alias_list,
    _match, _help and _view; the pack's chat role has them, a viewer has none."""
    api = St2Api(tmp_path, [RUNTIME_PACK], default_pack=True,
                 roles={"chatops_bot": ["fleet_rollout_chatops"]}).start()
    try:
        _alias_grants(api)
    finally:
        api.stop()


def _alias_grants(api: St2Api) -> None:
    match = {"command": "rollout status r-1"}
    for user in ("sre-viewer", "sre-carol"):
        assert api.http("GET", "/api/v1/actionalias", user=user).status_code == 403
        assert api.http("POST", "/api/v1/actionalias/match", user=user,
                        json=match).status_code == 403
        assert api.http("GET", "/api/v1/actionalias/help", user=user).status_code == 403
        one = api.http("GET", "/api/v1/actionalias/fleet_rollout.rollout_status", user=user)
        assert one.status_code == 403, one.text
        assert "action_alias:fleet_rollout:rollout_status" in one.json()["faultstring"]
    listed = api.http("GET", "/api/v1/actionalias?pack=fleet_rollout", user="chatops_bot")
    assert listed.status_code == 200 and listed.json()
    found = api.http("POST", "/api/v1/actionalias/match", user="chatops_bot", json=match)
    assert found.status_code == 200, found.text
    assert found.json()["actionalias"]["ref"] == "fleet_rollout.rollout_status"
    assert api.http("GET", "/api/v1/actionalias/help", user="chatops_bot").status_code == 200
    assert api.http("GET", "/api/v1/actionalias/fleet_rollout.rollout_status",
                    user="chatops_bot").status_code == 200
