"""Who may approve a batch, and who did: always the authenticated identity.

What StackStorm authenticates (the embedded runtime does the same):
- an execution's `context.user` is the API user who started it; an alias execution run by a chat
  bot also carries `context.api_user`, the chat user the bot speaks for (st2api aliasexecution);
- an inquiry answer: st2 checks the requester against the inquiry's `users` and `roles`, then
  resumes the workflow that asked and records the requester there as `context.resumed_by`
  (st2common services/inquiry.py respond -> services/action.py request_resume).
So `fleet_rollout.respond` checks its caller before it answers, and the batch reads who
answered from the question's workflow (questions.py). A name in the answer counts only when
the authenticated requester is one of the configured chat bot accounts (as st2 trusts a bot's
api_user).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from fleet_rollout.config import PackConfig
from fleet_rollout.errors import ConfigError

CHAT_USER_FIELD = "chat_user"
IRC_MASK = re.compile(r"^([^!@\s]+)![^@\s]+@\S+$")


class ApprovalRefused(ConfigError):
    """This identity may not answer, or who answered cannot be established."""


@dataclass(frozen=True)
class Identity:
    name: str     # the person: the chat user, or the st2 user
    account: str  # the st2 account StackStorm authenticated
    via: str      # "chat" or "api"

    def describe(self) -> str:
        if self.via == "chat":
            return f"{self.name} (chat, through st2 account {self.account})"
        return f"{self.name} (st2 user)"


def inquiry_acl(config: PackConfig) -> Tuple[List[str], List[str]]:
    """`users` and `roles` of the approval questions (core.ask): st2 enforces them on every
    answer. The chat bots' accounts are let through; respond checks the chat user."""
    if not config.approvers:
        return [], list(config.approver_roles)
    users = list(config.approvers) + [u for u in config.chatops_users
                                      if u not in config.approvers]
    return users, list(config.approver_roles)


def require_approvers(config: PackConfig, profile_name: str) -> None:
    """A rollout that needs approvals and names nobody who may give them does not start."""
    if not config.approvers and not config.approver_roles:
        raise ConfigError(f"profile {profile_name} needs approvals but the pack config names no "
                          "approvers and no approver_roles: set one of them")


def chat_name(api_user: str) -> str:
    """The chat user's name as approvers are listed: err-stackstorm on IRC sends the whole
    mask `nick!ident@host`; the nick is the name (other chat backends send the name)."""
    match = IRC_MASK.match(api_user)
    return match.group(1) if match else api_user


def caller(execution: Mapping[str, Any]) -> Identity:
    """Who started an execution, from its record (context set by StackStorm): the st2 account
    (`context.user`) and the chat user an alias execution named (`api_user`: its own, or, for a
    task of a workflow an alias started, the root's, which StackStorm keeps in the `parent`
    chain of the context). StackStorm gives every task of a workflow its workflow's user; a
    chain that names another account below is not StackStorm's (a caller can pass a
    `context` of its own to POST /executions) and counts as the account alone."""
    ctx = execution.get("context") or {}
    account = str(ctx.get("user") or "")
    chat: Any = None
    level: Any = ctx
    depth = 0
    while isinstance(level, Mapping) and depth < 64:
        if level.get("user") is not None and str(level.get("user")) != account:
            return Identity(account, account, "api")
        if level.get("api_user"):
            chat = level.get("api_user")
        level = level.get("parent")
        depth += 1
    if chat:
        return Identity(chat_name(str(chat)), account, "chat")
    return Identity(account, account, "api")


def trusted(who: Identity, config: PackConfig) -> Identity:
    """The identity to record: a chat user only when a configured chat bot account named it,
    else the st2 account itself."""
    if who.via == "chat" and who.account not in config.chatops_users:
        return Identity(who.account, who.account, "api")
    return who


class NotAnOperator(ConfigError):
    """This identity may not start, abort, roll back or restore."""


def require_operator(who: Identity, config: PackConfig, what: str) -> None:
    """Only the pack config's `operators` (st2 users, or chat users through a chatops_users
    account) plan, start, abort, roll back and restore, on StackStorm with or without RBAC."""
    if not config.operators:
        raise NotAnOperator(f"Refused: {what} needs an operator and the pack config names no "
                            "operators (set operators: the st2 users and chat users who may "
                            "plan, start, abort, roll back and restore)")
    who = trusted(who, config)
    if not who.name or who.name not in config.operators:
        raise NotAnOperator(f"Refused: {who.name or 'an unknown caller'} is not an operator "
                            f"(operators: {', '.join(config.operators)}); {what} is refused")


def check_may_answer(who: Identity, config: PackConfig) -> None:
    if not who.name:
        raise ApprovalRefused("who answers is not known (no user in the execution's context)")
    listed = ", ".join(config.approvers) or "none"
    if who.via == "chat":
        if who.account not in config.chatops_users:
            raise ApprovalRefused(
                f"chat answers come through st2 account {who.account!r}, which is not in the "
                "pack config chatops_users")
        if who.name not in config.approvers:
            raise ApprovalRefused(f"{who.name} is not an approver (approvers: {listed}); "
                                  "chat users are checked against the pack config approvers")
        return
    if config.approvers and who.name not in config.approvers:
        raise ApprovalRefused(f"{who.name} is not an approver (approvers: {listed})")
    if not config.approvers and not config.approver_roles:
        raise ApprovalRefused("the pack config names no approvers and no approver_roles")
    # approver_roles: StackStorm checks the answering account's roles on the answer itself


def answer_author(account: str, response: Mapping[str, Any], config: PackConfig,
                  inquiry_id: str = "?") -> Identity:
    """Who answered a question: `account`, the requester StackStorm recorded when the answer
    resumed the question's workflow (`resumed_by`), or the chat user a chat bot account
    answered for."""
    if not account:
        raise ApprovalRefused("who answered cannot be established: StackStorm recorded no "
                              f"requester (resumed_by) for the answer to inquiry {inquiry_id}")
    if account in config.chatops_users:
        chat = response.get(CHAT_USER_FIELD)
        if not isinstance(chat, str) or not chat:
            raise ApprovalRefused(f"answered by chat bot account {account!r} without naming "
                                  "the chat user")
        who = Identity(chat, account, "chat")
    else:
        who = Identity(account, account, "api")
    check_may_answer(who, config)
    return who
