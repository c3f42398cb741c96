"""A batch's counter collections are stored in parts of at most gate.COUNTER_PART hosts, the head
last: no datastore value grows with the batch or the fleet (1,100 hosts made one 1.7 MB value),
and what the judge reads back is what was collected."""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import pytest
import yaml

from fleet_rollout import gate
from fleet_rollout.counters.deltas import SCHEMA
from fleet_rollout.judge import judge_input_from_dict
from fleet_rollout.paths import PACK_DIR
from fleet_rollout.store import MemoryStore, key


def _ctx(store: MemoryStore) -> SimpleNamespace:
    return SimpleNamespace(store=store, rollout_id="parts-1")


def _snapshot(i: int) -> dict:
    return {"boot_id": f"b-{i}", "udp": {"RcvbufErrors": i * 3, "InDatagrams": i * 1000},
            "nics": {"eth0": {"rx_dropped": i}}}


def test_a_collection_of_many_hosts_is_stored_in_bounded_parts_and_reads_back():
    store = MemoryStore()
    ctx = _ctx(store)
    snapshots = {f"web-{i:04d}": _snapshot(i) for i in range(150)}
    errors = {f"web-{i:04d}": "unreachable: timed out" for i in range(150, 160)}
    gate.save_collection(ctx, 2, "pre_end", 1234.5, snapshots, errors)
    head = key("parts-1", "batch", "2", "counters", "pre_end")
    values = store.list(head)
    assert json.loads(values[head]) == {"time": 1234.5, "started": 1234.5, "parts": 3}
    parts = [json.loads(v) for k, v in values.items() if k != head]
    assert len(parts) == 3
    assert all(len(p["snapshots"]) + len(p["errors"]) <= gate.COUNTER_PART for p in parts)
    back = gate.load_collection(ctx, 2, "pre_end")
    assert back == {"time": 1234.5, "snapshots": snapshots, "errors": errors}


def test_a_smaller_collection_again_reads_only_its_own_parts():
    """A collection made again (a retried task) with fewer hosts: the head bounds the parts, so
    the first collection's extra parts are never read."""
    store = MemoryStore()
    ctx = _ctx(store)
    gate.save_collection(ctx, 0, "post_end", 1.0, {f"h{i:03d}": _snapshot(i)
                                                   for i in range(200)}, {})
    gate.save_collection(ctx, 0, "post_end", 2.0, {"h000": _snapshot(7)}, {})
    assert gate.load_collection(ctx, 0, "post_end") == {
        "time": 2.0, "snapshots": {"h000": _snapshot(7)}, "errors": {}}


def test_a_collection_stored_as_one_document_still_reads():
    store = MemoryStore()
    ctx = _ctx(store)
    old = {"time": 5.0, "snapshots": {"a": _snapshot(1)}, "errors": {"b": "failed"}}
    store.set_json(key("parts-1", "batch", "1", "counters", "pre_start"), old)
    assert gate.load_collection(ctx, 1, "pre_start") == old
    assert gate.load_collection(ctx, 1, "post_start") == {}


def test_the_judge_input_names_each_hosts_site_and_hardware_model():
    """The judge compares hosts within their site and model: the input gate builds
    carries them from the plan, for canaries and controls alike."""
    store = MemoryStore()
    plan = {"batches": [{"index": 0, "hosts": ["web-1", "web-2"]}], "control": ["ctl-1"],
            "hosts": {"web-1": {"site": "fra", "hardware_model": "r640"},
                      "web-2": {"site": "ams", "hardware_model": "r640"},
                      "ctl-1": {"site": "fra", "hardware_model": "r650"}}}
    states = {"web-1": {"status": "done"}, "web-2": {"status": "done"}}
    ctx = SimpleNamespace(store=store, rollout_id="parts-1", plan=plan,
                          profile={"canary": {"window_steps": 1}},
                          state=SimpleNamespace(host=lambda h: states.get(h, {})))
    for n, label in enumerate(gate.LABELS):
        gate.save_collection(ctx, 0, label, float(n), {h: _snapshot(n) for h in plan["hosts"]},
                             {})
    doc = gate.judge_input(ctx, 0)
    assert doc["canary"] == ["web-1", "web-2"] and doc["control"] == ["ctl-1"]
    assert doc["batch"] == 1  # the label chat shows for index 0 ("batch 1 of 1")
    assert {h: (v["site"], v["model"]) for h, v in doc["hosts"].items()} == {
        "web-1": ("fra", "r640"), "web-2": ("ams", "r640"), "ctl-1": ("fra", "r650")}


