"""How the lab's errbot splits long messages for IRC (its config installs `split_message`).

An IRC line is at most 512 bytes including the sender's prefix; ngircd cuts longer ones
("[CUT]"). errbot cuts every message into parts of MESSAGE_SIZE_LIMIT characters wherever that
falls (errbot.utils.split_string_after), mid-line and mid-word, before the IRC backend sends one
PRIVMSG per line. `split_message` keeps lines whole where they fit and breaks longer lines at
spaces, so nothing is lost and no word is torn.
"""
from __future__ import annotations

from typing import Iterator, List


def _wrap(line: str, limit: int) -> List[str]:
    """`line` in pieces of at most `limit` characters, broken at spaces where possible."""
    pieces = []
    while len(line) > limit:
        cut = line.rfind(" ", 0, limit + 1)
        cut = cut if cut > 0 else limit
        pieces.append(line[:cut])
        line = line[cut:].lstrip(" ")
    pieces.append(line)
    return pieces


def split_message(text: str, limit: int) -> Iterator[str]:
    """Parts of at most `limit` characters, each made of whole lines (or pieces of a line too
    long for one part)."""
    part: List[str] = []
    size = 0
    for line in text.split("\n"):
        for piece in _wrap(line, limit):
            if part and size + 1 + len(piece) > limit:
                yield "\n".join(part)
                part, size = [], 0
            size += len(piece) + (1 if part else 0)
            part.append(piece)
    yield "\n".join(part)
