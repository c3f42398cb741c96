"""Dotted-path lookups into trigger payloads (st2 uses JSONPath: `trigger.a.b[0].c`)."""
from __future__ import annotations

import re
from typing import Any, List

_TOKEN = re.compile(r"([^.\[\]]+)|\[(\*|-?\d+)\]")


def _tokens(path: str) -> List[Any]:
    tokens: List[Any] = []
    pos = 0
    path = path.strip()
    while pos < len(path):
        if path[pos] == ".":
            pos += 1
            continue
        m = _TOKEN.match(path, pos)
        if not m:
            raise ValueError(f"Invalid payload path {path!r} at position {pos}")
        if m.group(1) is not None:
            name = m.group(1)
            if name.startswith("`") and name.endswith("`"):
                name = name[1:-1]
            tokens.append(name)
        else:
            idx = m.group(2)
            tokens.append("*" if idx == "*" else int(idx))
        pos = m.end()
    return tokens


def lookup(data: Any, path: str) -> List[Any]:
    """Every value `path` selects in `data` (an empty list when nothing matches)."""
    current = [data]
    for token in _tokens(path):
        nxt: List[Any] = []
        for value in current:
            if token == "*":
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, dict):
                    nxt.extend(value.values())
            elif isinstance(token, int):
                if isinstance(value, list) and -len(value) <= token < len(value):
                    nxt.append(value[token])
            elif isinstance(value, dict) and token in value:
                nxt.append(value[token])
            elif hasattr(value, "__getitem__") and not isinstance(value, (str, list, dict)):
                try:
                    nxt.append(value[token])
                except (KeyError, TypeError):
                    pass
        current = nxt
    return current