def _collector(host: str, at: float, drops: int, packets: int, boot: str = "b1") -> dict:
    """A collector snapshot (counters/collector.py's schema) with cumulative counters."""
    return {"schema": SCHEMA, "host": host, "boot_id": boot, "time": at,
            "interfaces": {"eth0": {"statistics": {"rx_packets": packets, "rx_dropped": drops},
                                    "ethtool": None}},
            "softnet": [{"cpu": 0, "processed": packets, "dropped": 0}],
            "snmp": {"Udp": {"RcvbufErrors": 0}}, "snmp6": None, "errors": []}


def test_a_window_collected_in_steps_gives_the_judge_each_hosts_drops_per_step():
    """window_steps 3: pre_start, pre_step_1, pre_step_2, pre_end (and the same for post). The
    judge input carries the snapshots inside each window (between), the judge reads them as
    the host's drops per step; a host one of whose step collections failed has no steps for
    that window (never unequal ones), its window sums stay."""
    store = MemoryStore()
    plan = {"batches": [{"index": 0, "hosts": ["web-1"]}], "control": ["ctl-1"],
            "hosts": {"web-1": {}, "ctl-1": {}}}
    ctx = SimpleNamespace(store=store, rollout_id="steps-1", plan=plan,
                          profile={"canary": {"window_steps": 3}},
                          state=SimpleNamespace(host=lambda h: {"status": "done"}))
    drops = {"web-1": [0, 5, 7, 20], "ctl-1": [0, 1, 2, 3]}
    order = {"pre": ["pre_start", "pre_step_1", "pre_step_2", "pre_end"],
             "post": ["post_start", "post_step_1", "post_step_2", "post_end"]}
    for offset, window in ((0.0, "pre"), (100.0, "post")):
        for n, label in enumerate(order[window]):
            at = offset + 10.0 * n
            snaps = {h: _collector(h, at, d[n] * (2 if window == "post" else 1), 1000 * n + 1000)
                     for h, d in drops.items()}
            if label == "post_step_1":
                del snaps["ctl-1"]  # its collection failed at this step
            gate.save_collection(ctx, 0, label, at, snaps, {})
    doc = gate.judge_input(ctx, 0)
    assert len(doc["hosts"]["web-1"]["pre"]["between"]) == 2
    assert "between" not in doc["hosts"]["ctl-1"]["post"]
    inp = judge_input_from_dict(doc)
    assert inp.hosts["web-1"].steps_pre == [5.0, 2.0, 13.0]
    assert inp.hosts["web-1"].steps_post == [10.0, 4.0, 26.0]
    assert inp.hosts["ctl-1"].steps_pre == [1.0, 1.0, 1.0]
    assert inp.hosts["ctl-1"].steps_post is None and inp.hosts["ctl-1"].post.drops == 6.0


GOOD_LABELS = ("pre_start", "post_end", "pre_step_1", "pre_step_12", "pre_step_47",
               "post_step_11")
BAD_LABELS = ("pre_step_0", "pre_step_48", "post_step_12", "pre_step_01", "mid_step_1",
              "pre_step_1; rm", "post", "pre_step_1\n")


