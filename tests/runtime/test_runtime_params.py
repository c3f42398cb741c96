"""st2's parameter handling: CLI casting, rendering, defaults, validation, secret masking."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_support import FIXTURE_PACK

from fleet_runtime import params, templating
from fleet_runtime.datastore import Datastore
from fleet_runtime.packs import Registry
from fleet_runtime.runtime_errors import ParameterError


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry([str(FIXTURE_PACK)])


@pytest.fixture()
def kv(tmp_path: Path):
    ds = Datastore(str(tmp_path / "db.sqlite"), tmp_path / "key")
    templating.set_datastore(ds)
    yield ds
    templating.set_datastore(None)


def test_cli_casting_of_every_type(registry: Registry) -> None:
    action = registry.action("rt_test.types")
    got = params.cast_cli_parameters(action, [
        "s=hello world", "i=42", "n=2.5", "b=True", "a=x, y ,z", "o=k1=v1,k2=v2",
        "color=green", "unknown=7",
    ])
    assert got == {"s": "hello world", "i": 42, "n": 2.5, "b": True, "a": ["x", "y", "z"],
                   "o": {"k1": "v1", "k2": "v2"}, "color": "green", "unknown": "7"}


def test_cli_arrays_json_single_int_and_repeats(registry: Registry) -> None:
    action = registry.action("rt_test.types")
    assert params.cast_cli_parameters(action, ["a=[1, 2]"])["a"] == [1, 2]
    assert params.cast_cli_parameters(action, ["a=51"])["a"] == [51]
    assert params.cast_cli_parameters(action, ["a=x", "a=y,z"])["a"] == ["x", "y", "z"]
    assert params.cast_cli_parameters(action, ['o={"k": [1]}'])["o"] == {"k": [1]}


def test_cli_casting_errors_name_the_parameter(registry: Registry) -> None:
    action = registry.action("rt_test.types")
    with pytest.raises(ParameterError, match='"i" of rt_test.types: cannot read "ten"'):
        params.cast_cli_parameters(action, ["i=ten"])
    with pytest.raises(ParameterError, match="Valid values are: true, false"):
        params.cast_cli_parameters(action, ["b=maybe"])


def test_validation_required_enum_type_unknown_immutable(registry: Registry) -> None:
    action = registry.action("rt_test.types")
    with pytest.raises(ParameterError, match="'s' is a required property"):
        params.validate_parameters(action, {})
    with pytest.raises(ParameterError, match=r"parameter \"color\": 'blue' is not one of"):
        params.validate_parameters(action, {"s": "x", "color": "blue"})
    with pytest.raises(ParameterError, match=r"parameter \"i\": 'x' is not of type 'integer'"):
        params.validate_parameters(action, {"s": "x", "i": "x"})
    with pytest.raises(ParameterError, match="'bogus' was unexpected"):
        params.validate_parameters(action, {"s": "x", "bogus": 1})
    with pytest.raises(ParameterError, match=r"Override of immutable parameter\(s\) fixed"):
        params.validate_parameters(action, {"s": "x", "fixed": "changed"})
    # Optional parameters accept null (st2's allow_default_none); defaults are applied.
    out = params.validate_parameters(action, {"s": "x", "n": None})
    assert out["i"] == 3 and out["color"] == "red" and out["n"] is None


def test_rendering_defaults_dependencies_and_datastore(registry: Registry, kv: Datastore) -> None:
    kv.set("rt_greeting", "hi-from-kv")
    action = registry.action("rt_test.types")
    live = params.render_live_params(action, {"s": "abc", "i": "7"}, {"user": "u"}, {})
    # explicit values are cast; templated defaults are rendered and included.
    assert live["i"] == 7 and live["derived"] == "abc-7" and live["from_kv"] == "hi-from-kv"
    runner, action_params = params.render_final_params(action, live, {"user": "u"}, {})
    assert runner["timeout"] == 600 and runner["log_level"] == "DEBUG"
    assert action_params["fixed"] == "constant" and action_params["b"] is False
    assert "timeout" not in action_params


def test_rendering_uses_context_config_and_other_params(registry: Registry, kv: Datastore
                                                        ) -> None:
    kv.set("owner", "ops", scope="user", user="alice")
    action = registry.action("rt_test.greet")
    template = "{{ action_context.user }}/{{ st2kv.user.owner }}/{{ config_context.x }}"
    # pack-authored values (a rule's action parameters) are rendered like st2 does ...
    live = params.render_live_params(action, {"name": template}, {"user": "alice"},
                                     {"x": "cfg"}, render_given=True)
    assert live["name"] == "alice/ops/cfg"
    # ... what a caller passes is a literal (stricter than st2)
    live = params.render_live_params(action, {"name": template}, {"user": "alice"},
                                     {"x": "cfg"})
    assert live["name"] == template


def test_rendering_complex_values_keep_their_types(registry: Registry, kv: Datastore) -> None:
    action = registry.action("rt_test.types")
    live = params.render_live_params(
        action, {"s": "x", "a": ["{{trigger}}", 2], "o": {"k": "{{ trigger.n }}"}},
        {"user": "u"}, {}, additional={"trigger": {"n": 5}}, render_given=True)
    assert live["a"] == [{"n": 5}, 2] and live["o"] == {"k": "5"}


def test_rendering_cycle_and_missing_dependency(registry: Registry, kv: Datastore) -> None:
    action = registry.action("rt_test.types")
    with pytest.raises(ParameterError, match="cyclic dependency"):
        params.render_live_params(action, {"s": "{{ n }}", "n": "{{ s }}"}, {}, {},
                                  render_given=True)
    with pytest.raises(ParameterError, match='undefined variable\\(s\\) nowhere'):
        params.render_live_params(action, {"s": "{{ nowhere }}"}, {}, {}, render_given=True)


def test_alias_casts_strings(registry: Registry) -> None:
    action = registry.action("rt_test.types")
    cast = params.cast_params(action, {"i": "4", "b": "false", "a": "p, q", "o": '{"z": 1}'},
                              overrides={"array": params.cast_array_from_alias})
    assert cast == {"i": 4, "b": False, "a": ["p", "q"], "o": {"z": 1}}
    with pytest.raises(ParameterError, match='for parameter "i" of type "integer"'):
        params.cast_params(action, {"i": "four"})


def test_secrets_masked(registry: Registry) -> None:
    action = registry.action("rt_test.secret_echo")
    masked = params.mask_secrets(action, {"password": "hunter2", "user": "bob"})
    assert masked == {"password": "********", "user": "bob"}
    assert "hunter2" not in json.dumps(masked)
    # runner parameters marked secret are masked too (sudo_password of local runners).
    local = registry.action("core.local")
    assert params.mask_secrets(local, {"sudo_password": "x"}) == {"sudo_password": "********"}
