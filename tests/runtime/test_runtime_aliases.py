"""Action aliases like st2's ChatOps: format parsing, matching, ambiguity, ack/result."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_support import FIXTURE_PACK, cli_inprocess, make_home

from fleet_runtime import aliases
from fleet_runtime.packs import Alias, Registry
from fleet_runtime.runtime_errors import AliasError


@pytest.mark.parametrize(
    "fmt,command,expected",
    [
        ("greet {{name}}", "greet bob", {"name": "bob"}),
        ("greet {{name}}", "greet Bob Smith", {"name": "Bob Smith"}),
        ("greet {{name}}", 'greet "quoted name"', {"name": "quoted name"}),
        ("run hello {{who=world}}", "run hello", {"who": "world"}),
        ("run hello {{who=world}}", "run hello there", {"who": "there"}),
        ("rollout {{profile}} on {{hosts}}", "rollout home-snoop on web1,web2",
         {"profile": "home-snoop", "hosts": "web1,web2"}),
        ("rollout {{profile}}", "rollout p1 batch=3 dry_run=true",
         {"profile": "p1", "batch": "3", "dry_run": "true"}),
        ("rollout {{profile}}", "rollout p1 note='a b c'", {"profile": "p1", "note": "a b c"}),
        ("set {{key}} {{value}}", 'set cfg {"a": 1}', {"key": "cfg", "value": '{"a": 1}'}),
        # st2 pads the command with a space on each side: anchored formats allow for it
        (r"^\s*status\s*$", "status", {}),
    ],
)
def test_format_parsing(fmt: str, command: str, expected: dict) -> None:
    assert aliases.extract_parameters(fmt, command) == expected


@pytest.mark.parametrize(
    "command,pairs,rest",
    [("rollout p1 batch=3 dry_run=true", [("batch", "3"), ("dry_run", "true")], "rollout p1"),
     ("x a=\"\" b=''", [("a", ""), ("b", "")], "x"),
     ('x a={"k": 1} b=2', [("a", '{"k": 1}'), ("b", "2")], "x"),
     ("x a =b", [("a", "b")], "x"),
     ("x a= b", [], "x a= b"),          # a value follows its = at once
     ("x a=b c", [], "x a=b c"),        # pairs only at the end
     ('x a="open', [], 'x a="open'),    # an unclosed quote is no value
     ("a=1", [("a", "1")], "")])
def test_trailing_pairs(command: str, pairs: list, rest: str) -> None:
    found, start = aliases.trailing_pairs(command)
    assert (found, command[:start]) == (pairs, rest)


@pytest.mark.parametrize("tail", [" " * 100_000, ' a="' * 30_000, " a={" * 30_000,
                                  " a=b" * 30_000 + " c", " =" * 50_000],
                         ids=["blanks", "open-quotes", "open-braces", "pairs-then-word",
                              "bare-equals"])
def test_a_long_hostile_command_is_parsed_in_one_pass(tail: str) -> None:
    """A chat line is anyone's input: parsing is linear in its length, so a command of a
    hundred thousand characters built to make a backtracking parser explode is refused or
    parsed like any other (a regex parser takes hours over these)."""
    command = "rollout approve r1" + tail
    try:
        params = aliases.extract_parameters("rollout approve {{rollout_id}}", command)
    except aliases.ParseError:
        return
    assert params["rollout_id"].startswith("r1")


@pytest.mark.parametrize("fmt,command", [("greet {{name}}", "hello bob"),
                                         ("run hello {{who}}", "run hello"),
                                         (r"^\s*status\s*$", "status please")])
def test_format_mismatch(fmt: str, command: str) -> None:
    with pytest.raises(aliases.ParseError):
        aliases.extract_parameters(fmt, command)


def _alias(name: str, formats: list) -> Alias:
    return Alias(ref=f"t.{name}", pack="t", name=name, action_ref="core.noop", formats=formats)


def test_matching_ambiguity_and_no_match() -> None:
    reg = Registry([str(FIXTURE_PACK)])
    assert aliases.get_matching_alias("greet bob", reg.aliases)["alias"].name == "greet"
    assert aliases.get_matching_alias("deploy web", reg.aliases)["alias"].name == "deploy"
    with pytest.raises(AliasError, match="matched more than 1 pattern") as info:
        aliases.get_matching_alias("deploy web now", reg.aliases)
    assert "rt_test.deploy" in str(info.value) and "rt_test.deploy_now" in str(info.value)
    with pytest.raises(AliasError, match="matched no patterns"):
        aliases.get_matching_alias("make coffee", reg.aliases)
    disabled = _alias("off", ["make coffee"])
    disabled.enabled = False
    with pytest.raises(AliasError, match="matched no patterns"):
        aliases.get_matching_alias("make coffee", [disabled])


def test_match_multiple_formats() -> None:
    multi = _alias("m", [{"display": "ping", "representation": ["ping {{host}}"],
                          "match_multiple": True}])
    pattern = aliases.get_matching_alias("ping a ping b", [multi])
    assert pattern["match_multiple"] is True
    runs = aliases.extract_parameters(pattern["representation"], "ping a ping b",
                                      match_multiple=True)
    assert len(runs) >= 1 and all("host" in r for r in runs)


def test_chat_runs_alias_and_prints_ack_and_result(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    code, out, err = cli_inprocess(home, "chat", "greet alice", "--user", "alice",
                                   "--channel", "ops")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("Greeting alice (execution ")
    assert lines[-1] == "hello alice"
    transcript = [json.loads(x) for x in (home / "chat.jsonl").read_text().splitlines()]
    assert [t["user"] for t in transcript] == ["alice", "bot", "bot"]
    assert {t["channel"] for t in transcript} == {"ops"}
    code, out, err = cli_inprocess(home, "execution", "list", "--json")
    record = json.loads(out)[-1]
    assert record["context"]["api_user"] == "alice"
    assert record["context"]["source_channel"] == "ops"
    assert record["context"]["action_alias_ref"] == {"id": "rt_test.greet", "name": "greet"}


def test_chat_defaults_immutable_params_masking_and_errors(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    code, out, _ = cli_inprocess(home, "chat", "run hello")
    assert code == 0 and out.strip().splitlines()[-1] == "hello workflow said: hello world"
    code, out, _ = cli_inprocess(home, "chat", "deploy web")
    assert code == 0 and "HELLO WEB" in out  # immutable_parameters: shout=true
    code, out, err = cli_inprocess(home, "chat", "deploy web shout=false")
    assert code == 1 and "Immutable arguments cannot be overriden: shout" in err
    code, out, _ = cli_inprocess(home, "chat", "login bob hunter2")
    assert code == 0 and "login as bob with ********" in out and "hunter2" not in out
    code, out, err = cli_inprocess(home, "chat", "deploy web now")
    assert code == 1 and "matched more than 1 pattern" in err
    code, out, err = cli_inprocess(home, "chat", "greet bob times=two")
    assert code == 1 and 'for parameter "times" of type "integer"' in err
