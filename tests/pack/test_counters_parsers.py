"""Counter file parsers on real-format samples (several kernels, three NIC drivers)."""
from __future__ import annotations

import locations
import pytest

from fleet_rollout.counters.parsers import (
    CounterFormatError,
    parse_counter_value,
    parse_ethtool_stats,
    parse_snmp,
    parse_snmp6,
    parse_softnet_stat,
)
from fleet_rollout.errors import HostError

FIXTURES = locations.FIXTURES / "counters"


def _text(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


# --- /proc/net/softnet_stat -----------------------------------------------------------------

@pytest.mark.parametrize(
    "kernel, columns, cpus, dropped, time_squeeze",
    [
        ("linux-2.6.32", 9, [0, 1, 2, 3], [0, 3, 0, 0], [0x1C4, 0x2F, 0x11, 0x20]),
        ("linux-3.2", 10, [0, 1, 2, 3], [0, 0x1A, 0, 0], [0xA1C, 0x15B, 0xE7, 0x102]),
        ("linux-4.19", 11, [0, 1, 2, 3], [0xA3F1, 0x2B4, 0, 0x11], [0x1C2D, 0x3E8, 0x37A, 0x411]),
        ("linux-5.10", 13, [0, 1, 2, 3], [0, 2, 0, 0], [0x31, 7, 9, 0xB]),
        ("linux-6.6", 15, [0, 1, 3], [5, 0, 0x12C], [0x102, 0x44, 0x210]),
    ],
)
def test_softnet_stat_every_kernel_layout(kernel, columns, cpus, dropped, time_squeeze) -> None:
    rows = parse_softnet_stat(_text("softnet_stat", kernel))
    assert [r["columns"] for r in rows] == [columns] * len(cpus)
    assert [r["cpu"] for r in rows] == cpus
    assert [r["dropped"] for r in rows] == dropped
    assert [r["time_squeeze"] for r in rows] == time_squeeze


def test_softnet_stat_named_extra_columns() -> None:
    rows = parse_softnet_stat(_text("softnet_stat", "linux-6.6"))
    assert rows[1]["backlog_len"] == 2 and rows[1]["input_qlen"] == 1
    assert rows[1]["process_qlen"] == 1
    assert parse_softnet_stat(_text("softnet_stat", "linux-4.19"))[3]["flow_limit_count"] == 7
    assert parse_softnet_stat(_text("softnet_stat", "linux-3.2"))[1]["received_rps"] == 0x4D2
    # 32-bit values near the top are read as unsigned
    assert parse_softnet_stat(_text("softnet_stat", "linux-4.19"))[0]["processed"] == 0xFFFFFFF0


def test_softnet_stat_future_kernel_keeps_unknown_columns() -> None:
    line = " ".join(["00000001"] * 12 + ["00000000"] + ["00000002"] * 3)
    [row] = parse_softnet_stat(line + "\n")
    assert row["columns"] == 16 and row["col15"] == 2 and row["cpu"] == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no CPU lines"),
        ("00000001 00000002 00000003\n", "at least 9"),
        ("0000000g " + "00000000 " * 8 + "\n", "not hex"),
        ("00000000 " * 9 + "\n" + "00000000 " * 10 + "\n", "earlier lines 9"),
        ("100000000 " + "00000000 " * 8 + "\n", "exceeds 32 bits"),
    ],
)
def test_softnet_stat_bad_text(text: str, message: str) -> None:
    with pytest.raises(CounterFormatError, match=message):
        parse_softnet_stat(text)


def test_parse_errors_are_library_host_errors() -> None:
    with pytest.raises(HostError):
        parse_softnet_stat("garbage\n")


# --- ethtool -S -------------------------------------------------------------------------------

