"""The lab's errbot sends one message at a time (its config installs `send_one_at_a_time`).

errbot's IRC backend renders every outgoing message with one Markdown converter shared by all
threads (`IRCBackend.md`), and python-markdown keeps the text it is converting on that object.
err-stackstorm posts announcements from its stream thread while commands answer from errbot's
thread pool, so an acknowledgement and an announcement sent at the same moment can both come
out as the announcement: seen once in CI as the announcement twice and the ack never. Lines of
two messages also interleave in the channel.

Every message errbot sends goes through `ErrBot.split_and_send_message`; one lock around it
keeps each message whole and renders one message at a time. The backend module itself cannot
be patched from the config: errbot loads it from its file as a fresh module.
"""
from __future__ import annotations

from typing import Any


def send_one_at_a_time(errbot_cls: Any) -> None:
    """Wrap `errbot_cls.split_and_send_message` in one lock (idempotent)."""
    import threading

    original = errbot_cls.split_and_send_message
    if getattr(original, "one_at_a_time", False):
        return
    lock = threading.Lock()

    def split_and_send_message(self: Any, msg: Any) -> None:
        with lock:
            original(self, msg)

    split_and_send_message.one_at_a_time = True  # type: ignore[attr-defined]
    errbot_cls.split_and_send_message = split_and_send_message
