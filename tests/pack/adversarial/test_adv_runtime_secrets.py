"""Adversarial: config secrets (`secret: true` in config.schema.yaml) and encrypted datastore
values never appear in what the runtime shows or outputs: execution records (results,
stdout/stderr, error messages, workflow results), chat posts, the CLI, log records. What a
workflow reads is not masked (the engine's own state, in the private database)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
import runtime_support as testing
import yaml
from adv_support import write, write_announce_action, write_pack_yaml

from fleet_runtime import chatlog
from fleet_runtime.masking import MASK

SECRET = "adv-Secret-Pa55word"
KV_SECRET = "kv-Secret-0451"



def make_pack(root: Path) -> Path:
    pack = root / "leak_pack"
    write_pack_yaml(pack, "leak", "a pack whose actions try to leak their config secret")
    write(pack / "config.schema.yaml", """
        password:
          type: string
          secret: true
          required: true
        pin:
          type: string
          secret: true
          default: "42"
        """)
    write(pack / "actions" / "leak.yaml", """
        name: leak
        runner_type: python-script
        entry_point: leak.py
        parameters:
          mode:
            type: string
            default: result
        """)
    write(pack / "actions" / "leak.py", """
        import sys

        from st2common.runners.base_action import Action


        class Leak(Action):
            def run(self, mode):
                pw = self.config["password"]
                print("stdout has " + pw)
                self.logger.info("logger has %s", pw)
                sys.stderr.write("stderr has " + pw + "\\n")
                if mode == "raise":
                    raise RuntimeError("failed with " + pw)
                if mode == "kv":
                    value = self.action_service.get_value("dbpw", local=False, decrypt=True)
                    print("kv has " + value)
                    return {"kv": value}
                return {"password": pw, "nested": {"list": [pw, "x" + pw + "y"]},
                        "pin": self.config["pin"]}
        """)
    write_announce_action(pack, "announce", "chatops",
                          '"the password is {{ config_context.password }}"')
    write(pack / "actions" / "flow.yaml", """
        name: flow
        runner_type: orquesta
        entry_point: workflows/flow.yaml
        """)
    write(pack / "actions" / "workflows" / "flow.yaml", """
        version: 1.0
        tasks:
          call:
            action: leak.leak
        output:
          - got: <% task(call).result %>
        """)
    return pack


@pytest.fixture()
def leak(tmp_path: Path, monkeypatch: Any) -> Iterator[Dict[str, Any]]:
    pack = make_pack(tmp_path)
    home = testing.fixture_home(tmp_path / "home", monkeypatch)
    (home / "configs" / "leak.yaml").write_text(yaml.safe_dump({"password": SECRET}))
    rt = testing.engine(home, [str(pack)])
    try:
        yield {"rt": rt, "home": home, "pack": pack}
    finally:
        rt.close()


def stored(rt: Any) -> str:
    rows = [dict(r) for r in rt.store.conn.execute("SELECT * FROM executions")]
    rows += [dict(r) for r in rt.store.conn.execute("SELECT * FROM task_executions")]
    rows += [dict(r) for r in rt.store.conn.execute("SELECT * FROM events")]
    return json.dumps(rows, default=str)


def test_result_stdout_stderr_and_logger_are_masked(leak: Dict[str, Any]) -> None:
    rt = leak["rt"]
    record = testing.run(rt, "leak.leak")
    assert record["status"] == "succeeded", record["result"]
    result = record["result"]
    assert result["result"]["password"] == MASK
    assert result["result"]["nested"]["list"] == [MASK, f"x{MASK}y"]
    assert f"stdout has {MASK}" in result["stdout"]
    assert f"stderr has {MASK}" in result["stderr"]
    assert f"logger has {MASK}" in result["stderr"]
    assert SECRET not in stored(rt)


def test_short_secret_is_not_masked(leak: Dict[str, Any]) -> None:
    """Documented: a secret shorter than 4 characters is left as it is (masking "42" would
    garble every number in every output)."""
    record = testing.run(leak["rt"], "leak.leak")
    assert record["result"]["result"]["pin"] == "42"


def test_error_message_is_masked(leak: Dict[str, Any]) -> None:
    rt = leak["rt"]
    record = testing.run(rt, "leak.leak", {"mode": "raise"})
    assert record["status"] == "failed"
    assert f"failed with {MASK}" in json.dumps(record["result"])
    assert SECRET not in stored(rt)


def test_encrypted_datastore_value_is_masked(leak: Dict[str, Any]) -> None:
    rt = leak["rt"]
    rt.datastore.set("dbpw", KV_SECRET, secret=True)
    record = testing.run(rt, "leak.leak", {"mode": "kv"})
    assert record["status"] == "succeeded", record["result"]
    assert record["result"]["result"]["kv"] == MASK
    assert KV_SECRET not in stored(rt)


def test_workflow_result_is_masked(leak: Dict[str, Any]) -> None:
    rt = leak["rt"]
    record = testing.run(rt, "leak.flow")
    assert record["status"] == "succeeded", record["result"]
    assert record["result"]["output"]["got"]["result"]["password"] == MASK
    # the execution records (what the API, the stream and the CLI show) are masked; the
    # workflow itself read the result as the action returned it (st2 masks what it shows,
    # never what orquesta reads: tests/runtime/test_runtime_masking_reads.py)
    shown = json.dumps([dict(r) for r in rt.store.conn.execute("SELECT * FROM executions")],
                       default=str)
    assert SECRET not in shown


def test_chat_post_is_masked(leak: Dict[str, Any]) -> None:
    rt, home = leak["rt"], leak["home"]
    record = testing.run(rt, "leak.announce")
    assert record["status"] == "succeeded", record["result"]
    posted = chatlog.chat_messages(home)
    assert posted and posted[-1]["message"] == f"the password is {MASK}"
    assert SECRET not in (home / chatlog.CHAT_FILE).read_text()
    assert SECRET not in stored(rt)


def test_log_records_of_the_runtime_are_masked(leak: Dict[str, Any],
                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleet_runtime.engine"):
        logging.getLogger("fleet_runtime.engine").warning("config says %s", SECRET)
    assert caplog.records and SECRET not in caplog.text
    assert f"config says {MASK}" in caplog.text


def test_cli_output_is_masked(tmp_path: Path, monkeypatch: Any) -> None:
    pack = make_pack(tmp_path)
    home = testing.fixture_home(tmp_path / "home", monkeypatch)
    (home / "configs" / "leak.yaml").write_text(yaml.safe_dump({"password": SECRET}))
    for extra in ([], ["--json"]):
        proc = testing.cli(home, "run", "leak.leak", *extra, packs=[str(pack)])
        assert proc.returncode == 0, proc.stderr
        assert MASK in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr
    proc = testing.cli(home, "execution", "list", packs=[str(pack)])
    assert SECRET not in proc.stdout + proc.stderr
