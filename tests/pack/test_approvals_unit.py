"""Who may approve and who did (fleet_rollout.approvals), on execution records shaped like
StackStorm's API returns them (context.user / api_user / resumed_by)."""
from __future__ import annotations

import pytest

from fleet_rollout import approvals, inquiries
from fleet_rollout.config import load_pack_config
from fleet_rollout.errors import ConfigError


def _config(**extra):
    return load_pack_config({"credentials": {"default": {"username": "u", "password": "p"}},
                             **extra})


def test_inquiry_acl_lets_chat_bots_through_only_with_named_approvers():
    cfg = _config(approvers=["alice", "bob"], chatops_users=["chatops_bot"],
                  approver_roles=["sre"])
    assert approvals.inquiry_acl(cfg) == (["alice", "bob", "chatops_bot"], ["sre"])
    roles_only = _config(approver_roles=["sre"], chatops_users=["chatops_bot"])
    assert approvals.inquiry_acl(roles_only) == ([], ["sre"])


def test_a_rollout_needing_approval_needs_approvers():
    with pytest.raises(ConfigError, match="names no approvers"):
        approvals.require_approvers(_config(), "home-snoop")
    approvals.require_approvers(_config(approvers=["alice"]), "home-snoop")
    approvals.require_approvers(_config(approver_roles=["sre"]), "home-snoop")


def test_config_rejects_malformed_name_lists():
    with pytest.raises(ConfigError, match="approvers must be a list of names"):
        _config(approvers=[{"name": "alice"}])
    assert _config(approvers="alice").approvers == ["alice"]


def test_caller_is_the_chat_user_behind_an_alias_execution():
    chat = approvals.caller({"context": {"user": "chatops_bot", "api_user": "alice"}})
    assert (chat.name, chat.account, chat.via) == ("alice", "chatops_bot", "chat")
    cli = approvals.caller({"context": {"user": "bob"}})
    assert (cli.name, cli.account, cli.via) == ("bob", "bob", "api")


def test_only_approvers_may_answer_on_every_path():
    cfg = _config(approvers=["alice"], chatops_users=["chatops_bot"])
    approvals.check_may_answer(approvals.Identity("alice", "alice", "api"), cfg)
    approvals.check_may_answer(approvals.Identity("alice", "chatops_bot", "chat"), cfg)
    with pytest.raises(approvals.ApprovalRefused, match="mallory is not an approver"):
        approvals.check_may_answer(approvals.Identity("mallory", "mallory", "api"), cfg)
    with pytest.raises(approvals.ApprovalRefused, match="mallory is not an approver"):
        approvals.check_may_answer(approvals.Identity("mallory", "chatops_bot", "chat"), cfg)
    with pytest.raises(approvals.ApprovalRefused, match="not in the pack config chatops_users"):
        approvals.check_may_answer(approvals.Identity("alice", "somebot", "chat"), cfg)
    roles_only = _config(approver_roles=["sre"], chatops_users=["chatops_bot"])
    with pytest.raises(approvals.ApprovalRefused, match="chat users are checked"):
        approvals.check_may_answer(approvals.Identity("alice", "chatops_bot", "chat"),
                                   roles_only)


def test_answer_author_is_the_authenticated_requester_not_a_typed_name():
    cfg = _config(approvers=["alice", "bob"], chatops_users=["chatops_bot"])
    # a human answered directly: the typed chat_user is ignored, the requester counts
    who = approvals.answer_author("bob", {"approved": True, "chat_user": "alice"}, cfg, "i1")
    assert (who.name, who.via) == ("bob", "api")
    # the chat bot answered for a chat user
    who = approvals.answer_author("chatops_bot", {"approved": True, "chat_user": "alice"}, cfg)
    assert (who.name, who.account, who.via) == ("alice", "chatops_bot", "chat")
    with pytest.raises(approvals.ApprovalRefused, match="without naming the chat user"):
        approvals.answer_author("chatops_bot", {}, cfg)
    with pytest.raises(approvals.ApprovalRefused, match="recorded no requester .* inquiry i1"):
        approvals.answer_author("", {"approved": True}, cfg, "i1")
    with pytest.raises(approvals.ApprovalRefused, match="eve is not an approver"):
        approvals.answer_author("eve", {"approved": True}, cfg)


def test_response_names_the_chat_user_only_for_chat_answers():
    props = {"approved": {}, "rollout_id": {}, "chat_user": {}}
    chat = approvals.Identity("alice", "chatops_bot", "chat")
    api = approvals.Identity("bob", "bob", "api")
    assert inquiries.build_response("r1", "approve", props, chat) == {
        "approved": True, "rollout_id": "r1", "chat_user": "alice"}
    assert inquiries.build_response("r1", "reject", props, api) == {
        "approved": False, "rollout_id": "r1"}
    with pytest.raises(ConfigError, match="cannot answer"):
        inquiries.build_response("r1", "extend", props, api)


def test_an_irc_mask_from_err_stackstorm_is_checked_by_its_nick():
    cfg = _config(approvers=["sre-alice"], chatops_users=["chatops_bot"])
    who = approvals.caller({"context": {"user": "chatops_bot",
                                        "api_user": "sre-alice!~sre-alice@127.0.0.1"}})
    assert (who.name, who.via) == ("sre-alice", "chat")
    approvals.check_may_answer(who, cfg)
    other = approvals.caller({"context": {"user": "chatops_bot",
                                          "api_user": "mallory!~sre-alice@127.0.0.1"}})
    with pytest.raises(approvals.ApprovalRefused, match="mallory is not an approver"):
        approvals.check_may_answer(other, cfg)
    assert approvals.chat_name("U024BE7LH") == "U024BE7LH"  # Slack ids stay as they are
    assert approvals.chat_name("a!b") == "a!b"  # not a mask: kept whole
