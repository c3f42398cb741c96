"""Secret pack config fields are read and shown as StackStorm reads and shows them: a secret
field's `{{ st2kv... }}` reference is decrypted for the actions (st2's config loader), a
top-level secret field refuses `decrypt_kv` (st2's registration), an object marked secret is
shown masked whole (st2's API), and what the runtime masks in its outputs are the secret
fields' values."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import runtime_support as testing
import yaml

from fleet_runtime.masking import MASK
from fleet_runtime.runtime_errors import MetadataError

PASSWORD = "bmc-Pa55word-lab"
USER = "fleet-bmc-user"


def make_pack(root: Path) -> Path:
    pack = root / "cred_pack"
    pack.mkdir(parents=True)
    (pack / "pack.yaml").write_text(yaml.safe_dump({
        "ref": "cred", "name": "cred", "description": "a pack with credentials by name",
        "version": "0.1.0", "author": "me", "email": "me@example.com"}))
    (pack / "config.schema.yaml").write_text(textwrap.dedent("""
        credentials:
          type: object
          secret: true
          additionalProperties:
            type: object
            properties:
              username:
                type: string
              password:
                type: string
                secret: true
        token:
          type: string
          secret: true
          default: ""
        note:
          type: string
          default: ""
        """))
    return pack


def start(tmp_path: Path, monkeypatch: Any, config: Dict[str, Any],
          keys: Optional[Dict[str, Any]] = None) -> Any:
    """A runtime for the pack with `config`, after `keys` (name: (value, encrypted)) are
    stored in its datastore."""
    pack = make_pack(tmp_path)
    home = testing.fixture_home(tmp_path / "home", monkeypatch)
    if keys is not None:
        (home / "configs" / "cred.yaml").write_text(yaml.safe_dump({}))
        first = testing.engine(home, [str(pack)])
        for name, (value, encrypted) in keys.items():
            first.datastore.set(name, value, secret=encrypted)
        first.close()
    (home / "configs" / "cred.yaml").write_text(yaml.safe_dump(config))
    return testing.engine(home, [str(pack)])


def test_a_secret_fields_reference_is_decrypted_as_st2_decrypts_it(
        tmp_path: Path, monkeypatch: Any) -> None:
    rt = start(tmp_path, monkeypatch, {
        "credentials": {"lab": {"username": USER, "password": "{{ st2kv.system.bmc_lab }}"}},
        "token": "{{ st2kv.system.api_token }}",
        "note": "{{ st2kv.system.note }}",
    }, keys={"bmc_lab": (PASSWORD, True), "api_token": ("tok-0451-secret", True),
             "note": ("plain text", False)})
    try:
        config = rt.pack_config("cred")
        assert config["credentials"]["lab"] == {"username": USER, "password": PASSWORD}
        assert config["token"] == "tok-0451-secret"
        assert config["note"] == "plain text"
    finally:
        rt.close()


def test_a_secret_field_naming_a_key_stored_in_clear_is_refused_naming_the_field(
        tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(MetadataError) as info:
        start(tmp_path, monkeypatch, {
            "credentials": {"lab": {"username": USER,
                                    "password": "{{ st2kv.system.bmc_lab }}"}}},
            keys={"bmc_lab": (PASSWORD, False)})
    assert info.value.field == "credentials.lab.password"
    assert "encrypt" in str(info.value) and PASSWORD not in str(info.value)


def test_decrypt_kv_in_a_top_level_secret_field_is_refused_as_st2_refuses_it(
        tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(MetadataError) as info:
        start(tmp_path, monkeypatch, {"token": "{{ st2kv.system.api_token | decrypt_kv }}"})
    assert info.value.field == "token" and "decrypt_kv" in str(info.value)


def test_a_secret_object_is_shown_masked_whole_and_its_passwords_masked_in_outputs(
        tmp_path: Path, monkeypatch: Any) -> None:
    rt = start(tmp_path, monkeypatch, {
        "credentials": {"lab": {"username": USER, "password": PASSWORD}}})
    try:
        masked = rt.masker.mask(f"user {USER} with {PASSWORD}")
        assert masked == f"user {USER} with {MASK}"
    finally:
        rt.close()
    code, out, err = testing.cli_inprocess(tmp_path / "home", "pack", "config", "cred",
                                           "--json", packs=[str(tmp_path / "cred_pack")])
    assert code == 0, err
    assert json.loads(out)["credentials"] == MASK
    assert PASSWORD not in out and USER not in out
