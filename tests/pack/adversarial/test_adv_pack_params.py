"""Attacks on what callers pass: action parameters and chat alias formats.

Every finding of the hardening review that lives in the pack's metadata: values a chat or CLI
user passes are data, never templates, paths or Ansible patterns; what cannot be checked by a
`pattern` does not exist as a parameter (inventory, user, free-text reasons).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import locations
import pytest
import yaml
from jsonschema import Draft4Validator

from fleet_rollout import names, states
from fleet_rollout.config import DEFAULT_FORKS
from fleet_rollout.plan import new_rollout_id
from fleet_runtime.aliases import ParseError, extract_parameters

ROOT = locations.ROOT
ACTIONS = sorted((ROOT / "actions").glob("*.yaml"))
ALIASES = sorted((ROOT / "aliases").glob("*.yaml"))
RUNNER_PARAMS = {"timeout"}  # st2 runner parameters the pack only gives a default

ATTACKS = [
    "{{config_context.credentials.default.password}}",
    "{{ st2kv.system.fleet_rollout }}",
    "{% for x in range(9999999) %}x{% endfor %}",
    "../../etc/passwd",
    "/etc/shadow",
    "a.host.b",
    "$(reboot)",
    "`id`",
    "x;rm -rf /",
    "x y",
    "x\ny",
    "abc\n",  # `$` would let a final newline through; the patterns end with \Z
    "lab-001\n",
    "",
    "A" * 600,
]


def _load(path: Path) -> Dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _string_params() -> Iterator[Tuple[str, str, Dict[str, Any]]]:
    for path in ACTIONS:
        meta = _load(path)
        for name, spec in (meta.get("parameters") or {}).items():
            if name in RUNNER_PARAMS:
                continue
            if spec.get("type") == "string":
                yield meta["name"], name, spec
            if spec.get("type") == "array":
                yield meta["name"], f"{name}[]", spec.get("items") or {}


def test_every_string_parameter_has_a_strict_pattern_or_enum() -> None:
    loose = [f"{action}.{name}" for action, name, spec in _string_params()
             if not spec.get("enum") and not (spec.get("pattern") or "").startswith("^")]
    assert not loose, f"string parameters without an anchored pattern or enum: {loose}"
    unanchored = [f"{action}.{name}" for action, name, spec in _string_params()
                  if spec.get("pattern") and not spec["pattern"].endswith("\\Z")]
    assert not unanchored, unanchored


def test_no_parameter_takes_paths_identities_or_free_text() -> None:
    """The inventory comes from the pack config, identity from StackStorm's record of the
    execution, reasons from the rollout's own verdicts: none of them is a parameter."""
    banned = {"inventory", "user", "execution_id", "workflow_execution_id", "reason", "path",
              "response", "explanation", "playbook"}
    found = [f"{_load(p)['name']}.{n}" for p in ACTIONS for n in (_load(p).get("parameters")
                                                                 or {}) if n in banned]
    assert not found, found


@pytest.mark.parametrize("attack", ATTACKS)
def test_patterns_refuse_templates_paths_and_shell(attack: str) -> None:
    for action, name, spec in _string_params():
        if spec.get("enum"):
            assert attack not in spec["enum"] or attack == ""
            continue
        schema = {"type": "object", "properties": {"v": spec}}
        errors = list(Draft4Validator(schema).iter_errors({"v": attack}))
        if attack == "a.host.b" and (name == "targets" or
                                     name.startswith(("host", "users", "roles"))):
            continue  # a legitimate host or user name: dots only harm rollout ids
        assert errors, f"{action}.{name} accepts {attack!r}"


def test_generated_rollout_ids_and_shipped_profile_names_pass_the_patterns() -> None:
    rollout_id = _load(ROOT / "actions" / "status.yaml")["parameters"]["rollout_id"]["pattern"]
    profile = _load(ROOT / "actions" / "plan.yaml")["parameters"]["profile"]["pattern"]
    assert rollout_id == names.ROLLOUT_ID_PATTERN
    for path in (ROOT / "profiles").glob("*.yaml"):
        assert re.match(profile, path.stem), path.name
        assert re.match(rollout_id, new_rollout_id(path.stem)), path.name


def test_library_checks_refuse_the_same_values_without_echoing_templates() -> None:
    from fleet_rollout.errors import ConfigError

    for attack in ATTACKS:
        with pytest.raises(ConfigError) as err:
            names.check_rollout_id(attack)
        assert "config_context" not in str(err.value) and "st2kv" not in str(err.value)
    with pytest.raises(ConfigError):
        names.check_targets("@/etc/hosts")
    with pytest.raises(ConfigError):
        names.check_targets("~.*")
    assert names.check_targets("rack1:&site_a:!lab-003") == "rack1:&site_a:!lab-003"


