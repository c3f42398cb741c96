"""Adversarial, through the real st2 API (HTTPS-less HTTP on 127.0.0.1, the runtime's `api
serve` and its engine): a chat user's text is data. Alias executions never render Jinja the
user typed; `formats` entries of the dict form with a regex (lookahead) representation refuse
anything but an id; trailing key=value pairs still parse but undeclared ones are refused;
config secrets are masked in every API response and in the stream."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import requests
import yaml
from adv_support import write, write_pack_yaml
from st2api_support import St2Api

SECRET = "api-Secret-Pa55word"
MASK = "********"



def make_pack(root: Path) -> Path:
    pack = root / "chat_pack"
    write_pack_yaml(pack, "advchat", "aliases a chat user attacks")
    write(pack / "config.schema.yaml", """
        password:
          type: string
          secret: true
          required: true
        """)
    write(pack / "actions" / "echo.yaml", """
        name: echo
        runner_type: python-script
        entry_point: echo.py
        parameters:
          text:
            type: string
            required: true
          verbose:
            type: boolean
            default: false
        """)
    write(pack / "actions" / "echo.py", """
        from st2common.runners.base_action import Action


        class Echo(Action):
            def run(self, text, verbose):
                return {"text": text, "verbose": verbose}
        """)
    write(pack / "actions" / "leak.yaml", """
        name: leak
        runner_type: python-script
        entry_point: leak.py
        """)
    write(pack / "actions" / "leak.py", """
        import sys

        from st2common.runners.base_action import Action


        class Leak(Action):
            def run(self):
                print("stdout has " + self.config["password"])
                sys.stderr.write("stderr has " + self.config["password"] + "\\n")
                return {"password": self.config["password"]}
        """)
    write(pack / "aliases" / "greet.yaml", """
        name: greet
        pack: advchat
        action_ref: advchat.echo
        formats:
          - "greet {{text}}"
        ack:
          format: "greeting {{ execution.parameters.text }}"
        """)
    write(pack / "aliases" / "status.yaml", r"""
        name: status
        pack: advchat
        action_ref: advchat.echo
        description: Status of a rollout.
        formats:
          - display: "rollout status <rollout_id>"
            representation:
              - 'rollout status (?=[a-z0-9-]+\s*$){{text}}'
        """)
    write(pack / "aliases" / "leak.yaml", """
        name: leak
        pack: advchat
        action_ref: advchat.leak
        formats:
          - "leak it"
        """)
    return pack


@pytest.fixture()
def api(tmp_path: Path) -> Iterator[St2Api]:
    pack = make_pack(tmp_path)
    server = St2Api(tmp_path, [pack])
    (server.home / "configs").mkdir(parents=True, exist_ok=True)
    (server.home / "configs" / "advchat.yaml").write_text(yaml.safe_dump({"password": SECRET}))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def chat(api: St2Api, command: str) -> requests.Response:
    return api.http("POST", "/api/v1/aliasexecution/match_and_execute", user="chatops_bot",
                    json={"command": command, "user": "mallory", "source_channel": "ops"})


def finished(api: St2Api, response: requests.Response) -> Dict[str, Any]:
    assert response.status_code == 201, response.text
    ex_id = response.json()["results"][0]["execution"]["id"]
    return api.wait_status(ex_id, ("succeeded", "failed"))


def test_alias_execution_does_not_render_what_the_user_typed(api: St2Api) -> None:
    attack = "{{config_context.password}}"
    response = chat(api, f"greet {attack}")
    assert SECRET not in response.text
    record = finished(api, response)
    assert record["status"] == "succeeded", record
    assert record["parameters"]["text"] == attack
    assert record["result"]["result"]["text"] == attack
    assert SECRET not in json.dumps(record)
    for line in (api.home / "chat.jsonl").read_text().splitlines() if (
            api.home / "chat.jsonl").exists() else []:
        assert SECRET not in line


def test_st2kv_and_trailing_pairs_are_literals_too(api: St2Api) -> None:
    record = finished(api, chat(api, "greet {{st2kv.system.x}} verbose=true"))
    assert record["result"]["result"] == {"text": "{{st2kv.system.x}}", "verbose": True}


def test_undeclared_trailing_pair_is_refused_with_its_name(api: St2Api) -> None:
    response = chat(api, "greet bob inventory=/tmp/evil")
    assert response.status_code == 400
    assert "inventory" in response.json()["faultstring"]
    assert "/tmp/evil" not in response.json()["faultstring"]


def test_lookahead_representation_takes_only_ids(api: St2Api) -> None:
    refused = chat(api, "rollout status {{config_context.password}}")
    assert refused.status_code == 400
    assert "matched no patterns" in refused.json()["faultstring"]
    assert SECRET not in refused.text
    record = finished(api, chat(api, "rollout status ro-2024-1"))
    assert record["parameters"]["text"] == "ro-2024-1"
    record = finished(api, chat(api, "rollout status ro-7 verbose=true"))
    assert record["result"]["result"] == {"text": "ro-7", "verbose": True}
    assert chat(api, "rollout status ro-7 ../../etc").status_code == 400
    # a trailing pair cannot replace what the lookahead-guarded format took from the command
    bypass = chat(api, "rollout status ro-7 text={{config_context.password}}")
    assert bypass.status_code == 400 and SECRET not in bypass.text
    named = api.http("POST", "/api/v1/aliasexecution", user="chatops_bot",
                     json={"name": "status", "command": "rollout status ro-7 text=../../etc",
                           "format": "rollout status (?=[a-z0-9-]+\\s*$){{text}}"})
    assert named.status_code == 400
    assert "cannot replace it" in named.json()["faultstring"]


def test_help_shows_the_display_text(api: St2Api) -> None:
    help_ = api.http("GET", "/api/v1/actionalias/help", params={"filter": "rollout"}).json()
    displays = [h["display"] for h in help_["helpstrings"]]
    assert displays == ["rollout status <rollout_id>"]
    match = api.http("POST", "/api/v1/actionalias/match",
                     json={"command": "rollout status ro-1"}).json()
    assert match["display"] == "rollout status <rollout_id>"


def test_caller_cannot_bring_its_own_format(api: St2Api) -> None:
    response = api.http("POST", "/api/v1/aliasexecution", user="chatops_bot",
                        json={"name": "status", "format": "rollout status {{text}}",
                              "command": "rollout status {{config_context.password}}",
                              "user": "mallory"})
    assert response.status_code == 400
    assert "is not available on the alias" in response.json()["faultstring"]


def collect_stream(api: St2Api, events: List[str], stop: threading.Event,
                   connected: threading.Event) -> None:
    url = api.base + "/stream/v1/stream"
    with requests.get(url, headers={"X-Auth-Token": api.token("sre-alice")}, stream=True,
                      timeout=30) as response:
        connected.set()
        for line in response.iter_lines(chunk_size=1, decode_unicode=True):
            if line:
                events.append(line)
            if stop.is_set():
                return


def test_secrets_are_masked_in_every_api_response_and_the_stream(api: St2Api) -> None:
    events: List[str] = []
    stop, connected = threading.Event(), threading.Event()
    reader = threading.Thread(target=collect_stream, args=(api, events, stop, connected),
                              daemon=True)
    reader.start()
    assert connected.wait(60), "the stream did not open"
    record = finished(api, chat(api, "leak it"))
    ex_id = record["id"]
    assert record["result"]["result"]["password"] == MASK
    bodies = [json.dumps(record)]
    for path in (f"/api/v1/executions/{ex_id}", f"/api/v1/executions/{ex_id}/result",
                 f"/api/v1/executions/{ex_id}/output", "/api/v1/executions",
                 f"/api/v1/executions/{ex_id}?show_secrets=true"):
        response = api.http("GET", path, user="st2admin")
        assert response.status_code == 200, (path, response.text)
        bodies.append(response.text)
    assert f"stdout has {MASK}" in bodies[3] and f"stderr has {MASK}" in bodies[3]
    deadline = time.time() + 60
    while time.time() < deadline and not any(ex_id in e and "succeeded" in e for e in events):
        time.sleep(0.2)
    stop.set()
    assert any(ex_id in e and "succeeded" in e for e in events), events[-5:]
    for body in bodies + events:
        assert SECRET not in body
