"""The tracked tree tells what is true now: no development history, a README a user reads at
once, and every command the README shows is one the tests run (or the st2 form of one).

History lives in git and in CHANGES.md (docs/CONVENTIONS.md, "Comments and history"): no stop,
session or issue numbers, no "tried and reverted" narration, no tables of past runs. Measured
figures live in bench/RESULTS.md, which the bench scripts write.
"""
from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Tuple

import locations
import pytest
import yaml

from fleet_rollout.config import load_pack_config
from fleet_runtime import aliases
from fleet_runtime.packs import Registry

ROOT = locations.ROOT
README_MAX_LINES = 250
# files kept as their publisher wrote them (DMTF's Redfish schemas)
THIRD_PARTY = ("tests/fixtures/redfish_csdl/",)
GENERATED_TABLES = ("bench/RESULTS.md",)  # the current figures, with the commit of each run
SELF = "tests/pack/test_docs_hygiene.py"  # its own examples of what the patterns catch

HISTORY = [
    (re.compile(r"\b(?:at|since|before|until|in|from) stops? \d+", re.I), "a stop number"),
    (re.compile(r"\bstops? \d+\b", re.I), "a stop number"),
    (re.compile(r"\bat stop\b", re.I), "a stop"),
    (re.compile(r"\bissues? #?\d+\b", re.I),
     "an issue number (an external one is written owner/repo#N)"),
    (re.compile(r"\bsessions? \d+\b", re.I), "a session number"),
    (re.compile(r"\b(?:reverted since|removed since|tried and reverted|was tried)\b", re.I),
     "narration of past attempts"),
]
# a markdown table of past runs: a `stop`, `session` or `commit` column, or commit hashes in rows
RUN_TABLE_COLUMNS = {"stop", "session", "commit"}
TABLE_RULE = re.compile(r"^\|[-:| ]+\|\s*$")
COMMIT_IN_ROW = re.compile(r"^\|.*\b(?=[0-9a-f]{7,12}\b)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])"
                           r"[0-9a-f]{7,12}\b")


def tracked_text_files() -> List[Tuple[str, str]]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    out = []
    for name in filter(None, names):
        path = ROOT / name
        if name.startswith(THIRD_PARTY) or name == SELF or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (icon.png)
        out.append((name, data.decode("utf-8", errors="replace")))
    return out


def _run_table(name: str, lines: List[str], index: int) -> bool:
    """Whether lines[index] is a row of a markdown table of past runs."""
    if not name.endswith(".md") or name in GENERATED_TABLES or not lines[index].startswith("|"):
        return False
    if COMMIT_IN_ROW.match(lines[index]):
        return True
    header = index + 1 < len(lines) and TABLE_RULE.match(lines[index + 1])
    cells = {cell.strip().lower() for cell in lines[index].strip("|").split("|")}
    return bool(header and cells & RUN_TABLE_COLUMNS)


def history_lines(name: str, text: str) -> List[str]:
    found = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if name == "CHANGES.md" and line.startswith("#"):
            continue  # a release heading names its version
        for pattern, what in HISTORY:
            if pattern.search(line):
                found.append(f"{name}:{index + 1}: {what}: {line.strip()[:120]}")
                break
        else:
            if _run_table(name, lines, index):
                found.append(f"{name}:{index + 1}: a table of past runs: {line.strip()[:120]}")
    return found


def test_no_development_history_in_tracked_files() -> None:
    found = [hit for name, text in tracked_text_files() for hit in history_lines(name, text)]
    assert not found, "development history (say what is true now; history goes to git and " \
        "CHANGES.md):\n" + "\n".join(found)


# the examples are put together here, so this file itself carries no such line
STOP, ISSUE, SESSION = "st" + "op", "iss" + "ue", "sess" + "ion"


