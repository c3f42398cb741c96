"""The repository root is a StackStorm pack; code under actions/ must run on Python 3.8-3.11."""
from __future__ import annotations

import glob
import os
import subprocess

import locations
import pytest
import yaml

ROOT = locations.ROOT


def _python38() -> str:
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    candidates += ["/usr/bin/python3.8", "/usr/local/bin/python3.8"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("no Python 3.8 interpreter on this machine; the pack must be checked on 3.8")


def test_pack_yaml_has_required_fields() -> None:
    pack = yaml.safe_load((ROOT / "pack.yaml").read_text())
    for field in ("ref", "name", "description", "version", "author", "email"):
        assert pack.get(field), f"pack.yaml: missing {field}"
    assert pack["ref"] == "fleet_rollout"


def test_config_schema_marks_passwords_secret() -> None:
    schema = yaml.safe_load((ROOT / "config.schema.yaml").read_text())
    password = schema["credentials"]["additionalProperties"]["properties"]["password"]
    assert password.get("secret") is True


def _hidden_secrets(schema: dict, path: str, found_by_name: bool) -> list:
    """Secret fields StackStorm's API would show in clear: st2 masks what it reaches through
    `properties` and `items` (st2common util/secrets.py get_secret_parameters), so a secret
    under `additionalProperties` or `patternProperties` is masked only with a secret above."""
    if schema.get("secret"):
        return [] if found_by_name else [path]
    hidden = []
    for name, sub in (schema.get("properties") or {}).items():
        hidden += _hidden_secrets(sub, f"{path}.{name}", found_by_name)
    if isinstance(schema.get("items"), dict):
        hidden += _hidden_secrets(schema["items"], f"{path}[]", found_by_name)
    if isinstance(schema.get("additionalProperties"), dict):
        hidden += _hidden_secrets(schema["additionalProperties"], f"{path}.*", False)
    for pattern, sub in (schema.get("patternProperties") or {}).items():
        hidden += _hidden_secrets(sub, f"{path}.{pattern}", False)
    return hidden


def test_every_secret_config_field_is_one_stackstorms_api_masks() -> None:
    schema = yaml.safe_load((ROOT / "config.schema.yaml").read_text())
    hidden = []
    for name, field in schema.items():
        hidden += _hidden_secrets(field, name, True)
    assert hidden == []
    assert schema["credentials"].get("secret") is True


def test_library_has_no_stackstorm_import() -> None:
    for path in (ROOT / "actions" / "lib").rglob("*.py"):
        text = path.read_text()
        assert "import st2common" not in text and "from st2common" not in text, path


def test_actions_compile_on_python38() -> None:
    files = [str(p) for p in (ROOT / "actions").rglob("*.py")]
    assert files
    proc = subprocess.run(
        [_python38(), "-m", "py_compile", *files], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
