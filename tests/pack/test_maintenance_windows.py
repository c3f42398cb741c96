"""Maintenance windows of sites (fleet_rollout.maintenance): parsing with errors that name the
field, site-local windows in UTC (midnight crossing, whole days, avoided dates, DST nights) and
the earliest moment every site of a batch is open long enough."""
from __future__ import annotations

import datetime
import math
import re

import pytest

from fleet_rollout.errors import ConfigError
from fleet_rollout.maintenance import (
    MAX_HORIZON,
    Schedule,
    describe,
    intervals,
    is_open,
    load_zone,
    local_text,
    next_fit,
    open_until,
    parse_dates,
    parse_hours,
)

try:
    import zoneinfo
except ImportError:  # Python 3.8
    from backports import zoneinfo  # type: ignore[no-redef]

HOUR = 3600
DAY = 86400
BERLIN = "Europe/Berlin"
NIGHT = Schedule(BERLIN, ((60, 360),))  # 01:00-06:00
LATE = Schedule(BERLIN, ((22 * 60, 3 * 60),))  # 22:00-03:00


def at(timezone: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    """Epoch seconds of a wall time in a zone (fold=0, as the module converts)."""
    zone = zoneinfo.ZoneInfo(timezone)
    return datetime.datetime(year, month, day, hour, minute, tzinfo=zone).timestamp()


def berlin(day: int, hour: int = 0, minute: int = 0) -> float:
    """A December 2026 wall time in Berlin."""
    return at(BERLIN, 2026, 12, day, hour, minute)


@pytest.mark.parametrize("bad", [
    "25:00-03:00", "01:00-01:00", "00:00-00:00", "1:00-06:00", "01:60-02:00", "00:00-24:01",
    "24:00-01:00", "01:00", "01:00-06:00-07:00", "", 5, None, ["01:00-06:00"],
])
def test_parse_hours_errors_name_the_field(bad: object) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_hours(["01:00-06:00", bad], "profile.yaml: field maintenance.hours")
    assert str(raised.value).startswith("profile.yaml: field maintenance.hours.1: ")
    assert repr(bad) in str(raised.value)


def test_parse_hours_error_text() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "profile.yaml: field maintenance.hours.0: '25:00-03:00' is not HH:MM-HH:MM")):
        parse_hours(["25:00-03:00"], "profile.yaml: field maintenance.hours")


def test_parse_hours_not_a_list() -> None:
    with pytest.raises(ConfigError, match="^site.hours: expected a list"):
        parse_hours({"from": "01:00"}, "site.hours")


def test_parse_hours_ranges() -> None:
    assert parse_hours(["22:00-03:00", "00:00-24:00", "01:00 - 06:00"], "h") == (
        (22 * 60, 3 * 60), (0, 24 * 60), (60, 360))
    assert parse_hours("23:59-00:00", "h") == ((23 * 60 + 59, 0),)
    assert parse_hours([], "h") == ()
    assert parse_hours(None, "h") == ()


def test_parse_dates_normalised_sorted_unique() -> None:
    value = ["2026-12-31", datetime.date(2026, 12, 24), "2026-12-24", "2024-02-29"]
    assert parse_dates(value, "avoid") == ("2024-02-29", "2026-12-24", "2026-12-31")
    assert parse_dates(datetime.date(2027, 1, 1), "avoid") == ("2027-01-01",)
    assert parse_dates(None, "avoid") == ()


@pytest.mark.parametrize("bad", [
    "2026-02-30", "2025-02-29", "2026-1-5", "26-01-05", "2026/01/05", "tomorrow", 20260105,
    datetime.datetime(2026, 1, 5, 10, 0),
])
def test_parse_dates_errors_name_the_field(bad: object) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_dates(["2026-12-24", bad], "profile.yaml: field maintenance.avoid")
    assert str(raised.value).startswith("profile.yaml: field maintenance.avoid.1: ")
    assert repr(bad) in str(raised.value)


