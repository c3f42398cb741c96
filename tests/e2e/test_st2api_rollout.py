"""A whole staged rollout on a sim lab started and approved with the real `st2` CLI alone,
through the runtime's st2 API: `st2 run`, `st2 inquiry list|respond`, `st2 action-alias
execute "rollout approve <id>"`. A non-approver's answer is refused and changes nothing."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rollout_support import SimLab

from tests.st2api_support import St2Api

pytestmark = pytest.mark.timeout(900)

HOME_SNOOP = {"snoop_mode": "home", "node_interleaving": "disabled"}


def test_a_sim_rollout_driven_by_the_st2_cli_alone(tmp_path: Path) -> None:
    sim = SimLab(str(tmp_path), 2, approvers=["sre-alice"])
    api = St2Api(tmp_path, [], default_pack=True)
    assert api.home == Path(sim.home)
    # the profile (and the pack config's profiles_dir) exist before the engine loads the config
    profile = sim.profile("home-snoop", approval={"required": True,
                                                  "auto_approve_canary": False})
    api.start()
    try:
        wf_id = api.run_async(["fleet_rollout.rollout", f"profile={profile}"])
        answers = 0
        deadline = time.time() + 600
        while time.time() < deadline:
            record = api.http("GET", f"/api/v1/executions/{wf_id}").json()
            if record["status"] in ("succeeded", "failed", "canceled", "timeout"):
                break
            pending = api.st2_json(["inquiry", "list"])
            if not pending:
                time.sleep(1)
                continue
            inquiry = api.st2_json(["inquiry", "get", pending[0]["id"]])
            rollout_id = inquiry["schema"]["properties"]["rollout_id"]["default"]
            if answers == 0:
                refused = api.st2(["inquiry", "respond", "-r", '{"approved": true}',
                                   inquiry["id"]], user="sre-bob", check=False)
                assert refused.returncode != 0
                assert 'User "sre-bob" is not authorized' in refused.stdout + refused.stderr
                for host in sim.host_names():
                    assert sim.bmc(host)["resets"] == [], host  # nothing changed
                api.st2(["inquiry", "respond", "-r", '{"approved": true}', inquiry["id"]])
            else:
                out = api.st2(["action-alias", "execute", f"rollout approve {rollout_id}"])
                assert "Matching Action-alias: 'fleet_rollout.rollout_approve'" in out.stdout
            answers += 1
            for _ in range(60):  # the answer resumes the workflow
                if inquiry["id"] not in [i["id"] for i in api.st2_json(["inquiry", "list"])]:
                    break
                time.sleep(0.5)
        final = api.http("GET", f"/api/v1/executions/{wf_id}").json()
        assert final["status"] == "succeeded", json.dumps(final["result"])[:3000]
        assert final["context"]["user"] == "sre-alice"
        assert answers >= 2
        rollout_id = final["result"]["output"]["rollout_id"]
        approval = sim.kv(rollout_id, "batch.0")["approval"]
        assert (approval["by"], approval["via"]) == ("sre-alice", "api")
        for host in sim.host_names():
            assert sim.bmc(host)["logical"] == HOME_SNOOP, host
            assert not sim.drained(host), host
        listed = api.st2(["execution", "list", "-a", "action.ref", "status"]).stdout
        assert "fleet_rollout.rollout" in listed
    finally:
        api.stop()
        sim.down()