@pytest.mark.parametrize("line", [
    f"Fresh-clone runs at {STOP} 50: 4 workers 21m22s",
    f"the judge before {ISSUE} 15: one-sided Mann-Whitney",
    f"({ISSUE} 16)",
    f"measured in {SESSION} 3",
    "| stop | commit | result | wall |\n|---|---|---|---|",
    "| 53 | 9edabb7 (the head's code) | 1,702 passed | 19m26s |",
    "the sim demo ordered first (reverted since)",
])
def test_the_history_check_finds_what_it_should(line: str) -> None:
    assert history_lines("docs/x.md", line)


@pytest.mark.parametrize("line", [
    "StackStorm/st2#4865 (open): an inquiry that ends a sub-workflow",
    "a session the BMC dropped is logged in again on its 401",
    "| `bench-rollout` | a whole rollout of sim hosts |",
    "| knob | dell |\n|---|---|\n| commit | config job |",
])
def test_the_history_check_lets_present_facts_through(line: str) -> None:
    assert not history_lines("docs/x.md", line)
    assert not history_lines("CHANGES.md", "## 0.1.0")


def test_the_generated_results_table_may_name_commits() -> None:
    row = "| bench-runtime | chain | 2.04 | ms | 2026-12-06 12:50 | 6396eb6 | AMD EPYC |"
    assert history_lines("bench/RESULTS.md", row) == []
    assert history_lines("docs/benchmarks.md", row)


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: reference " \
        "goes to docs/, figures to bench/RESULTS.md"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## The two commands", headings
    first = text.split("## The two commands", 1)[1].split("## ", 1)[0]
    assert "make demo" in first and "make test" in first


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_changes_names_the_packs_version() -> None:
    version = yaml.safe_load((ROOT / "pack.yaml").read_text())["version"]
    headings = [line for line in (ROOT / "CHANGES.md").read_text().splitlines()
                if line.startswith("## ")]
    assert any(h.split()[1] == version for h in headings), (version, headings)


# ---------------------------------------------------------------- the README's commands

def readme_commands() -> Dict[str, List[str]]:
    """The lines of the README's command blocks, by block kind: `shell` or `chat` (a block
    right after a line that mentions chat); yaml blocks and the rollout picture are data."""
    text = (ROOT / "README.md").read_text()
    out: Dict[str, List[str]] = {"shell": [], "chat": []}
    for before, lang, body in re.findall(r"([^\n]*)\n\n?```(\w*)\n(.*?)```", text, re.S):
        if lang == "yaml" or "->" in body:
            continue
        kind = "chat" if "chat" in before.lower() else "shell"
        out[kind] += [line.split("  #")[0].strip() for line in body.splitlines()
                      if line.strip()]
    return out


# command prefix -> (a test file, what in it shows the command runs)
EVIDENCE: Dict[str, Tuple[str, str]] = {
    "make demo": ("tests/e2e/test_demo.py", "fleet_lab.demo"),
    "make test": (".ci/run", "make test"),
    "st2 pack install": ("tests/e2e/test_pack_fresh_install.py", "st2 pack install"),
    # st2 registers the pack config; the runtime validates it as st2 does
    "st2ctl reload --register-configs": ("tests/runtime/test_runtime_st2_strict.py",
                                         "pack_config_is_validated_as_written"),
    "st2 run fleet_rollout.plan ": ("tests/e2e/test_rollout_sim.py", "fleet_rollout.plan"),
    "st2 run -a fleet_rollout.rollout ": ("tests/e2e/test_st2api_rollout.py",
                                          "fleet_rollout.rollout"),
    "st2 run fleet_rollout.status ": ("tests/e2e/test_rollout_sim.py", "fleet_rollout.status"),
    "st2 run fleet_rollout.respond ": ("tests/e2e/test_pack_approvals.py",
                                       '"run", "fleet_rollout.respond"'),
    "st2 inquiry respond ": ("tests/e2e/test_st2api_rollout.py", '"inquiry", "respond"'),
    "st2 run fleet_rollout.abort ": ("tests/e2e/test_pack_approvals.py",
                                     '"run", "fleet_rollout.abort"'),
    "st2 run fleet_rollout.rollback ": ("tests/e2e/test_watchdog_rollout.py",
                                        '"run", "fleet_rollout.rollback"'),
    "fleet-rollout run -a ": ("tests/runtime/test_runtime_cli.py", '"run", "-a"'),
    "fleet-rollout execution list": ("tests/runtime/test_runtime_cli.py",
                                     '"execution", "list"'),
    "fleet-rollout inquiry respond ": ("tests/runtime/test_runtime_cli.py",
                                       '"inquiry", "respond"'),
    "fleet-rollout chat ": ("tests/e2e/test_rollout_sim.py", '"chat", '),
    "fleet-rollout api serve": ("tests/st2api_support.py", '"api", "serve"'),
    "fleet-rollout lab up --hosts 6 --backend vm --sim-hosts ": ("tests/lab/test_lab_mixed.py",
                                                                 "--sim-hosts"),
    "fleet-rollout lab up --hosts 2000 --backend sim": ("tests/lab/test_lab_sim.py",
                                                        '"--backend", "sim"'),
    "fleet-rollout lab status": ("tests/lab/test_lab_sim.py", '"lab", "status"'),
    "fleet-rollout lab down": ("tests/lab/test_lab_sim.py", '"lab", "down"'),
}


