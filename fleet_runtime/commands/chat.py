"""`fleet-rollout chat "<message>"`: ChatOps through the pack's action aliases.

Matches the message against every enabled alias format like st2's alias execution API (named
parameters, `{{name=default}}`, trailing key=value pairs, immutable parameters, ambiguity),
runs the action, and prints (and posts to the local chat transcript) the alias's ack and result
messages, as the chat bot would.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict

from fleet_runtime import alias_execution, chatlog, home_client, render
from fleet_runtime.commands._common import fail, finish
from fleet_runtime.runtime_errors import AliasError, ParameterError, RuntimeErrorBase


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chat",
        help='ChatOps: run an action alias, e.g. fleet-rollout chat "rollout web to batch1"',
    )
    parser.add_argument("message", nargs="?", help="the chat message (command)")
    parser.add_argument("--user", default=None,
                        help="chat user who sends the message (default: the runtime user)")
    parser.add_argument("--channel", default="chatops", help="chat channel (default chatops)")
    parser.add_argument("--transcript", action="store_true",
                        help="print what reached chat (route chatops), then the announcements on"
                        " other routes, and exit")
    parser.add_argument("--no-wait", action="store_true", help="print the ack only")
    finish(parser, main)


def _post(rt: Any, channel: str, user: str, message: str) -> None:
    chatlog.publish(rt.home.path, {"channel": channel, "user": user, "message": message},
                    chatlog.CHAT_ROUTE, transcript_only=True, mask=rt.masker.mask)


def _print_transcript(home: Path) -> None:
    """What reached chat, then the announcements no chat bot receives (other routes)."""
    for entry in chatlog.chat_messages(home):
        who = entry.get("user") or "bot"
        print(f"[{render.ts(entry['ts'])}] #{entry['channel']} {who}: {entry['message']}")
    others = chatlog.announcements(home)
    if others:
        print(f"-- announcements on routes no chat bot listens to (only"
              f" {chatlog.event_name(chatlog.CHAT_ROUTE)} reaches chat):")
        for entry in others:
            print(f"[{render.ts(entry['ts'])}] {entry['event']} #{entry['channel']}:"
                  f" {entry['message']}")


def alias_view(alias: Any) -> Dict[str, Any]:
    return {"name": alias.name, "ref": alias.ref, "pack": alias.pack,
            "action_ref": alias.action_ref, "formats": alias.formats, "ack": alias.ack,
            "result": alias.result, "extra": alias.extra}


def main(args: argparse.Namespace) -> int:
    try:
        if args.transcript:
            _print_transcript(home_client.RuntimeHome(args.home).path)
            return 0
        if not args.message:
            print("ERROR: a message is required", file=sys.stderr)
            return 2
        with home_client.Session(args) as session:
            return _run(session, args)
    except (AliasError, ParameterError) as e:
        return fail(e, 1)
    except RuntimeErrorBase as e:
        return fail(e)


def _run(session: home_client.Session, args: argparse.Namespace) -> int:
    rt = session.rt
    command = args.message.strip()
    chat_user = args.user or rt.user
    _post(rt, args.channel, chat_user, command)
    planned = alias_execution.plan(rt.registry, command, chat_user, rt.home.chatops_user,
                                   args.channel)
    alias = planned.alias
    status = 0
    for run in planned.runs:
        action = run.action
        response = session.submit("run", {"action": action.ref, "parameters": run.parameters,
                                          "context": run.context, "notify": run.notify})
        ex_id = response["id"]
        record = rt.store.get_execution(ex_id)
        view = {"execution": render.public(rt.registry, record), "actionalias": alias_view(alias)}
        if alias.ack.get("enabled", True):
            ack = rt.masker.mask(alias_execution.ack_message(alias, view)
                                 or f"Running {action.ref} (execution {ex_id}).")
            print(ack)
            _post(rt, args.channel, "bot", ack)
        if args.no_wait:
            continue
        final = session.wait(ex_id)
        formatted = alias_execution.result_message(alias_view(alias),
                                                   render.public(rt.registry, final))
        if formatted["enabled"]:
            message = rt.masker.mask(formatted["message"])
            print(message)
            _post(rt, args.channel, "bot", message)
        if final["status"] not in ("succeeded", "paused", "pending"):
            status = 1
        time.sleep(0)
    return status