@pytest.mark.parametrize("name", [
    "../etc/passwd", "Nowhere/City", "/etc/localtime", "Europe/../../etc/passwd", "Europe/Berlin\n",
    "", "Europe", "a/b/c/d", "zone.tab", "leapseconds", 5, None,
])
def test_load_zone_refuses(name: object) -> None:
    with pytest.raises(ConfigError, match=r"^sites\.yaml: field fra1\.timezone: "):
        load_zone(name, "sites.yaml: field fra1.timezone")  # type: ignore[arg-type]


def test_load_zone_names_the_value() -> None:
    with pytest.raises(ConfigError, match="'Nowhere/City' is not a known IANA time zone"):
        load_zone("Nowhere/City", "tz")


def test_load_zone() -> None:
    assert load_zone(BERLIN, "tz") == zoneinfo.ZoneInfo(BERLIN)
    assert load_zone("America/Argentina/Buenos_Aires", "tz").utcoffset(
        datetime.datetime(2026, 1, 1)) == datetime.timedelta(hours=-3)
    assert load_zone("Etc/GMT+5", "tz").utcoffset(None) == datetime.timedelta(hours=-5)


def test_schedule_round_trip() -> None:
    schedule = Schedule(BERLIN, ((60, 360), (22 * 60, 3 * 60), (0, 24 * 60)), ("2026-12-24",))
    plain = schedule.to_dict()
    assert plain == {"timezone": BERLIN, "hours": ["01:00-06:00", "22:00-03:00", "00:00-24:00"],
                     "avoid": ["2026-12-24"]}
    assert Schedule.from_dict(plain) == schedule
    assert Schedule.from_dict(Schedule().to_dict()) == Schedule()
    assert Schedule.from_dict({}) == Schedule()


def test_schedule_from_yaml_like_dict() -> None:
    schedule = Schedule.from_dict({"timezone": BERLIN, "hours": "01:00-06:00",
                                   "avoid": [datetime.date(2026, 12, 31), "2026-12-24"]})
    assert schedule == Schedule(BERLIN, ((60, 360),), ("2026-12-24", "2026-12-31"))


