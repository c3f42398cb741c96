"""Approvals answered in a race: many rollouts at once, answered at random moments,
in random order, some less than a second apart and some twice at the same moment; no workflow
may be left paused or running, and every answer is recorded exactly once.

The engine runs in this process's main thread; the answers come from other threads through the
runtime's request table, the path the CLI and the st2 API take (each a client, not the engine).
The workflow shapes are the rollout's (tests/fixtures/runtime_pack: race_rollout runs batches
one after another, each batch a sub-workflow whose approval is a nested sub-workflow beside a
parallel step; after the inquiry a task for succeeded() and one for failed(), as in the pack,
since st2 can leave a parent paused when an inquiry ends a sub-workflow: StackStorm/st2#4865,
reported by `pack validate`), loaded by the real Orquesta spec and conductor. Seeded: the
same seed gives the same choices (the thread timing varies).

What it found: (1) a second of two close answers was told "accepted", then dropped (33 answers
accepted for 22 inquiries); (2) the engine resumed the root workflow to deliver an answer, a
no-op while a parallel branch kept the root running, so the inquiry's own workflow stayed
paused (4 and 2 rollouts stuck in two runs on a loaded machine); st2 resumes the inquiry's own
workflow; (3) orquesta's one YAQL parser, shared by the engine and the client runtimes built in
these threads, corrupted parses made at the same time.
"""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from runtime_support import FIXTURE_PACK, engine, fixture_home

from fleet_runtime.engine import Runtime
from fleet_runtime.home import RuntimeHome
from fleet_runtime.runtime_errors import ExecutionStateError, InquiryError
from fleet_runtime.statuses import COMPLETED

ROLLOUTS = 8
BATCHES = 3
RESPONDERS = 4
DECISIONS = ("approve", "approve", "approve", "proceed", "extend", "extend", "reject")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_home(tmp_path / "home", monkeypatch)


@pytest.fixture()
def rt(home: Path) -> Iterator[Runtime]:
    runtime = engine(home, workers=8)
    yield runtime
    runtime.close()


class Responders:
    """Threads that answer pending inquiries through the request table, as clients."""

    def __init__(self, home: Path, seed: int) -> None:
        self.home = home
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.accepted: List[Tuple[str, str, float]] = []  # inquiry, decision, when
        self.refused: List[Tuple[str, str]] = []  # inquiry, why (already answered)
        self.retried = 0  # answers refused while the parent was pausing, sent again later
        self.twins = 0  # inquiries answered by two threads at the same moment
        self.errors: List[str] = []
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                        for i in range(RESPONDERS)]

    def __enter__(self) -> Responders:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _choice(self) -> Tuple[str, float, bool]:
        with self.lock:
            return (self.rng.choice(DECISIONS), self.rng.choice((0.0, 0.0, 0.05, 0.2, 0.6)),
                    self.rng.random() < 0.2)

    def _answer(self, client: Runtime, inquiry: str, decision: str) -> None:
        try:
            client.submit("respond", {"id": inquiry, "response": {"decision": decision},
                                      "requester": "sre"})
        except InquiryError as err:
            with self.lock:
                self.refused.append((inquiry, str(err)))
            return
        except ExecutionStateError:
            with self.lock:
                self.retried += 1  # st2 answers 500 while the parent is pausing: ask again
            return
        except Exception as err:  # anything else fails the test
            with self.lock:
                self.errors.append(f"{inquiry}: {type(err).__name__}: {err}")
            return
        with self.lock:
            self.accepted.append((inquiry, decision, time.monotonic()))

    def _loop(self, index: int) -> None:
        client = Runtime(RuntimeHome(str(self.home)), [str(FIXTURE_PACK)], workers=1)
        pick = random.Random(index)
        try:
            while not self.stop.is_set():
                pending = client.store.find_executions("runner=? AND status=?",
                                                       ("inquirer", "pending"))
                if not pending:
                    time.sleep(0.02)
                    continue
                inquiry = pick.choice(pending)["id"]
                decision, pause, twin = self._choice()
                time.sleep(pause)
                if twin:  # the same inquiry from two threads at once: one answer counts
                    other = Runtime(RuntimeHome(str(self.home)), [str(FIXTURE_PACK)],
                                    workers=1)
                    second = threading.Thread(target=self._answer,
                                              args=(other, inquiry, "approve"))
                    second.start()
                    self._answer(client, inquiry, decision)
                    second.join(60)
                    other.close()
                    with self.lock:
                        self.twins += 1
                else:
                    self._answer(client, inquiry, decision)
        finally:
            client.close()