def test_ethtool_ixgbe() -> None:
    stats = parse_ethtool_stats(_text("ethtool", "ixgbe.txt"))
    assert stats["rx_missed_errors"] == 7457
    assert stats["rx_no_buffer_count"] == 5120
    assert stats["rx_packets"] == 918273645
    assert stats["rx_queue_3_packets"] == 229568414
    assert stats["rx_pb_7_pxoff"] == 0
    assert len(stats) == 113


def test_ethtool_i40e_dotted_names() -> None:
    stats = parse_ethtool_stats(_text("ethtool", "i40e.txt"))
    assert stats["port.rx_dropped"] == 2211
    assert stats["rx_dropped"] == 1043
    assert stats["rx-1.rx_packets"] == 2756001955
    assert stats["port.rx_discards"] == 0


def test_ethtool_mlx5() -> None:
    stats = parse_ethtool_stats(_text("ethtool", "mlx5.txt"))
    assert stats["rx_discards_phy"] == 58591
    assert stats["rx_out_of_buffer"] == 990473
    assert stats["rx_prio0_discards"] == 58590
    assert stats["rx1_xdp_drop"] == 0


def test_ethtool_odd_driver_names_and_duplicates() -> None:
    text = "NIC statistics:\n     [0]: rx_bytes: 10\n     rx_packets: 4\n     rx_packets: 9\n"
    stats = parse_ethtool_stats(text)
    assert stats == {"[0]: rx_bytes": 10, "rx_packets": 4}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("no stats available\n", "not ethtool -S output"),
        ("NIC statistics:\n     rx_packets: lots\n", "line 2"),
    ],
)
def test_ethtool_bad_text(text: str, message: str) -> None:
    with pytest.raises(CounterFormatError, match=message):
        parse_ethtool_stats(text, "ethtool -S eth9")


# --- /proc/net/snmp, snmp6, sysfs -----------------------------------------------------------

def test_snmp_kernel_3_10_udp_fields() -> None:
    snmp = parse_snmp(_text("snmp", "linux-3.10"))
    assert snmp["Udp"] == {"InDatagrams": 11893022, "NoPorts": 1022, "InErrors": 4411,
                           "OutDatagrams": 1388201, "RcvbufErrors": 4398, "SndbufErrors": 0,
                           "InCsumErrors": 13}
    assert snmp["Tcp"]["MaxConn"] == -1
    assert snmp["IcmpMsg"]["OutType3"] == 1219


def test_snmp_kernel_6_1_has_memerrors() -> None:
    snmp = parse_snmp(_text("snmp", "linux-6.1"))
    assert snmp["Udp"]["RcvbufErrors"] == 22211
    assert snmp["Udp"]["InErrors"] == 22211
    assert snmp["Udp"]["MemErrors"] == 0
    assert set(snmp) == {"Ip", "Icmp", "Tcp", "Udp", "UdpLite"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("Udp: InDatagrams NoPorts\n", "odd number"),
        ("Udp: InDatagrams NoPorts\nUdp: 1\n", "2 names but 1 values"),
        ("Udp: InDatagrams\nTcp: 1\n", "not a header/value pair"),
        ("Udp: InDatagrams\nUdp: x\n", "not an integer"),
    ],
)
def test_snmp_bad_text(text: str, message: str) -> None:
    with pytest.raises(CounterFormatError, match=message):
        parse_snmp(text)


def test_snmp6() -> None:
    snmp6 = parse_snmp6(_text("snmp", "snmp6-linux-6.1"))
    assert snmp6["Udp6RcvbufErrors"] == 17
    assert snmp6["Ip6InReceives"] == 1022
    with pytest.raises(CounterFormatError, match="line 1"):
        parse_snmp6("Udp6RcvbufErrors seventeen\n")


def test_sysfs_counter_value() -> None:
    assert parse_counter_value("18446744073709551615\n") == 2**64 - 1
    for bad in ("", "-1", "12 13", "0x10"):
        with pytest.raises(CounterFormatError, match="non-negative integer"):
            parse_counter_value(bad, "/sys/class/net/eth0/statistics/rx_dropped")
