"""Counter deltas: wraps, resets, reboots, changing interface sets; and the metric definition."""
from __future__ import annotations

import copy

import pytest

from fleet_rollout.counters.deltas import (
    CounterReset,
    counter_delta,
    series_increase,
    window_from_snapshots,
)
from fleet_rollout.counters.metric import (
    DEFAULT_METRIC,
    CounterTerm,
    metric_from_dict,
    series_values,
)
from fleet_rollout.errors import ConfigError


def snapshot(time: float = 0.0, boot_id: str = "b1", **overrides) -> dict:
    doc = {
        "schema": "fleet_rollout.counters/1",
        "host": "h1",
        "boot_id": boot_id,
        "time": time,
        "interfaces": {
            "eth0": {"statistics": {"rx_packets": 1000, "rx_dropped": 1, "rx_missed_errors": 0,
                                    "rx_fifo_errors": 0},
                     "ethtool": {"rx_discards_phy": 3}},
            "lo": {"statistics": {"rx_packets": 5, "rx_dropped": 0}, "ethtool": None},
        },
        "softnet": [{"cpu": 0, "dropped": 0, "processed": 10},
                    {"cpu": 1, "dropped": 2, "processed": 10}],
        "snmp": {"Udp": {"RcvbufErrors": 4, "InErrors": 4}},
        "snmp6": None,
    }
    doc.update(overrides)
    return doc


def bumped(doc: dict, time: float, **changes) -> dict:
    out = copy.deepcopy(doc)
    out["time"] = time
    for path, value in changes.items():
        node = out
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[keys[-1]] = value
    return out


def test_counter_delta_rules() -> None:
    assert counter_delta(5, 9) == (4, False)
    assert counter_delta(2**32 - 2, 3, 32) == (5, True)
    with pytest.raises(CounterReset, match="from 9 to 5"):
        counter_delta(9, 5)
    with pytest.raises(CounterReset):  # a value above 32 bits cannot be a 32-bit wrap
        counter_delta(2**40, 3, 32)


def test_series_increase_wrap_and_reset() -> None:
    assert series_increase([2**32 - 10, 2**32 - 1, 5, 20], 32).increase == 9 + 6 + 15
    result = series_increase([100, 150, 7, 10])  # reset to 0 after 150: counts 7 then 3
    assert (result.increase, result.resets, result.wraps) == (50 + 7 + 3, 1, 0)


def test_window_default_metric_sums_terms_over_series() -> None:
    start = snapshot(0.0)
    end = bumped(start, 600.0, interfaces__eth0__statistics__rx_packets=51000,
                 interfaces__eth0__statistics__rx_dropped=4,
                 interfaces__eth0__ethtool__rx_discards_phy=10,
                 softnet__1__dropped=5, snmp__Udp__RcvbufErrors=6,
                 interfaces__lo__statistics__rx_dropped=99)
    counts = window_from_snapshots(start, end, DEFAULT_METRIC, expected_seconds=1200)
    assert counts.usable
    assert counts.drops == 3 + 7 + 3 + 2
    assert counts.packets == 50000
    assert counts.coverage == 0.5 and counts.seconds == 600
    assert counts.detail == {"netdev:rx_dropped": 3, "netdev:rx_missed_errors": 0,
                             "netdev:rx_fifo_errors": 0, "ethtool:rx_discards_phy": 7,
                             "softnet:dropped": 3, "snmp:Udp.RcvbufErrors": 2,
                             "netdev:rx_packets": 50000}


def test_window_reboot_reset_and_missing_series() -> None:
    start = snapshot(0.0)
    rebooted = bumped(start, 60.0, boot_id="b2")
    assert "reboot" in window_from_snapshots(start, rebooted, DEFAULT_METRIC).problem
    reset = bumped(start, 60.0, snmp__Udp__RcvbufErrors=0)
    problem = window_from_snapshots(start, reset, DEFAULT_METRIC).problem
    assert problem == "counter reset without reboot: snmp:Udp.RcvbufErrors went down from 4 to 0"
    lost = bumped(start, 60.0, interfaces__eth0__ethtool=None)  # ethtool failed at the end
    problem = window_from_snapshots(start, lost, DEFAULT_METRIC).problem
    assert "ethtool:rx_discards_phy eth0 missing in the end snapshot" == problem
    cpu_gone = bumped(start, 60.0, softnet=[{"cpu": 0, "dropped": 0, "processed": 10}])
    assert "softnet:dropped cpu1 missing" in window_from_snapshots(start, cpu_gone,
                                                                   DEFAULT_METRIC).problem


def test_window_ignores_interfaces_that_come_and_go() -> None:
    start = snapshot(0.0)
    end = bumped(start, 60.0, interfaces__eth0__statistics__rx_packets=2000)
    end["interfaces"]["eth9"] = {"statistics": {"rx_packets": 10**9, "rx_dropped": 10**6},
                                 "ethtool": None}
    counts = window_from_snapshots(start, end, DEFAULT_METRIC)
    assert counts.usable and counts.packets == 1000 and counts.drops == 0


def test_window_without_any_drop_counter() -> None:
    metric = metric_from_dict({"drops": ["ethtool:rx_out_of_buffer"]})
    counts = window_from_snapshots(snapshot(0.0), snapshot(60.0), metric)
    assert not counts.usable and "none of the drop counters" in counts.problem


