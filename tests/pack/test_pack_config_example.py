"""config.example.yaml is a pack config StackStorm registers: it validates against
config.schema.yaml as st2 validates it, and its secrets come from encrypted datastore keys,
which the actions get decrypted."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import runtime_support as testing
import yaml
from locations import ROOT


def test_the_example_config_registers_and_reads_its_secrets_from_encrypted_keys(
        tmp_path: Path, monkeypatch: Any) -> None:
    example = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    keys = {
        "fleet_rollout_bmc_default": "default-Pa55-example",
        "fleet_rollout_bmc_dc2": "dc2-Pa55-example",
        "fleet_rollout_state_api_key": "state-api-key-example",
    }
    home = testing.fixture_home(tmp_path / "home", monkeypatch)
    for name, value in keys.items():
        code, _, err = testing.cli_inprocess(home, "key", "set", name, value, "--encrypt")
        assert code == 0, err
    shutil.copy(ROOT / "config.example.yaml", home / "configs" / "fleet_rollout.yaml")
    rt = testing.engine(home, [str(ROOT)])
    try:
        config = rt.pack_config("fleet_rollout")
        assert config["credentials"]["default"]["password"] == keys["fleet_rollout_bmc_default"]
        assert config["credentials"]["dc2"]["password"] == keys["fleet_rollout_bmc_dc2"]
        assert config["credentials"]["dc2"]["networks"] == example["credentials"]["dc2"]["networks"]
        assert config["state_api_key"] == keys["fleet_rollout_state_api_key"]
        assert config["inventory"] == example["inventory"]
    finally:
        rt.close()