def test_step_labels_are_checked():
    """pre: up to MAX_PRE_WINDOWS x MAX_WINDOW_STEPS steps (47 inside), post: 12 (11 inside)."""
    for label in GOOD_LABELS:
        gate.check_label(label)
    for label in BAD_LABELS:
        with pytest.raises(ValueError, match="pre_step_<k>"):
            gate.check_label(label)
    assert gate.step_labels("post", 3) == ["post_step_1", "post_step_2"]
    assert gate.step_labels("pre", 1) == []


def test_the_collect_counters_action_accepts_the_labels_the_gate_accepts():
    """st2 checks the action's parameter pattern before the gate sees a label: both must agree,
    or a pre window of canary.pre_windows 4 would stop at its 12th step on st2."""
    meta = yaml.safe_load(open(os.path.join(PACK_DIR, "actions", "collect_counters.yaml"),
                               encoding="utf-8"))
    pattern = re.compile(meta["parameters"]["label"]["pattern"])
    labels = [f"{w}_step_{k}" for w in ("pre", "post") for k in range(0, 60)]
    for label in labels + list(GOOD_LABELS) + list(BAD_LABELS):
        try:
            gate.check_label(label)
            accepted = True
        except ValueError:
            accepted = False
        assert bool(pattern.search(label)) == accepted, label


def test_a_pre_window_of_several_windows_is_collected_in_as_many_more_steps():
    """canary.pre_windows 2, window_steps 2: the pre window has 4 steps (pre_step_1..3), the
    post window 2; the judge input says pre_windows 2 and the judge reads 4 pre steps."""
    store = MemoryStore()
    plan = {"batches": [{"index": 0, "hosts": ["web-1"]}], "control": ["ctl-1"],
            "hosts": {"web-1": {}, "ctl-1": {}}}
    ctx = SimpleNamespace(store=store, rollout_id="steps-2", plan=plan,
                          profile={"canary": {"window_steps": 2, "pre_windows": 2}},
                          state=SimpleNamespace(host=lambda h: {"status": "done"}))
    order = {"pre": ["pre_start", "pre_step_1", "pre_step_2", "pre_step_3", "pre_end"],
             "post": ["post_start", "post_step_1", "post_end"]}
    for offset, window in ((0.0, "pre"), (100.0, "post")):
        for n, label in enumerate(order[window]):
            at = offset + 10.0 * n
            gate.save_collection(ctx, 0, label, at,
                                 {h: _collector(h, at, 3 * n, 1000 * n + 1000)
                                  for h in plan["hosts"]}, {})
    doc = gate.judge_input(ctx, 0)
    assert doc["pre_windows"] == 2
    inp = judge_input_from_dict(doc)
    assert inp.pre_windows == 2.0
    assert inp.hosts["web-1"].steps_pre == [3.0, 3.0, 3.0, 3.0]
    assert inp.hosts["web-1"].steps_post == [3.0, 3.0]
    # a plan stored before pre_windows existed: one window before, as then
    ctx.profile = {"canary": {"window_steps": 2}}
    assert gate.judge_input(ctx, 0)["pre_windows"] == 1


def test_a_hosts_window_state_is_checked_before_its_samples_are_used():
    """What a host prints for its window's samples is a host's answer: a state that is not a
    window's, one started again since, or one with other steps is that host's error, never an
    exception of the collection."""
    from fleet_rollout.gate import window_problem

    first = {"time": 1000.25}
    good = {"t0": 1000.25, "every": 5.0, "samples": 2, "snapshots": [{}, {}], "done": True}
    assert window_problem(good, first, 5.0, 2) is None
    for doc, said in (([], "not a window's state"), ({"t0": 1}, "not a window's state"),
                      (dict(good, t0=1040.0), "started again"),
                      (dict(good, t0="1000.25"), "started again"),
                      (dict(good, samples=3), "3 samples"),
                      (dict(good, every="5"), "not 2 5 s apart"),
                      (dict(good, every=None), "not 2 5 s apart"),
                      (dict(good, every=2.5), "2.5 s apart")):
        assert said in window_problem(doc, first, 5.0, 2), doc