@pytest.mark.parametrize(
    "start, end, message",
    [
        ("x", snapshot(1.0), "window.start: a counter snapshot must be a JSON object"),
        (snapshot(5.0), snapshot(5.0), "not later than the start"),
        (snapshot(0.0, schema="other/9"), snapshot(1.0), "schema is 'other/9'"),
        (snapshot(0.0, boot_id=""), snapshot(1.0), "boot_id missing"),
        (snapshot(0.0), snapshot(float("nan")), "time must be a number"),
        (snapshot(0.0), snapshot(1.0, host="h2"), "start is from host 'h1', end from 'h2'"),
        (snapshot(0.0, uptime_seconds="5"), snapshot(1.0), "uptime_seconds must be a non-neg"),
    ],
)
def test_window_bad_snapshots(start, end, message) -> None:
    with pytest.raises(ConfigError, match=message):
        window_from_snapshots(start, end, DEFAULT_METRIC)


def test_a_wall_clock_stepped_inside_the_window_is_measured_by_the_uptime() -> None:
    start = snapshot(1000.0, uptime_seconds=500.0)
    # NTP stepped the host's clock 40 s forward in a 30 s window: 70 s by the wall clock
    ahead = window_from_snapshots(start, bumped(start, 1070.0, uptime_seconds=530.0),
                                  DEFAULT_METRIC, expected_seconds=60.0)
    assert ahead.usable and ahead.seconds == pytest.approx(30.0)
    assert ahead.coverage == pytest.approx(0.5)  # not 1.0: the window was half as long
    assert ahead.clock_step == pytest.approx(40.0) and ahead.to_dict()["clock_step"] == 40.0
    # stepped back 45 s: the end's time is before the start's, the uptime still says 30 s
    behind = window_from_snapshots(start, bumped(start, 985.0, uptime_seconds=530.0),
                                   DEFAULT_METRIC, expected_seconds=30.0)
    assert behind.usable and behind.seconds == pytest.approx(30.0)
    assert behind.clock_step == pytest.approx(-45.0)


def test_a_steady_clock_keeps_the_wall_clock_length() -> None:
    start = snapshot(1000.0, uptime_seconds=500.0)
    # within the tolerance (1 s or 2%): no step, the wall clock's length (ms resolution)
    counts = window_from_snapshots(start, bumped(start, 1060.25, uptime_seconds=560.0),
                                   DEFAULT_METRIC, expected_seconds=60.0)
    assert counts.clock_step is None and counts.seconds == pytest.approx(60.25)
    assert "clock_step" not in counts.to_dict()
    # a reboot inside the window: the uptimes are of two boots and say nothing
    reboot = window_from_snapshots(start, bumped(start, 1060.0, boot_id="b2", uptime_seconds=9.0),
                                   DEFAULT_METRIC)
    assert reboot.clock_step is None and reboot.seconds == pytest.approx(60.0)
    assert "reboot" in reboot.problem
    # snapshots without an uptime (older collectors): the wall clock as before
    legacy = window_from_snapshots(start, bumped(start, 1070.0, uptime_seconds=None),
                                   DEFAULT_METRIC)
    assert legacy.clock_step is None and legacy.seconds == pytest.approx(70.0)
    # an uptime that stands still (the lab's sim hosts: a fixed /proc/uptime): the wall clock
    fixed = window_from_snapshots(start, bumped(start, 1070.0), DEFAULT_METRIC)
    assert fixed.clock_step is None and fixed.seconds == pytest.approx(70.0)


# --- metric definition ------------------------------------------------------------------------

def test_default_metric_and_interface_selection() -> None:
    assert [str(t) for t in DEFAULT_METRIC.packets] == ["netdev:rx_packets"]
    assert "snmp:Udp.RcvbufErrors" in [str(t) for t in DEFAULT_METRIC.drops]
    for excluded in ("lo", "veth1a2b", "bond0", "eth0.100", "docker0", "br-9f1", "ifb0"):
        assert not DEFAULT_METRIC.interface_selected(excluded), excluded
    for included in ("eth0", "ens1f0np0", "enp59s0f1", "eno1"):
        assert DEFAULT_METRIC.interface_selected(included), included
    assert "per (netdev:rx_packets)" in DEFAULT_METRIC.describe()


def test_metric_from_profile_mapping() -> None:
    metric = metric_from_dict({
        "drops": ["snmp:Udp.RcvbufErrors", "snmp6:Udp6RcvbufErrors", "ethtool:port.rx_dropped"],
        "packets": ["snmp:Udp.InDatagrams"],
        "interfaces": {"include": ["ens*"], "exclude": []},
    })
    assert [t.source for t in metric.drops] == ["snmp", "snmp6", "ethtool"]
    assert metric.interface_selected("ens3") and not metric.interface_selected("eth0")
    assert metric_from_dict(None) is DEFAULT_METRIC
    assert metric_from_dict(metric.to_dict()) == metric
    doc = snapshot(snmp6={"Udp6RcvbufErrors": 3})
    assert series_values(doc, CounterTerm("snmp6", "Udp6RcvbufErrors"), metric) == {"": 3}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"drops": ["nic:rx_dropped"]}, r"profile.yaml: canary.metric.drops\[0\]: unknown counter "
                                        r"source 'nic'.*allowed: netdev, ethtool"),
        ({"drops": ["rx_dropped"]}, "is not SOURCE:NAME"),
        ({"drops": ["softnet:backlog_len"]}, "softnet has no counter 'backlog_len'"),
        ({"drops": ["snmp:RcvbufErrors"]}, "snmp counters are Proto.Field"),
        ({"drops": []}, "drops: must not be empty"),
        ({"drops": "netdev:rx_dropped"}, "must be a list of strings"),
        ({"packets": ["netdev:rx_dropped"]}, "both a drop and a packet counter"),
        ({"drop": ["netdev:rx_dropped"]}, r"unknown key\(s\) drop"),
        ({"interfaces": {"only": ["eth0"]}}, r"interfaces: unknown key\(s\) only"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_metric_errors_name_the_field(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        metric_from_dict(data, "profile.yaml: canary.metric")
