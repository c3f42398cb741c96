"""st2_races: an answer's resume and its completion reach the asking workflow in either order,
as on StackStorm (st2common services/inquiry.py respond). When the completion comes first the
workflow stays paused with its question answered, until someone resumes it. And an inquiry is
answerable a moment before its workflow pauses on it: an answer in that moment resumes nothing
and records no requester.

The fixture's ask_flow (a core.ask, then tasks on its answer) on the real Orquesta conductor;
answers through the engine's respond, the path of `inquiry respond` and the st2 API.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from runtime_support import children, engine, fixture_home, wait

from fleet_runtime.statuses import PAUSED, PENDING, RUNNING, SUCCEEDED

FLOWS = 24


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = fixture_home(tmp_path / "home", monkeypatch)
    monkeypatch.setenv("FLEET_ROLLOUT_ST2_RACES", "1")
    return path


def _ask(rt, ex_id):
    [ask] = [c for c in children(rt, ex_id) if c["runner"] == "inquirer"]
    return ask


def test_an_answer_leaves_its_workflow_paused_when_its_completion_wins(home: Path) -> None:
    rt = engine(home)
    try:
        flows = [rt.request("rt_test.ask_flow", {}) for _ in range(FLOWS)]
        for ex_id in flows:
            assert wait(rt, ex_id)["status"] == PAUSED
        for ex_id in flows:
            rt.respond(_ask(rt, ex_id)["id"], {"approved": True}, requester="operator")
        for ex_id in flows:
            wait(rt, ex_id)
        records = {ex_id: rt.store.get_execution(ex_id) for ex_id in flows}
        stranded = [ex_id for ex_id, r in records.items() if r["status"] == PAUSED]
        finished = [ex_id for ex_id, r in records.items() if r["status"] == SUCCEEDED]
        # both orders happen: some answers resumed their workflow, some were left paused
        assert stranded and finished, (len(stranded), len(finished))
        assert len(stranded) + len(finished) == FLOWS
        for ex_id in stranded:
            # answered, recorded as answered by the requester, nothing running: stranded
            ask = _ask(rt, ex_id)
            assert ask["status"] == SUCCEEDED and ask["result"]["response"]["approved"] is True
            assert records[ex_id]["context"]["resumed_by"] == "operator"
            assert [c["status"] for c in children(rt, ex_id)] == [SUCCEEDED]
        for ex_id in stranded:  # what `st2 execution resume` does frees it
            rt.resume(ex_id, requester="sre")
        for ex_id in stranded:
            final = wait(rt, ex_id, until_completed=True)
            assert final["status"] == SUCCEEDED
            assert [c["action"] for c in children(rt, ex_id)] == ["core.ask", "core.noop"]
    finally:
        rt.close()


def test_without_the_setting_every_answer_resumes_its_workflow(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ROLLOUT_ST2_RACES", "0")
    rt = engine(home)
    try:
        flows = [rt.request("rt_test.ask_flow", {}) for _ in range(8)]
        for ex_id in flows:
            wait(rt, ex_id)
            rt.respond(_ask(rt, ex_id)["id"], {"approved": True}, requester="operator")
        for ex_id in flows:
            assert wait(rt, ex_id, until_completed=True, timeout=30)["status"] == SUCCEEDED
    finally:
        rt.close()


def test_an_answer_before_its_workflow_pauses_records_nobody_and_strands_it(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ROLLOUT_ST2_RACES", "completion-first")
    rt = engine(home)
    try:
        flows = [rt.request("rt_test.ask_flow", {}) for _ in range(4)]

        def asked() -> bool:
            return all(any(c["runner"] == "inquirer" and c["status"] == PENDING
                           for c in children(rt, ex_id)) for ex_id in flows)

        rt.run(until=asked, timeout=60, eager=True)
        for ex_id in flows:
            # the inquiry is pending (listed, answerable); its workflow has not paused yet
            assert rt.store.get_execution(ex_id)["status"] == RUNNING
            rt.respond(_ask(rt, ex_id)["id"], {"approved": True}, requester="operator")
        for ex_id in flows:
            record = wait(rt, ex_id)
            ask = _ask(rt, ex_id)
            assert ask["status"] == SUCCEEDED and ask["result"]["response"]["approved"] is True
            # nothing resumed, nobody recorded; the workflow paused on its answered question
            assert "resumed_by" not in record["context"]
            assert record["status"] == PAUSED
            assert [c["status"] for c in children(rt, ex_id)] == [SUCCEEDED]
    finally:
        rt.close()


def test_the_pause_window_is_a_setting_and_a_bad_one_is_named(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet_runtime.home import RuntimeHome
    from fleet_runtime.runtime_errors import MetadataError

    monkeypatch.setenv("FLEET_ROLLOUT_ST2_PAUSE_WINDOW", "0.25")
    assert RuntimeHome(str(home)).st2_pause_window == 0.25
    monkeypatch.delenv("FLEET_ROLLOUT_ST2_PAUSE_WINDOW")
    assert RuntimeHome(str(home)).st2_pause_window == 3.0
    for bad in ("soon", "-1", "7200"):
        monkeypatch.setenv("FLEET_ROLLOUT_ST2_PAUSE_WINDOW", bad)
        with pytest.raises(MetadataError) as info:
            print(RuntimeHome(str(home)).st2_pause_window)
        assert "st2_pause_window" in str(info.value) and bad in str(info.value)


def test_a_zero_pause_window_pauses_before_any_answer_can_come(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ROLLOUT_ST2_RACES", "completion-first")
    monkeypatch.setenv("FLEET_ROLLOUT_ST2_PAUSE_WINDOW", "0")
    rt = engine(home)
    try:
        ex_id = rt.request("rt_test.ask_flow", {})
        assert wait(rt, ex_id)["status"] == PAUSED
        rt.respond(_ask(rt, ex_id)["id"], {"approved": True}, requester="operator")
        record = wait(rt, ex_id)
        assert record["context"]["resumed_by"] == "operator"
    finally:
        rt.close()
