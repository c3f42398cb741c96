"""Maintenance windows of sites: when a rollout may start changing a host.

A site's schedule names an IANA time zone, the site-local hours of its window ("01:00-06:00",
"22:00-03:00" crossing midnight, "00:00-24:00" the whole day) and site-local dates on which no
window opens. No hours means always open; avoid dates then close whole local days. A window
belongs to the local date on which it starts: an avoided date removes the windows that start on
it, not the end of the previous day's window running into it.

Times in and out are UTC epoch seconds. Local times convert to UTC date by date in the site's
zone (fold=0: a wall time in a spring-forward gap or a fall-back fold converts the way
``datetime(..., tzinfo=zone).timestamp()`` does), so windows are shorter or longer in UTC on the
nights the clocks change. Open intervals are half-open: open at ``s <= t < e``.
"""
from __future__ import annotations

import datetime
import functools
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from fleet_rollout.errors import ConfigError

try:
    import zoneinfo  # novermin: Python 3.8 takes the backport below
except ImportError:  # Python 3.8: the backport (requirements.txt)
    from backports import zoneinfo  # type: ignore[no-redef]

MAX_HORIZON = 31 * 86400  # seconds next_fit searches ahead
DAY_MINUTES = 24 * 60
MAX_RANGES = 24  # hours entries of one schedule
MAX_AVOID = 1000  # avoid dates of one schedule
ZONE_PATTERN = "^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+){0,2}$"
FIELDS = ("timezone", "hours", "avoid")
_ZONE = re.compile(ZONE_PATTERN)
_RANGE = re.compile("([0-9]{2}):([0-9]{2})[ ]*-[ ]*([0-9]{2}):([0-9]{2})")
_DATE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")
_RANGE_HINT = "(start 00:00-23:59, end 00:00-24:00, e.g. 01:00-06:00 or 22:00-03:00)"

Interval = Tuple[float, float]
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


def _tzif_or_absent(name: str) -> bool:
    """Whether the file of `name` on the zone search path is a TZif file, or there is none (the
    tzdata package may have it). Other files there (leapseconds) crash backports.zoneinfo."""
    for base in zoneinfo.TZPATH:
        path = os.path.join(base, name)
        if os.path.isfile(path):
            with open(path, "rb") as tzfile:
                return tzfile.read(4) == b"TZif"
    return True


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> datetime.tzinfo:
    if not _tzif_or_absent(name):
        raise ValueError(f"{name} is not a TZif file")
    return zoneinfo.ZoneInfo(name)