def _representations() -> Iterator[Tuple[str, str]]:
    for path in ALIASES:
        for fmt in _load(path)["formats"]:
            assert isinstance(fmt, dict), f"{path.name}: formats need display + representation"
            for rep in fmt["representation"]:
                yield path.stem, rep


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a and "\n" not in a])
def test_alias_formats_take_only_ids_and_names(attack: str) -> None:
    """A chat command whose parameter is not an id or a name matches no alias: StackStorm never
    sees it, so it is never rendered, stored or echoed."""
    for _alias, rep in _representations():
        words = rep.split(" (?=")[0]
        if "{{profile}}" in rep:
            commands = [f"{words} {attack} on all", f"{words} home-snoop on {attack}"]
        else:
            commands = [f"{words} {attack}"]
        for command in commands:
            if "{{profile}}" in rep and command.endswith(" on a.host.b"):
                continue  # a.host.b is a fine inventory pattern
            with pytest.raises(ParseError):
                extract_parameters(rep, command)


def test_alias_formats_still_take_real_ids() -> None:
    rid = new_rollout_id("home-snoop")
    for _alias, rep in _representations():
        words = rep.split(" (?=")[0]
        if "{{profile}}" in rep:
            got = extract_parameters(rep, f"{words} home-snoop on site_a:&rack-1")
            assert got["profile"] == "home-snoop" and got["targets"] == "site_a:&rack-1"
        else:
            assert extract_parameters(rep, f"{words} {rid}")["rollout_id"] == rid


def test_alias_acks_never_echo_parameters() -> None:
    for path in ALIASES:
        ack = _load(path).get("ack") or {}
        assert "parameters" not in str(ack.get("format", "")), path.name


def test_workflows_pass_no_identity_and_every_host_action_gets_a_timeout() -> None:
    for path in (ROOT / "actions" / "workflows").glob("*.yaml"):
        text = path.read_text()
        assert "api_user" not in text and "st2).user" not in text, path.name
        tasks = yaml.safe_load(text)["tasks"]
        for name, task in tasks.items():
            if task.get("action") == "fleet_rollout.host_step":
                assert "timeout" in (task.get("input") or {}), f"{path.name}: {name}"


def test_metadata_patterns_are_the_librarys_own() -> None:
    """st2 checks the metadata's patterns, the library its own: they must be the same."""
    from fleet_rollout.inventory import HOST_NAME_PATTERN
    from fleet_rollout.profile import PROFILE_NAME_PATTERN

    for action, name, spec in _string_params():
        if name in ("host", "hosts[]"):
            assert spec["pattern"] == HOST_NAME_PATTERN, action
        if name == "profile":
            assert spec["pattern"] == PROFILE_NAME_PATTERN, action
        if name == "rollout_id":
            assert spec["pattern"] == names.ROLLOUT_ID_PATTERN, action
        if name == "targets":
            assert spec["pattern"] == names.TARGETS_PATTERN, action


def test_host_action_timeout_defaults_outlast_every_shipped_profile() -> None:
    """A host_step (a step or a restore) run without the workflow's timeouts (st2 run, a
    fallback) still outlasts its own waits for every shipped profile."""
    import yaml as _yaml

    from fleet_rollout import timeouts
    from fleet_rollout.profile import validate_profile

    step = _load(ROOT / "actions" / "host_step.yaml")["parameters"]["timeout"]["default"]
    wave = _load(ROOT / "actions" / "wave_step.yaml")["parameters"]["timeout"]["default"]
    flow = (ROOT / "actions" / "workflows" / "host_change.yaml").read_text()
    waves = (ROOT / "actions" / "workflows" / "wave_change.yaml").read_text()
    for path in (ROOT / "profiles").glob("*.yaml"):
        profile = validate_profile(_yaml.safe_load(path.read_text()), str(path))
        # a profile of waves larger than the default forks runs with ansible_forks sized for
        # them (docs/configuration.md): one round of Ansible work per wave step
        forks = max(DEFAULT_FORKS, int(profile["batches"]["parallel"]))
        derived = timeouts.action_timeouts(profile, forks=forks)
        assert step >= max(derived.values()), path.name
        assert wave >= max(derived[s] for s in states.WAVE_STEPS), path.name
    assert f'get("restore", {step})' in flow and f'get("wait", {step})' in flow
    assert f'get("drain", {wave})' in waves and f'get("undrain", {wave})' in waves


def test_chat_cannot_set_runner_parameters() -> None:
    """env, debug, log_level, content_version (and timeout, except where the workflows pass
    one) are immutable: a trailing `env=...` pair in chat is refused, as st2 refuses overriding
    an immutable parameter."""
    for path in ACTIONS:
        meta = _load(path)
        if meta["runner_type"] != "python-script":
            continue
        params = meta["parameters"]
        for name in ("env", "debug", "log_level", "content_version"):
            assert params[name]["immutable"] is True, (path.name, name)
        if meta["name"] not in ("host_step", "wave_step"):  # the workflows pass a timeout
            assert params["timeout"]["immutable"] is True, path.name