@pytest.mark.parametrize(("data", "field"), [
    ({"timezone": "Nowhere/City"}, "profile.yaml: field maintenance.timezone: "),
    ({"hours": ["01:00-06:00", "25:00-03:00"]}, "profile.yaml: field maintenance.hours.1: "),
    ({"avoid": ["2026-13-01"]}, "profile.yaml: field maintenance.avoid.0: "),
    ({"days": ["mon"]}, "profile.yaml: field maintenance.days: unknown field"),
    (["01:00-06:00"], "profile.yaml: field maintenance: expected a mapping"),
])
def test_schedule_from_dict_errors_name_the_field(data: object, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Schedule.from_dict(data, "profile.yaml: field maintenance")  # type: ignore[arg-type]
    assert str(raised.value).startswith(field)


def test_always_open() -> None:
    schedule = Schedule(BERLIN)
    start, end = berlin(7, 5), berlin(9, 5)
    assert schedule.always_open
    assert intervals(schedule, start, end) == [(start, end)]
    assert is_open(schedule, start)
    assert open_until(schedule, start) == math.inf
    assert next_fit([schedule, Schedule()], start, 10 * DAY) == start
    assert describe(schedule) == "any time"
    assert not Schedule(hours=((0, 24 * 60),)).always_open
    assert not Schedule(avoid=("2026-12-24",)).always_open


def test_window_in_utc() -> None:
    assert intervals(NIGHT, berlin(7), berlin(8, 12)) == [
        (berlin(7, 1), berlin(7, 6)), (berlin(8, 1), berlin(8, 6))]
    assert berlin(7, 1) == at("UTC", 2026, 12, 7, 0)  # CET
    # clipped to the range asked for
    assert intervals(NIGHT, berlin(7, 3), berlin(8, 2)) == [
        (berlin(7, 3), berlin(7, 6)), (berlin(8, 1), berlin(8, 2))]
    assert intervals(NIGHT, berlin(7, 6), berlin(8, 1)) == []
    assert intervals(NIGHT, berlin(8), berlin(7)) == []


def test_open_at_the_start_closed_at_the_end() -> None:
    assert not is_open(NIGHT, berlin(7, 0, 59))
    assert is_open(NIGHT, berlin(7, 1))
    assert is_open(NIGHT, berlin(7, 5, 59))
    assert not is_open(NIGHT, berlin(7, 6))
    assert open_until(NIGHT, berlin(7, 2)) == berlin(7, 6)
    assert open_until(NIGHT, berlin(7, 6)) is None


def test_window_crossing_midnight() -> None:
    assert intervals(LATE, berlin(7, 12), berlin(9, 12)) == [
        (berlin(7, 22), berlin(8, 3)), (berlin(8, 22), berlin(9, 3))]
    assert is_open(LATE, berlin(7, 23, 30))
    assert is_open(LATE, berlin(8, 2, 59))
    assert not is_open(LATE, berlin(8, 3))
    assert not is_open(LATE, berlin(8, 21, 59))
    assert open_until(LATE, berlin(7, 23)) == berlin(8, 3)
    # the range starts inside the window opened the day before
    assert intervals(LATE, berlin(8, 1), berlin(8, 12)) == [(berlin(8, 1), berlin(8, 3))]


def test_whole_day_windows_merge() -> None:
    schedule = Schedule(BERLIN, ((0, 24 * 60),))
    assert intervals(schedule, berlin(7, 5), berlin(10, 5)) == [(berlin(7, 5), berlin(10, 5))]
    assert is_open(schedule, berlin(8))
    assert open_until(schedule, berlin(8)) == berlin(8) + MAX_HORIZON
    # a job longer than a day fits across midnights
    assert next_fit([schedule], berlin(7, 5), 2 * DAY) == berlin(7, 5)


def test_adjacent_windows_merge() -> None:
    schedule = Schedule(BERLIN, ((0, 3 * 60), (22 * 60, 24 * 60)))  # 22:00-03:00 in two parts
    assert intervals(schedule, berlin(7, 12), berlin(8, 12)) == [(berlin(7, 22), berlin(8, 3))]
    assert next_fit([schedule], berlin(7, 12), 5 * HOUR) == berlin(7, 22)


def test_avoided_date_cuts_the_window_starting_on_it() -> None:
    schedule = Schedule(BERLIN, LATE.hours, ("2026-12-24",))
    # the 23rd's window runs into the 24th; the 24th's is gone; the 25th's opens
    assert intervals(schedule, berlin(23, 12), berlin(26, 12)) == [
        (berlin(23, 22), berlin(24, 3)), (berlin(25, 22), berlin(26, 3))]
    assert is_open(schedule, berlin(24, 1))
    assert not is_open(schedule, berlin(24, 23))
    assert not is_open(schedule, berlin(25, 1))
    assert next_fit([schedule], berlin(24, 2), 2 * HOUR) == berlin(25, 22)
    assert describe(schedule) == "22:00-03:00 Europe/Berlin, not on 2026-12-24"


def test_avoided_date_without_hours_closes_the_local_day() -> None:
    new_york = "America/New_York"
    schedule = Schedule(new_york, (), ("2026-12-25",))
    start, end = at(new_york, 2026, 12, 24, 12), at(new_york, 2026, 12, 27)
    assert intervals(schedule, start, end) == [
        (start, at(new_york, 2026, 12, 25)), (at(new_york, 2026, 12, 26), end)]
    assert not is_open(schedule, at(new_york, 2026, 12, 25, 23, 59))
    assert open_until(schedule, start) == at(new_york, 2026, 12, 25)
    assert describe(schedule) == "all day America/New_York, not on 2026-12-25"


def test_sites_in_zones_that_never_overlap() -> None:
    new_york = Schedule("America/New_York", ((60, 360),))
    assert next_fit([new_york, NIGHT], berlin(7), 0, horizon=2 * DAY) is None
    assert next_fit([new_york], berlin(7), 0, horizon=2 * DAY) == at(
        "America/New_York", 2026, 12, 7, 1)


def test_sites_in_zones_that_overlap_fully() -> None:
    paris = Schedule("Europe/Paris", ((60, 360),))
    assert intervals(paris, berlin(7), berlin(9)) == intervals(NIGHT, berlin(7), berlin(9))
    assert next_fit([NIGHT, paris], berlin(7, 12), 5 * HOUR) == berlin(8, 1)


def test_sites_in_zones_that_overlap_partly() -> None:
    london = Schedule("Europe/London", ((60, 360),))  # 02:00-07:00 in Berlin
    assert next_fit([NIGHT, london], berlin(7, 12), 4 * HOUR) == berlin(8, 2)
    assert next_fit([NIGHT, london], berlin(7, 12), 4 * HOUR + 1) is None


def test_next_fit_waits_for_a_window_long_enough() -> None:
    assert next_fit([NIGHT], berlin(7, 2), 2 * HOUR) == berlin(7, 2)  # open long enough now
    assert next_fit([NIGHT], berlin(7, 4), 2 * HOUR) == berlin(7, 4)  # ends just in time
    assert next_fit([NIGHT], berlin(7, 5), 2 * HOUR) == berlin(8, 1)  # too short: tomorrow
    assert next_fit([NIGHT], berlin(7, 12), HOUR) == berlin(8, 1)
    assert next_fit([NIGHT], berlin(7, 5), 6 * HOUR) is None  # longer than any window


def test_next_fit_duration_zero_means_open_at_t() -> None:
    assert next_fit([NIGHT], berlin(7, 5, 59), 0) == berlin(7, 5, 59)
    assert next_fit([NIGHT], berlin(7, 6), 0) == berlin(8, 1)


def test_next_fit_within_the_horizon() -> None:
    assert next_fit([NIGHT], berlin(7, 12), HOUR, horizon=12 * HOUR) is None
    assert next_fit([NIGHT], berlin(7, 12), HOUR, horizon=13 * HOUR + 1) == berlin(8, 1)
    avoid = tuple(f"2026-12-{day:02d}" for day in range(8, 28))
    late = Schedule(BERLIN, NIGHT.hours, avoid)
    assert next_fit([late], berlin(7, 12), HOUR) == berlin(28, 1)  # past the first look
    assert next_fit([late], berlin(7, 12), HOUR, horizon=10 * DAY) is None
    assert next_fit([], berlin(7, 12), HOUR) == berlin(7, 12)


def test_dst_spring_forward_night_is_shorter() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST, so 01:00-06:00 lasts 4 hours
    day = at(BERLIN, 2026, 3, 29)
    (window,) = intervals(NIGHT, day, day + DAY)
    assert window == (at("UTC", 2026, 3, 29, 0), at("UTC", 2026, 3, 29, 4))
    assert window[1] - window[0] == 4 * HOUR
    assert next_fit([NIGHT], day, 5 * HOUR, horizon=HOUR * 20) is None


def test_dst_fall_back_night_is_longer() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET, so 01:00-06:00 lasts 6 hours
    day = at(BERLIN, 2026, 10, 25)
    (window,) = intervals(NIGHT, day, day + DAY)
    assert window == (at("UTC", 2026, 10, 24, 23), at("UTC", 2026, 10, 25, 5))
    assert window[1] - window[0] == 6 * HOUR
    assert next_fit([NIGHT], day, 6 * HOUR) == window[0]


def test_describe_and_local_text() -> None:
    schedule = Schedule(BERLIN, ((60, 360), (22 * 60, 24 * 60)), ("2026-12-24", "2026-12-31"))
    assert describe(schedule) == (
        "01:00-06:00, 22:00-24:00 Europe/Berlin, not on 2026-12-24, 2026-12-31")
    assert describe(NIGHT) == "01:00-06:00 Europe/Berlin"
    assert local_text(at("UTC", 2026, 12, 7, 0), BERLIN) == "2026-12-07 01:00 CET"
    assert local_text(at("UTC", 2026, 7, 7, 0), BERLIN) == "2026-07-07 02:00 CEST"
    with pytest.raises(ConfigError):
        local_text(0.0, "Nowhere/City")
