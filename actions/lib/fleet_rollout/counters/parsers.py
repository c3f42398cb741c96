"""Parsers of the counter files, as pure functions of text.

They live in :mod:`fleet_rollout.counters.collector` because that file is shipped alone to
target hosts (standard library only); this module is where the rest of the library imports
them from.
"""
from __future__ import annotations

from fleet_rollout.counters.collector import (
    SOFTNET_COLUMNS,
    SOFTNET_COUNTERS,
    SOFTNET_WIDTH_BITS,
    CounterFormatError,
    parse_counter_value,
    parse_ethtool_stats,
    parse_snmp,
    parse_snmp6,
    parse_softnet_stat,
)

__all__ = [
    "SOFTNET_COLUMNS",
    "SOFTNET_COUNTERS",
    "SOFTNET_WIDTH_BITS",
    "CounterFormatError",
    "parse_counter_value",
    "parse_ethtool_stats",
    "parse_snmp",
    "parse_snmp6",
    "parse_softnet_stat",
]