def test_every_shell_command_in_the_readme_is_one_a_test_runs() -> None:
    commands = readme_commands()["shell"]
    assert "make demo" in commands and "make test" in commands
    for command in commands:
        prefixes = [p for p in EVIDENCE if command.startswith(p) or command == p.strip()]
        assert prefixes, f"README command {command!r}: no test runs it (add one, and its " \
            "evidence here)"
        path, shown = EVIDENCE[prefixes[0]]
        assert shown in (ROOT / path).read_text(), (command, path, shown)


def test_every_st2_run_in_the_readme_names_an_action_and_its_parameters() -> None:
    for command in readme_commands()["shell"]:
        words = command.split()
        if words[:2] != ["st2", "run"] and words[:2] != ["fleet-rollout", "run"]:
            continue
        words = [w for w in words[2:] if w != "-a"]
        pack, name = words[0].split(".")
        assert pack == "fleet_rollout"
        meta = yaml.safe_load((ROOT / "actions" / f"{name}.yaml").read_text())
        for pair in words[1:]:
            assert pair.split("=", 1)[0] in meta["parameters"], (command, pair)


CHAT_ACTIONS = {"plan": "plan", "start": "rollout", "status": "status", "approve": "respond",
                "reject": "respond", "extend": "respond", "pause": "pause",
                "resume": "resume", "abort": "abort", "rollback": "rollback"}


def test_every_chat_command_in_the_readme_matches_the_packs_alias() -> None:
    """What a chat bot does with each command the README shows: the pack's aliases, matched
    and parsed by the runtime's alias code (st2's format parser)."""
    commands = readme_commands()["chat"]
    assert len(commands) == len(CHAT_ACTIONS)
    registry = Registry([str(ROOT)])
    for command in commands:
        text = command.replace("<id>", "home-snoop-20261206-120000-ab12")
        match = aliases.get_matching_alias(text, registry.aliases)
        verb = command.split()[1]
        assert match["alias"].action_ref == f"fleet_rollout.{CHAT_ACTIONS[verb]}", command
        params = aliases.extract_parameters(match["representation"], text)
        assert params.get("rollout_id") or params.get("profile"), (command, params)


def test_the_readmes_config_blocks_are_valid_pack_config() -> None:
    """The README's minimal config (its first yaml block) is a valid pack config, and so is it
    with each later block (a section to add) added."""
    text = (ROOT / "README.md").read_text()
    first, *more = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    schema = yaml.safe_load((ROOT / "config.schema.yaml").read_text())
    for block in [first] + more:
        assert set(block) <= set(schema), set(block) - set(schema)
    loaded = load_pack_config(first, str(ROOT))
    assert loaded.operators and loaded.approvers
    assert more, "the README shows how to read counters from Prometheus"
    for block in more:
        assert load_pack_config(dict(first, **block), str(ROOT))
