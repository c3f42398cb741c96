"""Adversarial (no server): the alias parser with st2's dict-form formats and a regex
lookahead in the representation; trailing key=value pairs parse as in st2 but cannot replace
what the format took from the command."""
from __future__ import annotations

import pytest

from fleet_runtime import aliases
from fleet_runtime.packs import Alias
from fleet_runtime.runtime_errors import AliasError

STATUS = r"rollout status (?=[a-z0-9-]+\s*$){{rollout_id}}"


def status_alias() -> Alias:
    return Alias(ref="t.status", pack="t", name="status", action_ref="core.noop",
                 formats=[{"display": "rollout status <rollout_id>",
                           "representation": [STATUS]}])


@pytest.mark.parametrize("command", [
    "rollout status {{config_context.password}}",
    "rollout status {% raw %}x",
    "rollout status ../../etc/passwd",
    "rollout status ro-1 ro-2",
    "rollout status ro-1.host.x",
])
def test_lookahead_refuses_anything_but_an_id(command: str) -> None:
    with pytest.raises(AliasError, match="matched no patterns"):
        aliases.get_matching_alias(command, [status_alias()])


def test_lookahead_accepts_an_id_and_trailing_pairs() -> None:
    found = aliases.get_matching_alias("rollout status ro-1 verbose=true", [status_alias()])
    assert found["display"] == "rollout status <rollout_id>"
    assert aliases.extract_parameters(found["representation"], "rollout status ro-1 a=b") == {
        "rollout_id": "ro-1", "a": "b"}


def test_trailing_pair_cannot_replace_a_parameter_of_the_format() -> None:
    with pytest.raises(AliasError, match='"rollout_id" is already given by the command'):
        aliases.extract_parameters(STATUS, "rollout status ro-1 rollout_id=../../etc")
    with pytest.raises(AliasError, match="matched no patterns"):
        aliases.get_matching_alias("rollout status ro-1 rollout_id={{config_context.x}}",
                                   [status_alias()])


def test_optional_parameter_left_out_may_still_come_as_a_pair() -> None:
    fmt = "rollout {{profile}} {{batch=10}}"
    assert aliases.extract_parameters(fmt, "rollout p1") == {"profile": "p1", "batch": "10"}
    assert aliases.extract_parameters(fmt, "rollout p1 batch=5") == {"profile": "p1",
                                                                     "batch": "5"}
    assert aliases.extract_parameters(fmt, "rollout p1 7") == {"profile": "p1", "batch": "7"}
    with pytest.raises(AliasError, match='"batch" is already given'):
        aliases.extract_parameters(fmt, "rollout p1 7 batch=5")