def load_zone(name: str, where: str) -> datetime.tzinfo:
    """The time zone of an IANA name (Europe/Berlin); ConfigError when there is none."""
    if not isinstance(name, str):
        raise ConfigError(f"{where}: {name!r} is not a time zone name (a string such as "
                          "Europe/Berlin)")
    if ".." in name or name.startswith("/") or not _ZONE.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} is not a valid IANA time zone name (allowed: "
                          f"{ZONE_PATTERN}, e.g. Europe/Berlin)")
    try:
        return _zone(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        raise ConfigError(f"{where}: {name!r} is not a known IANA time zone "
                          "(e.g. Europe/Berlin, America/New_York, UTC)") from None


def _items(value: Any, where: str, what: str) -> List[Tuple[str, Any]]:
    """(field name, item) of a list field; one scalar counts as a list of itself."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [(f"{where}.{index}", item) for index, item in enumerate(value)]
    if isinstance(value, (str, datetime.date)):
        return [(where, value)]
    raise ConfigError(f"{where}: expected a list of {what}, not {type(value).__name__}")


def _minutes(hours: str, minutes: str, last_hour: int) -> Optional[int]:
    """Minute of day of HH:MM; None when out of range (24:00 only with last_hour 24)."""
    hour, minute = int(hours), int(minutes)
    if hour > last_hour or minute > 59 or (hour == 24 and minute != 0):
        return None
    return hour * 60 + minute


def _parse_range(text: Any, field: str) -> Tuple[int, int]:
    """(start, end) minute of day of one HH:MM-HH:MM range."""
    if not isinstance(text, str):
        raise ConfigError(f"{field}: {text!r} is not HH:MM-HH:MM (a string) {_RANGE_HINT}")
    match = _RANGE.fullmatch(text.strip())
    start = _minutes(match.group(1), match.group(2), 23) if match else None
    end = _minutes(match.group(3), match.group(4), 24) if match else None
    if start is None or end is None:
        raise ConfigError(f"{field}: {text!r} is not HH:MM-HH:MM {_RANGE_HINT}")
    if start == end:
        raise ConfigError(f"{field}: {text!r} starts where it ends: an empty window (the whole "
                          "day is 00:00-24:00)")
    return start, end


def parse_hours(value: Any, where: str) -> Tuple[Tuple[int, int], ...]:
    """Window ranges ("HH:MM-HH:MM", a list or one) as (start, end) minutes of the day.

    An end before the start crosses midnight; 00:00-24:00 is the whole day; none is always open.
    """
    items = _items(value, where, "HH:MM-HH:MM ranges")
    if len(items) > MAX_RANGES:
        raise ConfigError(f"{where}: {len(items)} ranges, at most {MAX_RANGES} allowed")
    return tuple(_parse_range(item, field) for field, item in items)


def _parse_date(value: Any, field: str) -> str:
    """YYYY-MM-DD of a calendar date given as text or as a date (YAML reads dates itself)."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str) and _DATE.fullmatch(value.strip()):
        try:
            return datetime.date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            pass
    raise ConfigError(f"{field}: {value!r} is not a calendar date YYYY-MM-DD "
                      "(e.g. 2026-12-24)")


def parse_dates(value: Any, where: str) -> Tuple[str, ...]:
    """Dates (a list or one) as sorted, unique YYYY-MM-DD texts."""
    items = _items(value, where, "YYYY-MM-DD dates")
    if len(items) > MAX_AVOID:
        raise ConfigError(f"{where}: {len(items)} dates, at most {MAX_AVOID} allowed")
    return tuple(sorted({_parse_date(item, field) for field, item in items}))


def _range_text(window: Tuple[int, int]) -> str:
    start, end = window
    return f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"


def hours_text(hours: Tuple[Tuple[int, int], ...]) -> List[str]:
    """parse_hours' result as text again: ["01:00-06:00", ...]."""
    return [_range_text(window) for window in hours]


@dataclass(frozen=True)
class Schedule:
    """A site's maintenance window: local hours in a time zone, minus avoided local dates."""

    timezone: str = "UTC"
    hours: Tuple[Tuple[int, int], ...] = ()  # () = always open (avoid dates still close days)
    avoid: Tuple[str, ...] = ()  # site-local dates on which no window opens

    def to_dict(self) -> Dict[str, Any]:
        """The plain form from_dict reads: {"timezone", "hours": ["01:00-06:00"], "avoid"}."""
        return {"timezone": self.timezone,
                "hours": [_range_text(window) for window in self.hours],
                "avoid": list(self.avoid)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "maintenance") -> Schedule:
        """A checked schedule of its plain form; ConfigError names the field under `where`."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping of {', '.join(FIELDS)}, not "
                              f"{type(data).__name__}")
        for key in data:
            if key not in FIELDS:
                raise ConfigError(f"{where}.{key}: unknown field (allowed: {', '.join(FIELDS)})")
        timezone = data.get("timezone", "UTC")
        load_zone(timezone, f"{where}.timezone")
        return cls(timezone=timezone,
                   hours=parse_hours(data.get("hours"), f"{where}.hours"),
                   avoid=parse_dates(data.get("avoid"), f"{where}.avoid"))

    @property
    def always_open(self) -> bool:
        """No hours and no avoid dates: open at every moment."""
        return not self.hours and not self.avoid


def _local_ordinal(at: float, zone: datetime.tzinfo) -> int:
    """The proleptic ordinal of the local date at `at`."""
    return datetime.datetime.fromtimestamp(at, zone).toordinal()


@functools.lru_cache(maxsize=8192)
def _midnight_offset(timezone: str, ordinal: int) -> float:
    """UTC offset (seconds) of local 00:00 on a date, fold=0."""
    zone = load_zone(timezone, "schedule.timezone")
    offset = datetime.datetime.fromordinal(ordinal).replace(tzinfo=zone).utcoffset()
    return offset.total_seconds() if offset is not None else 0.0


@functools.lru_cache(maxsize=256)
def _avoid_ordinals(avoid: Tuple[str, ...]) -> FrozenSet[int]:
    return frozenset(datetime.date.fromisoformat(day).toordinal() for day in avoid)


def _utc(zone: datetime.tzinfo, offsets: List[float], base: int, ordinal: int,
         minute: int) -> float:
    """UTC epoch seconds of the local wall time `minute` minutes after 00:00 of date `ordinal`
    (less than 2 days), fold=0; offsets[i] is the midnight offset of date base + i.

    A date whose midnight offset equals the next one's has no clock change (zones change their
    clocks at most once a day): plain arithmetic. Other dates ask the zone.
    """
    ordinal += minute // DAY_MINUTES
    minute %= DAY_MINUTES
    offset = offsets[ordinal - base]
    if offset == offsets[ordinal - base + 1]:
        return float((ordinal - _EPOCH_ORDINAL) * 86400 + minute * 60 - offset)
    hour, minute = divmod(minute, 60)
    moment = datetime.datetime.fromordinal(ordinal).replace(hour=hour, minute=minute, tzinfo=zone)
    return moment.timestamp()


def _check_range(start: float, end: float) -> None:
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"maintenance windows need finite times, not {start!r}..{end!r}")


def _windows(schedule: Schedule, start: float, end: float) -> List[Interval]:
    """Every window (unmerged, unclipped) starting on a local date that can reach [start, end]."""
    _check_range(start, end)
    zone = load_zone(schedule.timezone, "schedule.timezone")
    hours = schedule.hours or ((0, DAY_MINUTES),)
    avoid = _avoid_ordinals(tuple(schedule.avoid))
    first = _local_ordinal(start, zone) - 1  # the day before's windows run into start's day
    last = _local_ordinal(end, zone)
    # windows end by 00:00 two days after they start: offsets of first .. last + 2
    offsets = [_midnight_offset(schedule.timezone, day) for day in range(first, last + 3)]
    spans = [(opens, closes + DAY_MINUTES if closes <= opens else closes)  # past midnight
             for opens, closes in hours]
    found: List[Interval] = []
    for day in range(first, last + 1):
        if day in avoid:
            continue
        index = day - first
        if offsets[index] == offsets[index + 1] == offsets[index + 2]:  # no clock change
            midnight = (day - _EPOCH_ORDINAL) * 86400 - offsets[index]
            found.extend((midnight + opens * 60.0, midnight + closes * 60.0)
                         for opens, closes in spans)
            continue
        for opens, closes in spans:
            begin = _utc(zone, offsets, first, day, opens)
            finish = _utc(zone, offsets, first, day, closes)
            if finish > begin:  # a window inside a spring-forward gap can come out empty
                found.append((begin, finish))
    return found


def _merge(found: Iterable[Interval]) -> List[Interval]:
    """Sorted intervals with overlapping and adjacent ones joined."""
    merged: List[Interval] = []
    for begin, finish in sorted(found):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finish))
        else:
            merged.append((begin, finish))
    return merged


def intervals(schedule: Schedule, start: float, end: float) -> List[Interval]:
    """The UTC intervals during which the schedule is open, clipped to [start, end], sorted and
    merged; empty when end <= start. ValueError for times that are not finite."""
    if end <= start:
        return []
    if schedule.always_open:
        return [(start, end)]
    clipped = [(max(begin, start), min(finish, end))
               for begin, finish in _windows(schedule, start, end)
               if begin < end and finish > start]
    return _merge(clipped)


def is_open(schedule: Schedule, at: float) -> bool:
    """Whether a window of the schedule is open at `at`."""
    if schedule.always_open:
        return True
    return any(begin <= at < finish for begin, finish in _windows(schedule, at, at))


def open_until(schedule: Schedule, at: float) -> Optional[float]:
    """The end of the open interval containing `at` (at most at + MAX_HORIZON; infinity when
    always open); None when closed at `at`."""
    if schedule.always_open:
        return math.inf
    for begin, finish in intervals(schedule, at, at + MAX_HORIZON):
        if begin <= at < finish:
            return finish
    return None


def _intersect(left: List[Interval], right: List[Interval]) -> List[Interval]:
    """The intersection of two sorted lists of disjoint intervals."""
    found: List[Interval] = []
    i = j = 0
    while i < len(left) and j < len(right):
        begin = max(left[i][0], right[j][0])
        finish = min(left[i][1], right[j][1])
        if begin < finish:
            found.append((begin, finish))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return found


def _fit(schedules: List[Schedule], at: float, duration: float, horizon: float) -> Optional[float]:
    """next_fit over the intersection of every schedule's intervals up to at + horizon."""
    end = at + horizon + duration
    common = [(at, end)] if end > at else []
    for schedule in schedules:
        if not common:
            return None
        if not schedule.always_open:
            common = [(begin, finish)  # shorter ones can only shrink: never fit
                      for begin, finish in _intersect(common, intervals(schedule, at, end))
                      if begin + duration <= finish]
    if common and common[0][0] < at + horizon:
        return common[0][0]
    return None


