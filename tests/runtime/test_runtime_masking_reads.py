"""Masking is for what is shown, never for what workflows read: an action's result reaches the
workflow that waits for it as the action returned it, while the execution record the API and
the CLI show has the secrets masked; and a user's own encrypted keys are private to them: they
mask nothing anyone else is shown."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from runtime_support import children, engine, fixture_home, run

from fleet_runtime.engine import Runtime
from fleet_runtime.masking import MASK

FILES = {
    "pack.yaml": "ref: mask_reads\nname: mask_reads\ndescription: masking and reads\n"
                 "version: 0.1.0\nauthor: fleet_rollout engineers\n",
    "actions/branch.yaml": "name: branch\nrunner_type: orquesta\n"
                           "entry_point: workflows/branch.yaml\nparameters:\n"
                           "  word:\n    type: string\n    required: true\n",
    "actions/workflows/branch.yaml": """\
version: 1.0
input:
  - word
vars:
  - decision: rollback
output:
  - decision: <% ctx(decision) %>
tasks:
  say:
    action: core.echo
    input:
      message: <% ctx(word) %>
    next:
      - when: <% succeeded() and result().stdout = "PASS" %>
        publish:
          - decision: next
""",
}


@pytest.fixture()
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    pack = tmp_path / "mask_reads"
    for rel, text in FILES.items():
        (pack / rel).parent.mkdir(parents=True, exist_ok=True)
        (pack / rel).write_text(text)
    runtime = engine(fixture_home(tmp_path / "home", monkeypatch), packs=[str(pack)])
    yield runtime
    runtime.close()


def _say(rt: Runtime) -> tuple:
    ex = run(rt, "mask_reads.branch", {"word": "PASS"})
    assert ex["status"] == "succeeded", ex["result"]
    echo = children(rt, ex["id"])[0]
    return ex["result"]["output"]["decision"], echo["result"]["stdout"]


def test_a_workflow_branches_on_the_value_a_system_secret_masks_in_the_view(rt: Runtime
                                                                              ) -> None:
    rt.datastore.set("verdict_word", "PASS", "system", None, secret=True)
    decision, shown = _say(rt)
    assert decision == "next"  # the workflow read "PASS"
    assert shown.strip() == MASK  # the record everyone is shown has it masked


def test_a_users_own_secret_masks_nothing_another_user_reads_or_is_shown(rt: Runtime) -> None:
    rt.datastore.set("mine", "PASS", "user", "mallory", secret=True)
    decision, shown = _say(rt)
    assert decision == "next"
    assert shown.strip() == "PASS"
