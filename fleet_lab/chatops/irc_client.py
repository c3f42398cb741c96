"""A small real IRC client that plays a person (the SRE) in the lab's channel.

    with IrcClient("127.0.0.1", port, "sre") as sre:
        sre.join("#fleet-rollout")
        sre.say("#fleet-rollout", "!help")
        line = sre.wait_for_message("#fleet-rollout", from_nick="fleetbot", timeout=30)
        print(sre.transcript("#fleet-rollout"))

A reader thread answers PINGs and records every line; `wait_for` waits on that record.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Pattern, Set, Tuple, Union

CRLF = b"\r\n"
# mIRC formatting: bold, colour (with optional fg[,bg] digits), hex colour, reset, mono,
# reverse, italics, strike-through, underline (errbot's IRC renderer uses them).
_FORMATTING = re.compile(r"\x03(\d{1,2}(,\d{1,2})?)?|\x04([0-9a-fA-F]{6}(,[0-9a-fA-F]{6})?)?"
                         r"|[\x02\x0f\x11\x16\x1d\x1e\x1f]")


def strip_formatting(text: str) -> str:
    """Text as a person reads it: IRC colour/bold/... control codes removed."""
    return _FORMATTING.sub("", text)


@dataclass(frozen=True)
class IrcLine:
    """One line from the server, parsed per RFC 1459 (no IRCv3 tags)."""

    raw: str
    prefix: str
    command: str
    params: Tuple[str, ...]
    at: float = field(default_factory=time.monotonic, compare=False)
    own: bool = False  # a line we sent ourselves (recorded for the transcript)

    @classmethod
    def parse(cls, raw: str) -> IrcLine:
        rest = raw
        prefix = ""
        if rest.startswith(":"):
            prefix, _, rest = rest[1:].partition(" ")
        trailing: Optional[str] = None
        if " :" in rest:
            rest, _, trailing = rest.partition(" :")
        elif rest.startswith(":"):
            trailing, rest = rest[1:], ""
        words = rest.split()
        command = words[0].upper() if words else ""
        params = words[1:] + ([trailing] if trailing is not None else [])
        return cls(raw=raw, prefix=prefix, command=command, params=tuple(params))

    @property
    def nick(self) -> str:
        """The sender's nick ('' for server lines)."""
        return self.prefix.split("!", 1)[0] if "!" in self.prefix else ""

    @property
    def target(self) -> str:
        return self.params[0] if self.params else ""

    @property
    def text(self) -> str:
        """The trailing parameter (message text for PRIVMSG/NOTICE)."""
        return self.params[-1] if self.params else ""

    @property
    def plain(self) -> str:
        """`text` without IRC formatting codes."""
        return strip_formatting(self.text)


Predicate = Callable[[IrcLine], bool]


class IrcError(RuntimeError):
    pass


