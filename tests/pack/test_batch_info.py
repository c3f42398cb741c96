"""batch_info, the batch's facts a rollout_batch workflow reads: the counter window and the soak
become orquesta task delays, which st2 (and the runtime) refuse unless they are integers, so a
profile's `window_seconds: 10.5` must arrive as whole seconds (rounded up), never as a float that
fails the batch at its first counter window."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from test_plan_storage import fleet

from fleet_rollout import service
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.store import MemoryStore, RolloutState


def stored_plan(rollout_id: str, hosts: int, **canary: float) -> Tuple[Dict[str, Any],
                                                                      MemoryStore]:
    """A home-snoop plan of `hosts` hosts (none compliant) saved in a fresh store."""
    profile = load_profile("home-snoop")
    profile.data["canary"].update(canary)
    fleet_hosts = fleet(hosts)
    plan = build_plan(profile, "inventories/x.yaml", "all", fleet_hosts, fleet_hosts,
                      {h.name: {"compliant": False} for h in fleet_hosts},
                      rollout_id=rollout_id, started_by="alice")
    store = MemoryStore()
    RolloutState(store, rollout_id).save_plan(plan)
    return plan, store


def gate_on_a_clock(tmp_path: Path, monkeypatch: Any, rollout_id: str, **canary: float
                    ) -> Tuple[Dict[str, Any], MemoryStore, Dict[str, Any], Any, List[float]]:
    """A stored plan, the pack config, the rollout's context and the test's clock: gate.py's
    time.time reads it and its time.sleep moves it on."""
    from fleet_rollout import gate

    plan, store = stored_plan(rollout_id, 20, **canary)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    clock = [1000.0]
    monkeypatch.setattr(gate.time, "time", lambda: clock[0])
    monkeypatch.setattr(gate.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] +
                                                                             seconds))
    return plan, store, config, service.context(config, store, rollout_id), clock


def test_window_and_soak_are_whole_seconds_for_the_workflow_delay(tmp_path: Path):
    plan, store = stored_plan("delay-1", 20, window_seconds=10.5, soak_seconds=4.0)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    info = service.batch_info(config, store, "delay-1", 0)
    assert info["window"] == 11 and type(info["window"]) is int
    assert info["soak"] == 4 and type(info["soak"]) is int
    # the window in the profile's steps (home-snoop: the default 4): each step's delay too
    assert info["steps"] == 4 and info["step"] == 3 and type(info["step"]) is int
    # the pre window: canary.pre_windows (default 3) windows, in steps of the same length
    assert info["pre_steps"] == 12 and type(info["pre_steps"]) is int
    plan, store = stored_plan("delay-2", 20, window_seconds=60, window_steps=1)
    info = service.batch_info(config, store, "delay-2", 0)
    assert (info["window"], info["steps"], info["step"], info["pre_steps"]) == (60, 1, 60, 3)
    # a plan stored before canary.pre_windows existed keeps a pre window of one window
    plan, store = stored_plan("delay-3", 20, window_seconds=60, window_steps=2)
    meta = RolloutState(store, "delay-3")
    stored = meta.plan()
    del stored["profile"]["canary"]["pre_windows"]
    meta.save_plan(stored)
    info = service.batch_info(config, store, "delay-3", 0)
    assert (info["steps"], info["pre_steps"]) == (2, 2)
    assert info["hosts"] == [plan["batches"][0]["hosts"][0]] and info["count"] == 1


def test_ansible_forks_come_from_the_pack_config(tmp_path: Path):
    """`ansible_forks` (1-500, default 20) is what every host step's HostSide runs with;
    anything else is refused naming the key."""
    import pytest

    from fleet_rollout.config import load_pack_config
    from fleet_rollout.errors import ConfigError

    base = {"credentials": {"lab": {"username": "u", "password": "p"}},
            "state_dir": str(tmp_path / "state")}
    assert load_pack_config(base).ansible_forks == 20
    assert load_pack_config(dict(base, ansible_forks=200)).ansible_forks == 200
    for bad in (0, 501, 2.5, "50", True):
        with pytest.raises(ConfigError, match="ansible_forks"):
            load_pack_config(dict(base, ansible_forks=bad))
    _plan, store = stored_plan("forks-1", 4)
    assert service.context(dict(base, ansible_forks=64), store, "forks-1").hostside.forks == 64


def test_a_window_is_sampled_on_the_hosts_and_read_at_its_end(tmp_path: Path,
                                                               monkeypatch: Any):
    """A window costs two runs on its hosts whatever its steps: its start snapshots every host
    and leaves a sampler there (start_window: the window's id, its step, its samples); the
    collections of the steps inside only keep the workflow's pace (each waits for its step's
    due time, touches no host and says the whole seconds to the next); its end (pre_end)
    waits for the window's end on the batch's hosts, and its read (pre_read, after the
    change) reads every started host's samples (read_window, waiting the start's own time and
    the slack) and stores one collection per step, a host's missed sample as that host's
    error. (The post window's read starts 2 s, at most half a step, before its end.)
    The hosts are a stand-in (the controller's side is what is tested; test_hostside_sim and
    test_counters_collector run the samplers): time.time and time.sleep are the test's
    clock."""
    from fleet_rollout import gate
    from fleet_rollout.hostside.ansible_run import HostResult

    assert [gate.next_delay(1005.0, t) for t in (1000.0, 1001.2, 1004.1, 1005.0, 1009.0)] == \
        [5, 3, 0, 0, 0]
    assert type(gate.next_delay(1010 / 3, 1.2)) is int

    plan, store = stored_plan("pace-1", 20, window_seconds=10, window_steps=2)
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state")}
    ctx = service.context(config, store, "pace-1")
    clock = [1000.0]
    slept: List[float] = []
    calls: List[Tuple[Any, ...]] = []
    monkeypatch.setattr(gate.time, "time", lambda: clock[0])

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds
    monkeypatch.setattr(gate.time, "sleep", sleep)
    index = next(i for i, b in enumerate(plan["batches"]) if len(b["hosts"]) > 1)
    hosts = gate.batch_hosts(ctx, index) + service.controls_for_batch(ctx.plan, index)
    assert len(hosts) >= 4
    broken, partial, restarted = hosts[-1], hosts[-2], hosts[-3]
    firsts: Dict[str, float] = {}

    def start_window(names: Any, window: str, every: float, samples: int, anchor: float,
                     first_at: Any = None) -> Dict[str, HostResult]:
        calls.append(("start", list(names), window, every, samples, anchor))
        clock[0] += 1.5
        firsts.update({h: clock[0] for h in names})
        return {h: HostResult(h, ok=True, result={"host": h, "time": clock[0]})
                if h != broken else HostResult(h, ok=False, error="ssh: unreachable")
                for h in names}

    def read_window(names: Any, window: str, wait: float) -> Dict[str, HostResult]:
        calls.append(("read", list(names), window, wait))
        clock[0] += 0.8
        out = {}
        for h in names:
            t0 = firsts[h] if h != restarted else firsts[h] + 40.0
            doc = {"t0": t0, "every": 5.0, "samples": 6, "done": True, "errors": {},
                   "snapshots": [{"host": h, "time": t0 + 5.0 * k} for k in range(1, 7)]}
            if h == partial:  # its sampler stopped after the 4th sample
                doc.update(done=False, snapshots=doc["snapshots"][:4])
            out[h] = HostResult(h, ok=True, result=doc)
        return out
    monkeypatch.setattr(ctx.hostside, "start_window", start_window)
    monkeypatch.setattr(ctx.hostside, "read_window", read_window)
    monkeypatch.setattr(ctx.hostside, "counters", lambda *a, **k: pytest.fail("no collection "
                                                                               "per step"))

    def head(label: str) -> Dict[str, Any]:
        return store.get_json(f"fleet_rollout.pace-1.batch.{index}.counters.{label}")

    with pytest.raises(RuntimeError, match="pre_step_1 before pre_start"):
        gate.collect(ctx, index, "pre_step_1")
    assert service.batch_info(config, store, "pace-1", index)["pre_steps"] == 6
    out = gate.collect(ctx, index, "pre_start")
    assert calls == [("start", hosts, f"pace-1.b{index}.pre", 5.0, 6, 1000.0)]
    assert head("pre_start")["started"] == 1000.0 and out["next_delay"] == 3  # due 1005 at 1001.5
    assert out["collected"] == len(hosts) - 1 and set(out["errors"]) == {broken}
    # the steps inside: (the workflow's delay plus the engine's latency, what the step sleeps,
    # the delay it asks for); none touches a host
    delay = out["next_delay"]
    for number, latency, nap, asked in ((1, 0.3, 0.2, 5), (2, 0.4, 0.0, 4), (3, 2.6, 0.0, 3),
                                        (4, 0.1, 0.0, 4), (5, 1.3, 0.0, 4)):
        clock[0] += delay + latency
        slept.clear()
        out = gate.collect(ctx, index, f"pre_step_{number}")
        assert sum(slept) == pytest.approx(nap, abs=1e-9), number
        assert out["next_delay"] == asked and type(asked) is int, (number, out)
        assert out["on_hosts"] is True and head(f"pre_step_{number}") is None
        delay = out["next_delay"]
    assert len(calls) == 1
    clock[0] += delay
    slept.clear()
    out = gate.collect(ctx, index, "pre_end")
    # the pre window's end on the batch's hosts (the start + 6 steps): waited for, no host is
    # asked; the change starts then, the window is read after it
    assert sum(slept) == pytest.approx(0.6) and len(calls) == 1
    assert out["ended"] == pytest.approx(1030.0) and out["next_delay"] == 0
    assert head("pre_end") is None
    # a host reached more than half a step after the anchor samples from its own first
    # snapshot; a claim (a first snapshot due at the anchor) from the anchor
    assert gate.host_window_end({"time": 1002.4}, 1000.0, 5.0, 6) == 1030.0
    assert gate.host_window_end({"time": 1002.6}, 1000.0, 5.0, 6) == pytest.approx(1032.6)
    assert gate.host_window_end({"deferred": True, "anchor": 1000.0}, 1000.0, 5.0, 6) == 1030.0
    clock[0] = 1060.0  # the batch changed: the read in the post window's soak
    out = gate.collect(ctx, index, "pre_read")
    # its hosts wait (at most) the start's run and the slack for their samples (never a
    # step: a day-long step would hold the read a day on a host whose sampler died)
    assert calls[1] == ("read", hosts[:-1], f"pace-1.b{index}.pre", pytest.approx(1.5 + 1.0))
    assert out["next_delay"] == 0 and out["collected"] == len(hosts) - 3 and out["read"]
    assert gate.collect(ctx, index, "pre_read")["read"] is False and len(calls) == 2
    for number in range(1, 7):
        label = f"pre_step_{number}" if number < 6 else "pre_end"
        stored = gate.load_collection(ctx, index, label)
        assert head(label)["started"] == pytest.approx(1000.0 + 5 * number)
        fine = set(hosts) - {broken, restarted} - ({partial} if number > 4 else set())
        assert set(stored["snapshots"]) == fine, label
        assert stored["snapshots"][hosts[0]]["time"] == pytest.approx(1001.5 + 5 * number)
        assert "did not start here: ssh: unreachable" in stored["errors"][broken]
        assert "started again" in stored["errors"][restarted]
        assert (partial in stored["errors"]) == (number > 4)
    assert "stopped before it" in gate.load_collection(ctx, index, "pre_end")["errors"][partial]
    # a clock that jumps back never holds a step longer than a step (the post window's
    # anchor: the end of the soak)
    clock[0] = 2000.0
    gate.collect(ctx, index, "post_start")
    assert calls[-1][2:] == (f"pace-1.b{index}.post", 5.0, 2, 2030.0)
    clock[0] = 1990.0
    slept.clear()
    gate.collect(ctx, index, "post_step_1")
    assert slept == [5.0]


def test_the_post_window_starts_during_the_soak(tmp_path: Path, monkeypatch: Any):
    """The post window's start runs as the soak begins (the workflow has no delay before it):
    each host's first snapshot is due at the soak's end, taken there by its sampler
    (start_window's first_at, the window's anchor), so the start's own run is hidden in the
    soak. The start stores each host's claim (a host whose clock is past the anchor answers
    with its snapshot); the read replaces the claims by the first snapshots the samplers took,
    before it stores the steps. A claim whose first snapshot is missing, or whose window was
    started again, is that host's error in every collection of the window. Hosts are a
    stand-in, time is the test's clock (test_counters_collector and test_hostside_sim run the
    samplers)."""
    from fleet_rollout import gate
    from fleet_rollout.hostside.ansible_run import HostResult

    plan, store, config, ctx, clock = gate_on_a_clock(
        tmp_path, monkeypatch, "soak-1", window_seconds=10, window_steps=2, soak_seconds=20)
    calls: List[Tuple[Any, ...]] = []
    index = next(i for i, b in enumerate(plan["batches"]) if len(b["hosts"]) > 1)
    hosts = gate.batch_hosts(ctx, index) + service.controls_for_batch(ctx.plan, index)
    ahead, failed, again = hosts[-1], hosts[-2], hosts[-3]

    def claim(host: str) -> Dict[str, Any]:
        return {"deferred": True, "anchor": 1020.0, "token": f"t-{host}",
                "window": f"soak-1.b{index}.post", "schema": "fleet_rollout.counter-window/1"}

    def start_window(names: Any, window: str, every: float, samples: int, anchor: float,
                     first_at: Any = None) -> Dict[str, HostResult]:
        calls.append(("start", list(names), window, every, samples, anchor, first_at))
        clock[0] += 1.5
        return {h: HostResult(h, ok=True, result={"host": h, "time": 1020.2} if h == ahead
                              else claim(h)) for h in names}

    def state(host: str) -> Dict[str, Any]:
        t0 = 1020.2 if host == ahead else 1020.01
        doc = {"token": "t-other" if host == again else f"t-{host}", "t0": t0,
               "anchor": 1020.0, "every": 5.0, "samples": 2, "done": True, "errors": {},
               "snapshots": [{"host": host, "time": 1020.0 + 5 * k} for k in (1, 2)]}
        if host != ahead:
            doc.update(deferred=True, first={"host": host, "time": t0})
        if host == failed:
            doc.update(first=None, t0=None, snapshots=[], errors={"0": "OSError: no ethtool"})
        return doc

    def read_window(names: Any, window: str, wait: float) -> Dict[str, HostResult]:
        calls.append(("read", list(names), window, wait))
        clock[0] += 0.8
        return {h: HostResult(h, ok=True, result=state(h)) for h in names}
    monkeypatch.setattr(ctx.hostside, "start_window", start_window)
    monkeypatch.setattr(ctx.hostside, "read_window", read_window)

    out = gate.collect(ctx, index, "post_start")
    assert calls == [("start", hosts, f"soak-1.b{index}.post", 5.0, 2, 1020.0, 1020.0)]
    # the soak and the first step: due 1025, asked at 1001.5
    assert out["next_delay"] == 23 and out["collected"] == len(hosts)
    assert gate.collection_started(ctx, index, "post_start") == 1020.0
    started = gate.load_collection(ctx, index, "post_start")["snapshots"]
    assert gate.is_claim(started[hosts[0]]) and not gate.is_claim(started[ahead])
    # the start's claims are never judged as snapshots
    assert gate.judge_input(ctx, index)["hosts"] == {}
    clock[0] += out["next_delay"] + 0.2
    out = gate.collect(ctx, index, "post_step_1")
    assert clock[0] == pytest.approx(1025.0) and out["next_delay"] == 3  # the read at 1028
    clock[0] += 3
    out = gate.collect(ctx, index, "post_end")
    assert calls[1] == ("read", hosts, f"soak-1.b{index}.post", pytest.approx(2.0 + 1.0))
    first = gate.load_collection(ctx, index, "post_start")
    assert first["snapshots"][hosts[0]] == {"host": hosts[0], "time": 1020.01}
    assert first["snapshots"][ahead] == {"host": ahead, "time": 1020.2}
    assert set(first["snapshots"]) == set(hosts) - {failed, again}
    assert "first snapshot was not taken: OSError: no ethtool" in first["errors"][failed]
    assert "started again" in first["errors"][again]
    assert gate.collection_started(ctx, index, "post_start") == 1020.0
    for label, at in (("post_step_1", 1025.0), ("post_end", 1030.0)):
        stored = gate.load_collection(ctx, index, label)
        assert set(stored["snapshots"]) == set(hosts) - {failed, again}, label
        assert stored["snapshots"][hosts[0]]["time"] == at
        assert "first snapshot was not taken" in stored["errors"][failed]
        assert "started again" in stored["errors"][again]
    assert out["collected"] == len(hosts) - 2


def test_the_next_batchs_pre_window_starts_when_this_post_window_ends(tmp_path: Path,
                                                                     monkeypatch: Any):
    """pre_early (from batch i's workflow, while its post window runs) starts batch i+1's pre
    window with each host's first snapshot due when batch i's post window ends: the windows
    never overlap, and the start's run, batch i's read and its judge happen inside it. Batch
    i+1's pre_start takes it over while its read can still start on time, starting only the
    hosts the early run missed; later (an approval or a question held the batch) it starts its
    own. Hosts are a stand-in, time is the test's clock (test_hostside_sim runs the samplers;
    the e2e happy path runs it through the workflow)."""
    from fleet_rollout import gate
    from fleet_rollout.hostside.ansible_run import HostResult

    plan, store, config, ctx, clock = gate_on_a_clock(
        tmp_path, monkeypatch, "early-1", window_seconds=10, window_steps=2, soak_seconds=5)
    calls: List[Tuple[Any, ...]] = []
    unreachable = {"count": 0}

    def start_window(names: Any, window: str, every: float, samples: int, anchor: float,
                     first_at: Any = None) -> Dict[str, HostResult]:
        calls.append(("start", list(names), window, every, samples, anchor, first_at))
        clock[0] += 1.5
        out = {h: HostResult(h, ok=True, result={"deferred": True, "anchor": anchor,
                                                 "token": f"t-{h}"} if first_at else
                             {"host": h, "time": clock[0]}) for h in names}
        if unreachable["count"]:
            unreachable["count"] -= 1
            out[names[-1]] = HostResult(names[-1], ok=False, error="ssh: unreachable")
        return out
    monkeypatch.setattr(ctx.hostside, "start_window", start_window)
    monkeypatch.setattr(ctx.hostside, "read_window", lambda *a, **k: pytest.fail("no read"))
    index = 1
    hosts = gate.batch_hosts(ctx, index) + service.controls_for_batch(ctx.plan, index)
    with pytest.raises(ValueError, match="only a batch after another"):
        gate.collect(ctx, 0, "pre_early")
    with pytest.raises(RuntimeError, match="before batch 0's post_start"):
        gate.collect(ctx, index, "pre_early")
    gate.collect(ctx, 0, "post_start")  # at 1000: its window is 1005 (the soak's end) - 1015
    calls.clear()
    unreachable["count"] = 1  # the early run misses one host
    out = gate.collect(ctx, index, "pre_early")
    assert calls == [("start", hosts, f"early-1.b{index}.pre", 5.0, 6, 1015.0, 1015.0)]
    assert out["started"] is True and out["anchor"] == 1015.0
    assert set(out["errors"]) == {hosts[-1]} and out["collected"] == len(hosts) - 1
    head = store.get_json(gate.collection_key(ctx, index, "pre_start"))
    assert head["early"] is True and head["started"] == 1015.0
    # batch 0's read and judge end at 1021: the batch takes the window over, starting the
    # host the early run missed (it samples from its own first snapshot; the read waits)
    clock[0] = 1021.0
    calls.clear()
    out = gate.collect(ctx, index, "pre_start")
    assert calls == [("start", [hosts[-1]], f"early-1.b{index}.pre", 5.0, 6, 1015.0, None)]
    assert out["early"] is True and out["collected"] == len(hosts) and out["errors"] == {}
    assert out["next_delay"] == 0  # the first step was due at 1020
    assert gate.collection_started(ctx, index, "pre_start") == 1015.0
    taken = gate.load_collection(ctx, index, "pre_start")
    assert set(taken["snapshots"]) == set(hosts) and taken["time"] == 1022.5
    assert taken["early"] is True
    # a pre window that can no longer be read on time (1015 + 30 s - the 2 s lead) is
    # started again, whole, at its own time
    clock[0] = 1043.1
    calls.clear()
    out = gate.collect(ctx, index, "pre_start")
    assert calls == [("start", hosts, f"early-1.b{index}.pre", 5.0, 6, 1043.1, None)]
    assert "early" not in out and gate.collection_started(ctx, index, "pre_start") == 1043.1
    assert "early" not in store.get_json(gate.collection_key(ctx, index, "pre_start"))
    # too late to start before the post window before it ends: nothing is started
    calls.clear()
    out = gate.collect(ctx, index, "pre_early")
    assert out["started"] is False and calls == []
    # batch_info: the early start only where the next batch exists and needs no approval
    infos = [service.batch_info(config, store, "early-1", i) for i in range(len(plan["batches"]))]
    assert [i["early_pre"] for i in infos] == [False] * len(infos)  # home-snoop asks each
    meta = RolloutState(store, "early-1")
    stored = meta.plan()
    stored["profile"]["approval"]["required"] = False
    meta.save_plan(stored)
    infos = [service.batch_info(config, store, "early-1", i) for i in range(len(plan["batches"]))]
    assert [i["early_pre"] for i in infos] == [True] * (len(infos) - 1) + [False]


def test_the_announcement_says_what_the_batch_needs_from_people(tmp_path: Path):
    """A batch the profile approves by itself is not announced as waiting for an approval."""
    config = {"credentials": {"lab": {"username": "u", "password": "p"}},
              "state_dir": str(tmp_path / "state"), "approvers": ["alice"]}
    for required, said, unsaid in ((True, "Approve with `rollout approve", "Approved by"),
                                   (False, "Approved by the profile", "rollout approve")):
        rollout_id = f"ask-{int(required)}"
        plan, store = stored_plan(rollout_id, 4)
        plan["profile"]["approval"].update(required=required, auto_approve_canary=False)
        RolloutState(store, rollout_id).save_plan(plan)
        message = service.batch_info(config, store, rollout_id, 1)["message"]
        assert said in message and unsaid not in message, message
