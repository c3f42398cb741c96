"""Rule criteria operators with st2's names and semantics (st2common/operators.py)."""
from __future__ import annotations

import datetime
import fnmatch
import re
from typing import Any, Callable, Dict, Tuple

SEARCH_CONDITIONS = ("any", "all", "any2any", "all2any")


def _strings(value: Any, pattern: Any) -> Tuple[Any, Any]:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8")
    return value, pattern


def _guard(func: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """Most operators are false when the pattern is None (st2's behaviour)."""

    def wrapper(value: Any, pattern: Any) -> bool:
        if pattern is None:
            return False
        value, pattern = _strings(value, pattern)
        return func(value, pattern)

    wrapper.__name__ = func.__name__
    return wrapper


@_guard
def equals(value: Any, pattern: Any) -> bool:
    return bool(value == pattern)


def nequals(value: Any, pattern: Any) -> bool:
    value, pattern = _strings(value, pattern)
    return bool(value != pattern)


@_guard
def iequals(value: Any, pattern: Any) -> bool:
    return bool(value.lower() == pattern.lower())


@_guard
def contains(value: Any, pattern: Any) -> bool:
    return pattern in value


@_guard
def icontains(value: Any, pattern: Any) -> bool:
    return pattern.lower() in value.lower()


@_guard
def ncontains(value: Any, pattern: Any) -> bool:
    return pattern not in value


@_guard
def incontains(value: Any, pattern: Any) -> bool:
    return pattern.lower() not in value.lower()


@_guard
def startswith(value: Any, pattern: Any) -> bool:
    return bool(value.startswith(pattern))


@_guard
def istartswith(value: Any, pattern: Any) -> bool:
    return bool(value.lower().startswith(pattern.lower()))


@_guard
def endswith(value: Any, pattern: Any) -> bool:
    return bool(value.endswith(pattern))


@_guard
def iendswith(value: Any, pattern: Any) -> bool:
    return bool(value.lower().endswith(pattern.lower()))


def less_than(value: Any, pattern: Any) -> bool:
    if pattern is None:
        return False
    return bool(value < pattern)


def greater_than(value: Any, pattern: Any) -> bool:
    if pattern is None:
        return False
    return bool(value > pattern)


@_guard
def match_wildcard(value: Any, pattern: Any) -> bool:
    return fnmatch.fnmatch(value, pattern)


@_guard
def match_regex(value: Any, pattern: Any) -> bool:
    return re.compile(pattern, re.DOTALL).match(value) is not None


@_guard
def regex(value: Any, pattern: Any) -> bool:
    return re.compile(pattern).search(value) is not None


@_guard
def iregex(value: Any, pattern: Any) -> bool:
    return re.compile(pattern, re.IGNORECASE).search(value) is not None


def _parse_date(value: Any) -> datetime.datetime:
    if isinstance(value, (int, float)):
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed


def _timediff(value: Any, seconds: Any) -> float:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (now - _parse_date(value)).total_seconds() - float(seconds)


def timediff_lt(value: Any, pattern: Any) -> bool:
    if pattern is None:
        return False
    return _timediff(value, pattern) < 0


def timediff_gt(value: Any, pattern: Any) -> bool:
    if pattern is None:
        return False
    return _timediff(value, pattern) > 0


def exists(value: Any, pattern: Any) -> bool:
    return value is not None


def nexists(value: Any, pattern: Any) -> bool:
    return value is None


@_guard
def inside(value: Any, pattern: Any) -> bool:
    return value in pattern


@_guard
def ninside(value: Any, pattern: Any) -> bool:
    return value not in pattern


def search(
    value: Any, pattern: Dict[str, Any], condition: str, check: Callable[[str, Any, Any], bool]
) -> bool:
    """Match list items against child criteria (keys `item.<path>`, `#n` suffix allowed)."""
    if isinstance(value, dict):
        value = [value]
    if value is None:
        value = []
    item_match = all
    pattern_match = all
    if condition == "any":
        item_match = any
    elif condition == "all2any":
        pattern_match = any
    elif condition == "any2any":
        item_match = any
        pattern_match = any
    elif condition != "all":
        raise ValueError(
            f"The '{condition}' condition is not recognized for type search, 'any', 'all',"
            " 'any2any' and 'all2any' are allowed"
        )
    return item_match(
        [pattern_match([check(k, v, {"item": item}) for k, v in pattern.items()]) for item in value]
    )


OPERATORS: Dict[str, Callable[..., bool]] = {
    "matchwildcard": match_wildcard,
    "matchregex": match_regex,
    "regex": regex,
    "iregex": iregex,
    "eq": equals,
    "equals": equals,
    "neq": nequals,
    "nequals": nequals,
    "ieq": iequals,
    "iequals": iequals,
    "contains": contains,
    "icontains": icontains,
    "ncontains": ncontains,
    "incontains": incontains,
    "startswith": startswith,
    "istartswith": istartswith,
    "endswith": endswith,
    "iendswith": iendswith,
    "lt": less_than,
    "lessthan": less_than,
    "gt": greater_than,
    "greaterthan": greater_than,
    "td_lt": timediff_lt,
    "timediff_lt": timediff_lt,
    "td_gt": timediff_gt,
    "timediff_gt": timediff_gt,
    "exists": exists,
    "nexists": nexists,
    "inside": inside,
    "in": inside,
    "ninside": ninside,
    "nin": ninside,
    "search": search,
}