def next_fit(schedules: Iterable[Schedule], at: float, duration: float,
             horizon: float = MAX_HORIZON) -> Optional[float]:
    """The earliest t in [at, at + horizon) at which every schedule stays open from t to
    t + duration (duration 0: open at t); None when there is none.

    Looks two days ahead first (the usual answer) and only then over the whole horizon.
    """
    if duration < 0 or horizon < 0:
        raise ValueError(f"next_fit needs a duration and a horizon of 0 or more, not "
                         f"{duration!r} and {horizon!r}")
    every = list(schedules)
    first_look = min(horizon, 2 * 86400.0)
    found = _fit(every, at, duration, first_look)
    if found is not None or first_look >= horizon:
        return found
    return _fit(every, at, duration, horizon)


def describe(schedule: Schedule) -> str:
    """One line for people: "01:00-06:00 Europe/Berlin, not on 2026-12-24" or "any time"."""
    if schedule.always_open:
        return "any time"
    hours = ", ".join(_range_text(window) for window in schedule.hours) or "all day"
    text = f"{hours} {schedule.timezone}"
    if schedule.avoid:
        text += f", not on {', '.join(schedule.avoid)}"
    return text


def local_text(at: float, timezone: str) -> str:
    """A moment as the site reads it: "2026-12-07 01:00 CET"."""
    moment = datetime.datetime.fromtimestamp(at, load_zone(timezone, "timezone"))
    return moment.strftime("%Y-%m-%d %H:%M %Z")
