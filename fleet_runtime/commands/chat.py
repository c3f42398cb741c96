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

from fleet_runtime import aliases, chatlog, client, params, render, st2ctx, templating
from fleet_runtime.commands._common import fail, finish
from fleet_runtime.errors import AliasError, ParameterError, RuntimeErrorBase

DEFAULT_RESULT_TEMPLATE = """Action {{ execution.action.ref }} completed.
status : {{ execution.status }}
execution: {{ execution.id }}
{% if execution.result is mapping %}{% for key, value in execution.result.items() %}
{% if key in ['result', 'stdout', 'stderr', 'exit_code', 'return_code', 'output', 'errors']
   and value not in [none, ''] %}{{ key }} : {{ value | to_json_string if value is not string
   else value }}
{% endif %}{% endfor %}{% endif %}"""


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


def _post(home: Path, channel: str, user: str, message: str) -> None:
    chatlog.publish(home, {"channel": channel, "user": user, "message": message},
                    chatlog.CHAT_ROUTE)


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
            _print_transcript(client.RuntimeHome(args.home).path)
            return 0
        if not args.message:
            print("ERROR: a message is required", file=sys.stderr)
            return 2
        with client.Session(args) as session:
            return _run(session, args)
    except (AliasError, ParameterError) as e:
        return fail(e, 1)
    except RuntimeErrorBase as e:
        return fail(e)


def _run(session: client.Session, args: argparse.Namespace) -> int:
    rt = session.rt
    command = args.message.strip()
    chat_user = args.user or rt.user
    home = rt.home.path
    _post(home, args.channel, chat_user, command)
    pattern = aliases.get_matching_alias(command, rt.registry.aliases)
    alias = pattern["alias"]
    extracted = aliases.extract_parameters(pattern["representation"], command,
                                           match_multiple=pattern["match_multiple"])
    runs = extracted if isinstance(extracted, list) else [extracted]
    # st2api aliasexecution: the bot's st2 account runs it, for the chat user (api_user)
    context = st2ctx.alias_context(alias.ref, alias.name, chat_user, rt.home.chatops_user,
                                   args.channel)
    if alias.immutable_parameters:
        kv = {"st2kv": templating.kv_context(chat_user)}
        kv.update(context)
        rendered = templating.render_values(alias.immutable_parameters, kv) or {}
        for run_params in runs:
            overridden = [p for p in alias.immutable_parameters if p in run_params]
            if overridden:
                raise ParameterError("Immutable arguments cannot be overriden: "
                                     + ",".join(overridden))
            run_params.update(rendered)
    action = rt.registry.action(alias.action_ref)
    notify = {"on-complete": {"routes": [args.channel],
                              "data": {"user": chat_user, "source_channel": args.channel}}}
    status = 0
    for run_params in runs:
        run_params = {k: v for k, v in run_params.items() if v is not None}
        run_params = params.cast_params(action, run_params,
                                        overrides={"array": params.cast_array_from_alias})
        response = session.submit("run", {"action": action.ref, "parameters": run_params,
                                          "context": context, "notify": notify})
        ex_id = response["id"]
        record = rt.store.get_execution(ex_id)
        view = {"execution": render.public(rt.registry, record), "actionalias": alias_view(alias)}
        if alias.ack.get("enabled", True):
            if alias.ack.get("format"):
                try:
                    ack = templating.render(alias.ack["format"], view)
                except Exception as e:
                    ack = f'Cannot render "format" in field "ack" for alias. {e}'
            else:
                ack = f"Running {action.ref} (execution {ex_id})."
            print(ack)
            _post(home, args.channel, "bot", ack)
        if args.no_wait:
            continue
        final = session.wait(ex_id)
        if alias.result.get("enabled", True):
            view = {"execution": render.public(rt.registry, final), "alias": alias_view(alias),
                    "six": None}
            template = alias.result.get("format") or DEFAULT_RESULT_TEMPLATE
            try:
                message = templating.render(template, view, allow_undefined=True).strip()
            except Exception as e:
                message = f"Cannot render result format of alias {alias.ref}: {e}"
            print(message)
            _post(home, args.channel, "bot", message)
        if final["status"] not in ("succeeded", "paused", "pending"):
            status = 1
        time.sleep(0)
    return status