class IrcClient:
    """A person on IRC: NICK/USER registration, JOIN, PRIVMSG, PING/PONG, NAMES."""

    def __init__(self, host: str, port: int, nick: str, *, user: Optional[str] = None,
                 realname: str = "fleet_rollout lab person", timeout: float = 15.0) -> None:
        self.host = host
        self.port = port
        self.nick = nick
        self.user = user or nick
        self.realname = realname
        self.timeout = timeout
        self.lines: List[IrcLine] = []
        self._cond = threading.Condition()
        self._sock: Optional[socket.socket] = None
        self._reader: Optional[threading.Thread] = None
        self._closed = False
        self._send_lock = threading.Lock()

    # -- connection ----------------------------------------------------------------------

    def connect(self) -> IrcClient:
        """Connect and register; returns after the server's 001 welcome."""
        self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self._sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, name=f"irc-{self.nick}",
                                        daemon=True)
        self._reader.start()
        self.send(f"NICK {self.nick}")
        self.send(f"USER {self.user} 0 * :{self.realname}")
        line = self.wait_for(lambda ln: ln.command in ("001", "432", "433", "ERROR"),
                             self.timeout, since=0)
        if line.command != "001":
            raise IrcError(f"registration as {self.nick!r} refused: {line.raw}")
        return self

    def close(self, message: str = "bye") -> None:
        if self._closed:
            return
        self._closed = True
        if self._sock is not None:
            try:
                self.send(f"QUIT :{message}", force=True)
            except OSError:
                pass
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self) -> IrcClient:
        if self._sock is None:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, line: str, force: bool = False) -> None:
        if self._sock is None or (self._closed and not force):
            raise IrcError("not connected")
        if "\r" in line or "\n" in line:
            raise ValueError("IRC lines cannot contain CR/LF")
        with self._send_lock:
            self._sock.sendall(line.encode("utf-8") + CRLF)

    def _read_loop(self) -> None:
        assert self._sock is not None
        buf = b""
        while True:
            try:
                chunk = self._sock.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while CRLF in buf or b"\n" in buf:
                sep = CRLF if CRLF in buf else b"\n"
                raw, _, buf = buf.partition(sep)
                if not raw:
                    continue
                line = IrcLine.parse(raw.decode("utf-8", errors="replace"))
                if line.command == "PING":
                    try:
                        self.send(f"PONG :{line.text}", force=True)
                    except OSError:
                        pass
                with self._cond:
                    self.lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self.lines.append(IrcLine(raw="", prefix="", command="<EOF>", params=()))
            self._cond.notify_all()

    # -- waiting -------------------------------------------------------------------------

    def mark(self) -> int:
        """A position in the record: wait_for(..., since=mark) looks only at later lines."""
        with self._cond:
            return len(self.lines)

    def wait_for(self, predicate: Predicate, timeout: Optional[float] = None,
                 since: Optional[int] = None) -> IrcLine:
        """The first line (at index >= since; default: from now on) matching `predicate`."""
        return self._wait_index(predicate, timeout, since)[1]

    def _wait_index(self, predicate: Predicate, timeout: Optional[float],
                    since: Optional[int]) -> Tuple[int, IrcLine]:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            index = len(self.lines) if since is None else since
            while True:
                while index < len(self.lines):
                    line = self.lines[index]
                    index += 1
                    if predicate(line):
                        return index - 1, line
                    if line.command == "<EOF>":
                        raise IrcError(f"{self.nick}: connection closed while waiting")
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = "\n".join(ln.raw for ln in self.lines[-20:])
                    raise TimeoutError(
                        f"{self.nick}: no matching line within {timeout}s; last lines:\n{seen}")
                self._cond.wait(left)

    def collect(self, predicate: Predicate, quiet: float = 2.0, timeout: float = 30.0,
                since: Optional[int] = None) -> List[IrcLine]:
        """All lines matching `predicate` until none came for `quiet` s (or `timeout`)."""
        start = self.mark() if since is None else since
        deadline = time.monotonic() + timeout
        got: List[IrcLine] = []
        index = start
        last = time.monotonic()
        with self._cond:
            while time.monotonic() < deadline:
                while index < len(self.lines):
                    line = self.lines[index]
                    index += 1
                    if predicate(line):
                        got.append(line)
                        last = time.monotonic()
                if got and time.monotonic() - last >= quiet:
                    break
                self._cond.wait(0.1)
        return got

    # -- a person's verbs ----------------------------------------------------------------

    def join(self, channel: str, timeout: Optional[float] = None) -> Set[str]:
        """JOIN and wait for the end of the names list; returns the nicks in the channel."""
        since = self.mark()
        self.send(f"JOIN {channel}")
        self.wait_for(lambda ln: (ln.command == "JOIN" and ln.nick == self.nick
                                  and ln.text.lower() == channel.lower())
                      or ln.command in ("403", "405", "471", "473", "474", "475"),
                      timeout, since=since)
        return self._names_reply(channel, since, timeout)

    def names(self, channel: str, timeout: Optional[float] = None) -> Set[str]:
        since = self.mark()
        self.send(f"NAMES {channel}")
        return self._names_reply(channel, since, timeout)

    def _names_reply(self, channel: str, since: int, timeout: Optional[float]) -> Set[str]:
        end, _line = self._wait_index(
            lambda ln: ln.command == "366" and len(ln.params) > 1
            and ln.params[1].lower() == channel.lower(), timeout, since)
        nicks: Set[str] = set()
        with self._cond:
            window = self.lines[since:end]
        for line in window:
            if line.command == "353" and line.params[-2].lower() == channel.lower():
                nicks.update(n.lstrip("@+%&~") for n in line.text.split())
        return nicks

    def say(self, target: str, text: str) -> int:
        """PRIVMSG each line of `text`; returns the mark before sending (for wait_for)."""
        since = self.mark()
        for line in text.splitlines() or [""]:
            self.send(f"PRIVMSG {target} :{line}")
            with self._cond:
                self.lines.append(IrcLine(raw=f"PRIVMSG {target} :{line}",
                                          prefix=f"{self.nick}!{self.user}@self",
                                          command="PRIVMSG", params=(target, line), own=True))
        return since

    def part(self, channel: str, message: str = "") -> None:
        self.send(f"PART {channel} :{message}")

    def wait_for_message(self, target: str, *, from_nick: Optional[str] = None,
                         pattern: Union[str, Pattern[str], None] = None,
                         timeout: Optional[float] = None,
                         since: Optional[int] = None) -> IrcLine:
        """The next PRIVMSG/NOTICE to `target` (a channel, or our nick for private ones);
        `pattern` is searched in the text without formatting codes (`IrcLine.plain`)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def match(line: IrcLine) -> bool:
            return (line.command in ("PRIVMSG", "NOTICE") and not line.own
                    and line.target.lower() == target.lower()
                    and (from_nick is None or line.nick == from_nick)
                    and (regex is None or bool(regex.search(line.plain))))

        return self.wait_for(match, timeout, since=since)

    def wait_for_join(self, channel: str, nick: str, timeout: Optional[float] = None,
                      since: Optional[int] = 0) -> IrcLine:
        return self.wait_for(lambda ln: ln.command == "JOIN" and ln.nick == nick
                             and ln.text.lower() == channel.lower(), timeout, since=since)

    def transcript(self, channel: str) -> List[Tuple[str, str]]:
        """(nick, plain text) of every PRIVMSG/NOTICE the channel saw since we connected
        (our own lines included: the server does not echo them, `say` records them)."""
        out: List[Tuple[str, str]] = []
        with self._cond:
            lines = list(self.lines)
        for line in lines:
            if line.command in ("PRIVMSG", "NOTICE") and line.target.lower() == channel.lower():
                out.append((line.nick, line.plain))
        return out
