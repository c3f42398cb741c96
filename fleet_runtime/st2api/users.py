"""Users of the API: a flat htpasswd file, as st2's flat_file auth backend reads it.

Each line is `name:<bcrypt hash>` (`htpasswd -B` writes the same). The file must be private
(mode 0600): the API refuses to start on a file others may read. Names follow a strict pattern.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Dict, Union

import bcrypt

USERS_FILE = "st2api-users"  # the default users file, in the runtime home
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


class UsersFileError(Exception):
    """The users file is missing, unreadable, not private, or malformed."""


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise UsersFileError(f"user name {name!r} is not valid (letters, digits, . _ @ -;"
                             " at most 64)")
    return name


def load(path: Union[str, Path]) -> Dict[str, bytes]:
    """name -> bcrypt hash; refuses a file group or others may read."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text()
    except OSError as e:
        raise UsersFileError(f"users file {p}: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsersFileError(f"users file {p} is readable by others (mode"
                             f" {stat.S_IMODE(mode):o}); make it private: chmod 600 {p}")
    users: Dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        if not sep or not NAME_PATTERN.match(name) or not hashed.startswith("$2"):
            raise UsersFileError(f"users file {p} line {number}: expected name:<bcrypt hash>")
        users[name] = hashed.encode()
    return users


MAX_PASSWORD_BYTES = 72  # bcrypt uses no more: a longer password is refused, not cut


def verify(users: Dict[str, bytes], name: str, password: str) -> bool:
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    hashed = users.get(name)
    if hashed is None:
        bcrypt.checkpw(password.encode(), _DUMMY)  # same cost whether or not the user exists
        return False
    return bcrypt.checkpw(password.encode(), hashed)


def set_password(path: Union[str, Path], name: str, password: str) -> None:
    """Add or replace a user (the file is created 0600)."""
    check_name(name)
    if not password:
        raise UsersFileError("the password is empty")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise UsersFileError(f"the password is longer than {MAX_PASSWORD_BYTES} bytes (bcrypt"
                             " uses no more); choose a shorter one")
    p = Path(path)
    lines = []
    if p.exists():
        lines = [line for line in p.read_text().splitlines()
                 if line.partition(":")[0] != name]
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    lines.append(f"{name}:{hashed}")
    fd = os.open(str(p), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.chmod(p, 0o600)


_DUMMY = bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=10))
