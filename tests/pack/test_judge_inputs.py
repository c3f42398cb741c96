"""Judge input: the documented format, snapshot windows, and bad input with clear errors."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import locations
import pytest

from fleet_rollout.counters.metric import metric_from_dict
from fleet_rollout.errors import ConfigError
from fleet_rollout.judge import judge, judge_input_from_dict, load_judge_input
from fleet_rollout.judge.inputs import parse_time

FIXTURES = locations.FIXTURES / "judge"
EXAMPLE = json.loads((FIXTURES / "example.json").read_text())


def edited(**changes) -> dict:
    doc = copy.deepcopy(EXAMPLE)
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return doc


def test_example_loads() -> None:
    data = judge_input_from_dict(EXAMPLE)
    assert data.canary == ["web-001", "web-002", "web-003"] and len(data.control) == 6
    assert data.pre_window == (1714557600.0, 1714561200.0)
    assert data.hosts["web-001"].pre.drops == 50 and data.hosts["web-001"].post.coverage == 1.0
    assert data.rollout == "snoop-home-2024-05" and data.batch == 2


def test_listed_host_without_data_is_missing_not_an_error() -> None:
    doc = edited()
    del doc["hosts"]["web-003"]
    data = judge_input_from_dict(doc)
    assert data.hosts["web-003"].listed_only
    verdict = judge(data)
    assert verdict.verdict == "INCONCLUSIVE"
    assert "web-003" in verdict.explanation


@pytest.mark.parametrize(
    "doc, message",
    [
        (edited(canary=KeyError), "input: canary missing"),
        (edited(control=[]), "input: control is empty"),
        (edited(canary="web-001"), "canary must be a list of host names"),
        (edited(canary=["web-001", "web-001", "web-002"]), "canary lists web-001 more than once"),
        (edited(control=["web-101", "web-001"]), "web-001 listed as both canary and control"),
        (edited(hosts=KeyError), "hosts missing or not an object"),
        (edited(schema_version=2), "schema_version 2 is not supported"),
        (edited(rollouts="x"), r"unknown key\(s\) rollouts"),
    ],
)
def test_bad_structure(doc, message) -> None:
    with pytest.raises(ConfigError, match=message):
        judge_input_from_dict(doc)


def test_host_in_neither_group() -> None:
    doc = edited()
    doc["hosts"]["web-999"] = doc["hosts"]["web-101"]
    with pytest.raises(ConfigError, match="input.hosts: web-999 is in neither canary nor control"):
        judge_input_from_dict(doc)


@pytest.mark.parametrize(
    "window, message",
    [
        ({"drops": -3, "packets": 100}, r"hosts.web-001.pre.drops: -3 is negative"),
        ({"drops": 3, "packets": -1}, r"hosts.web-001.pre.packets: -1 is negative"),
        ({"drops": "3", "packets": 100}, r"drops: must be a number, got '3'"),
        ({"drops": True, "packets": 100}, r"drops: must be a number, got True"),
        ({"drops": float("nan"), "packets": 100}, r"drops: must be finite"),
        ({"packets": 100}, r"hosts.web-001.pre: drops missing"),
        ({"drops": 1, "packets": 100, "coverage": 1.5}, r"coverage: 1.5 is above 1"),
        ({"drops": 1, "packets": 100, "drop": 2}, r"unknown key\(s\) drop"),
        ([1, 100], "must be an object"),
        ({"start": {}}, "needs both start and end"),
    ],
)
def test_bad_windows(window, message) -> None:
    with pytest.raises(ConfigError, match=message):
        judge_input_from_dict(edited(**{"hosts__web-001__pre": window}))


def test_bad_host_entry() -> None:
    with pytest.raises(ConfigError, match=r"hosts.web-001: unknown key\(s\) pre_window"):
        judge_input_from_dict(edited(**{"hosts__web-001": {"pre_window": {}}}))
    with pytest.raises(ConfigError, match=r"hosts.web-001: must be an object"):
        judge_input_from_dict(edited(**{"hosts__web-001": [1]}))


@pytest.mark.parametrize(
    "windows, message",
    [
        ({"pre": {"start": 0, "end": 3600}, "post": {"start": 7200, "end": 9000}},
         "pre lasts 3600 s and post 1800 s"),
        ({"pre": {"start": 0, "end": 3600}, "post": {"start": 1800, "end": 5400}},
         "post starts before pre ends"),
        ({"pre": {"start": "2024-05-01T10:00:00", "end": 3600}, "post": {"start": 0, "end": 1}},
         "has no time zone"),
        ({"pre": {"start": "yesterday", "end": 3600}, "post": {"start": 0, "end": 1}},
         "is not an ISO 8601 time"),
        ({"pre": {"start": 10, "end": 5}, "post": {"start": 20, "end": 25}},
         "windows.pre: end is not after start"),
        ({"pre": {"start": 0, "end": 5}}, "must have exactly pre and post"),
    ],
)
def test_bad_time_windows(windows, message) -> None:
    with pytest.raises(ConfigError, match=message):
        judge_input_from_dict(edited(windows=windows))


def test_parse_time_forms() -> None:
    assert parse_time("2024-05-01T10:00:00Z", "t") == 1714557600.0
    assert parse_time("2024-05-01T12:00:00+02:00", "t") == 1714557600.0
    assert parse_time(1714557600, "t") == 1714557600.0


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "nan.json"
    bad.write_text('{"canary": ["a"], "control": ["b"], "hosts": {"a": {"pre": '
                   '{"drops": NaN, "packets": 1}}}}')
    with pytest.raises(ConfigError, match=r"nan.json: not valid JSON: NaN is not a valid number"):
        load_judge_input(str(bad))
    bad.write_text('{"canary": ["a"], "control": ["b"], "hosts": {"a": {"pre": '
                   '{"drops": Infinity, "packets": 1}}}}')
    with pytest.raises(ConfigError, match="Infinity is not a valid number"):
        load_judge_input(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="nan.json: not valid JSON"):
        load_judge_input(str(bad))
    with pytest.raises(ConfigError, match="missing.json: cannot read judge input"):
        load_judge_input(str(tmp_path / "missing.json"))
    bad.write_text(json.dumps(edited(**{"hosts__web-002__post__drops": -1})))
    with pytest.raises(ConfigError, match=r"nan.json.hosts.web-002.post.drops: -1 is negative"):
        load_judge_input(str(bad))


def _snapshot(time: float, boot: str, packets: int, dropped: int, rcvbuf: int) -> dict:
    return {
        "schema": "fleet_rollout.counters/1", "host": "x", "boot_id": boot, "time": time,
        "interfaces": {"eth0": {"statistics": {"rx_packets": packets, "rx_dropped": dropped},
                                "ethtool": None}},
        "softnet": [{"cpu": 0, "dropped": 0}], "snmp": {"Udp": {"RcvbufErrors": rcvbuf}},
    }


def test_snapshot_windows_are_reduced_with_the_metric() -> None:
    doc = {
        "windows": {"pre": {"start": 0, "end": 3600}, "post": {"start": 7200, "end": 10800}},
        "canary": ["c1"], "control": ["k1"],
        "hosts": {
            "c1": {"pre": {"start": _snapshot(0, "b1", 10**6, 5, 0),
                           "end": _snapshot(3600, "b1", 2 * 10**6, 25, 10)},
                   "post": {"start": _snapshot(7200, "b2", 100, 0, 0),
                            "end": _snapshot(9000, "b2", 5 * 10**5, 40, 3)}},
            "k1": {"pre": {"start": _snapshot(0, "b1", 0, 0, 0),
                           "end": _snapshot(3600, "b9", 10**6, 0, 0)}},
        },
    }
    data = judge_input_from_dict(doc)
    pre, post = data.hosts["c1"].pre, data.hosts["c1"].post
    assert (pre.drops, pre.packets, pre.coverage) == (30, 10**6, 1.0)
    assert (post.drops, post.packets, post.coverage) == (43, 5 * 10**5 - 100, 0.5)
    assert "reboot" in data.hosts["k1"].pre.problem
    only_udp = metric_from_dict({"drops": ["snmp:Udp.RcvbufErrors"]})
    assert judge_input_from_dict(doc, only_udp).hosts["c1"].pre.drops == 10
    broken = copy.deepcopy(doc)
    broken["hosts"]["c1"]["pre"]["end"]["schema"] = "v0"
    with pytest.raises(ConfigError, match=r"input.hosts.c1.pre.end: schema is 'v0'"):
        judge_input_from_dict(broken)


def test_snapshots_between_give_the_window_in_steps() -> None:
    """start, between..., end: the drops between consecutive snapshots are the window's steps
    (they add up to its drops). A reboot inside one step leaves the window unusable and no
    steps; snapshots out of order or a between that is not a list are refused by name."""
    pre = {"start": _snapshot(0, "b1", 0, 0, 0), "end": _snapshot(3600, "b1", 10**6, 30, 6),
           "between": [_snapshot(1200, "b1", 3 * 10**5, 4, 0),
                       _snapshot(2400, "b1", 6 * 10**5, 20, 2)]}
    post = {"start": _snapshot(7200, "b1", 10**6, 30, 6),
            "end": _snapshot(10800, "b1", 2 * 10**6, 60, 6)}
    doc = {"windows": {"pre": {"start": 0, "end": 3600}, "post": {"start": 7200, "end": 10800}},
           "canary": ["c1"], "control": ["k1"], "hosts": {"c1": {"pre": pre, "post": post}}}
    data = judge_input_from_dict(copy.deepcopy(doc))
    assert data.hosts["c1"].steps_pre == [4.0, 18.0, 14.0] and data.hosts["c1"].pre.drops == 36
    assert data.hosts["c1"].steps_post is None  # no snapshots between: sums only
    rebooted = copy.deepcopy(doc)
    rebooted["hosts"]["c1"]["pre"]["between"][1]["boot_id"] = "b2"
    rebooted["hosts"]["c1"]["pre"]["end"]["boot_id"] = "b2"
    data = judge_input_from_dict(rebooted)
    assert "reboot" in data.hosts["c1"].pre.problem and data.hosts["c1"].steps_pre is None
    swapped = copy.deepcopy(doc)
    between = swapped["hosts"]["c1"]["pre"]["between"]
    between.reverse()
    with pytest.raises(ConfigError, match=r"c1.pre.between\[1\]: end snapshot .time 1200"):
        judge_input_from_dict(swapped)
    for bad in ({}, [], "x"):
        broken = copy.deepcopy(doc)
        broken["hosts"]["c1"]["pre"]["between"] = bad
        with pytest.raises(ConfigError, match=r"input.hosts.c1.pre.between: must be a list"):
            judge_input_from_dict(broken)
    extra = copy.deepcopy(doc)
    extra["hosts"]["c1"]["pre"]["middle"] = []
    with pytest.raises(ConfigError, match="only start, end and between"):
        judge_input_from_dict(extra)


def test_a_clock_stepped_inside_a_window_gives_its_length_by_uptime_and_no_steps() -> None:
    """NTP stepped c1's clock 600 s forward during its pre window's second step: the window was
    3600 s by its uptime (coverage 1, not more); its host took its samples by the stepped clock,
    so the steps are unequal and not used (the sums are)."""
    pre = {"start": _snapshot(0, "b1", 0, 0, 0), "end": _snapshot(4200, "b1", 10**6, 30, 6),
           "between": [_snapshot(1200, "b1", 3 * 10**5, 4, 0),
                       _snapshot(3000, "b1", 6 * 10**5, 20, 2)]}
    for snap, uptime in zip((pre["start"], *pre["between"], pre["end"]), (10, 1210, 2410, 3610)):
        snap["uptime_seconds"] = float(uptime)
    post = {"start": _snapshot(7200, "b1", 10**6, 30, 6),
            "end": _snapshot(10800, "b1", 2 * 10**6, 60, 6)}
    doc = {"windows": {"pre": {"start": 0, "end": 3600}, "post": {"start": 7200, "end": 10800}},
           "canary": ["c1"], "control": ["k1"], "hosts": {"c1": {"pre": pre, "post": post}}}
    data = judge_input_from_dict(doc).hosts["c1"]
    assert data.pre.usable and data.pre.drops == 36
    assert data.pre.seconds == pytest.approx(3600.0) and data.pre.coverage == 1.0
    assert data.pre.clock_step == pytest.approx(600.0)
    assert data.steps_pre is None
    steady = copy.deepcopy(doc)
    steady["hosts"]["c1"]["pre"]["between"][1]["time"] = 2400
    steady["hosts"]["c1"]["pre"]["end"]["time"] = 3600
    again = judge_input_from_dict(steady).hosts["c1"]
    assert again.pre.clock_step is None and again.steps_pre == [4.0, 18.0, 14.0]


def test_a_pre_window_several_windows_long_is_declared_and_checked() -> None:
    """pre_windows (1-4, default 1): the pre window lasts that many post windows; with time
    windows given, their lengths must say the same; anything else names the field."""
    assert judge_input_from_dict(edited()).pre_windows == 1.0
    windows = {"pre": {"start": 0, "end": 10800}, "post": {"start": 12000, "end": 15600}}
    inp = judge_input_from_dict(edited(windows=windows, pre_windows=3))
    assert inp.pre_windows == 3.0
    with pytest.raises(ConfigError, match="pre lasts 10800 s and post 3600 s.*3 times|"
                                          "pre lasts 10800 s and post 3600 s"):
        judge_input_from_dict(edited(windows=windows))  # unequal, but pre_windows not given
    with pytest.raises(ConfigError, match="2 times as long"):
        judge_input_from_dict(edited(windows=windows, pre_windows=2))
    for bad in (0, 0.5, 5, "3", True, None, float("nan")):
        with pytest.raises(ConfigError, match=r"input\.pre_windows: must be a number from 1 to 4"):
            judge_input_from_dict(edited(pre_windows=bad))


def test_a_longer_pre_window_changes_no_hosts_e_without_a_change() -> None:
    """A host whose drop rate did not change has e 0 whether its pre window is 1 or 3 windows
    long, a silent one too (the half drop that keeps the log finite grows with the window);
    its traffic is counted per post window's length."""
    from fleet_rollout.judge.guards import log_rate_change

    assert log_rate_change(300, 3e6, 100, 1e6, 3.0) == pytest.approx(0.0, abs=1e-12)
    assert log_rate_change(0, 3e6, 0, 1e6, 3.0) == pytest.approx(0.0, abs=1e-12)
    assert log_rate_change(0, 3e6, 0, 1e6) == pytest.approx(math.log(3.0))  # as if 1 window
    doc = edited(pre_windows=3, windows=KeyError)
    doc["hosts"]["web-001"]["pre"] = {"drops": 36, "packets": 10_200_000}
    doc["hosts"]["web-001"]["post"] = {"drops": 12, "packets": 3_400_000}
    verdict = judge(judge_input_from_dict(doc))
    host = next(h for h in verdict.hosts if h.host == "web-001")
    assert host.e == pytest.approx(0.0, abs=1e-12)
    assert host.traffic_ratio == pytest.approx(1.0)
    assert verdict.test is not None and verdict.test.pre_windows == 3.0