def _descendants(rt: Runtime, root: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    todo = [root]
    while todo:
        for child in rt.store.find_executions("parent_id=?", (todo.pop(),)):
            out.append(child)
            todo.append(child["id"])
    return out


def _decision(rt: Runtime, inquiry: Dict[str, Any]) -> Optional[str]:
    response = (inquiry.get("result") or {}).get("response") or {}
    return response.get("decision")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [20261126])
def test_concurrent_answers_leave_nothing_stuck_and_count_once(rt: Runtime, home: Path,
                                                               seed: int) -> None:
    roots = [rt.request("rt_test.race_rollout", {"batches": BATCHES}) for _ in range(ROLLOUTS)]

    def all_done() -> bool:
        return all(rt.store.get_execution(r)["status"] in COMPLETED for r in roots)

    with Responders(home, seed=seed) as answers:
        rt.run(until=all_done, forever=True, timeout=400)
    assert not answers.errors, answers.errors
    records = [rt.store.get_execution(r) for r in roots]
    stuck = [r for r in records if r["status"] not in COMPLETED]
    inquiries = [x for r in roots for x in _descendants(rt, r) if x["runner"] == "inquirer"]
    left = [x for r in roots for x in _descendants(rt, r) if x["status"] not in COMPLETED]
    gaps = sorted(b[2] - a[2] for a, b in zip(answers.accepted, answers.accepted[1:]))
    print(f"\n{ROLLOUTS} rollouts x {BATCHES} batches: {len(inquiries)} inquiries, "
          f"{len(answers.accepted)} answers recorded, {len(answers.refused)} refused as "
          f"already answered ({answers.twins} answered twice at once), {answers.retried} "
          f"retried while pausing; stuck workflows {len(stuck)}, executions left "
          f"{len(left)}; closest answers {gaps[0] if gaps else float('nan'):.3f} s apart")
    assert stuck == [] and left == [], [(x["action"], x["task_id"], x["status"], x["id"])
                                        for x in stuck + left]
    # every answer recorded exactly once: one accepted answer per inquiry, the one it holds
    accepted = {}
    for inquiry, decision, _ in answers.accepted:
        assert inquiry not in accepted, f"{inquiry} accepted twice"
        accepted[inquiry] = decision
    assert set(accepted) == {x["id"] for x in inquiries}
    for x in inquiries:
        assert x["status"] == "succeeded" and _decision(rt, x) == accepted[x["id"]]
    assert all("already been responded" in why for _, why in answers.refused)
    assert answers.twins >= 1 and len(answers.refused) >= answers.twins
    assert gaps and gaps[0] < 1.0  # answers less than a second apart happened
    # what the answers mean: a reject fails its rollout and no later batch starts
    for root, record in zip(roots, records):
        batches = sorted((x for x in rt.store.find_executions("parent_id=?", (root,))
                          if x["task_id"] == "batch"),
                         key=lambda x: x["created_ts"])
        decided = []
        for batch in batches:
            asked = [x for x in _descendants(rt, batch["id"]) if x["runner"] == "inquirer"]
            decided.append([_decision(rt, x) for x in sorted(
                asked, key=lambda x: x["created_ts"])])
        rejected = [i for i, d in enumerate(decided) if "reject" in d]
        if rejected:
            assert record["status"] == "failed" and len(batches) == rejected[0] + 1
        else:
            assert record["status"] == "succeeded" and len(batches) == BATCHES
        for answers_of_batch in decided:  # extend asks again, at most twice
            assert 1 <= len(answers_of_batch) <= 3
            assert all(d == "extend" for d in answers_of_batch[:-1])
