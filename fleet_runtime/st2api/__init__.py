"""StackStorm's REST API served by the embedded runtime, so the real `st2` CLI and chat bots
(err-stackstorm) drive it as they drive StackStorm.

One loopback port carries what st2 splits over three services: `/auth/v1` (st2auth: tokens
from a flat file of users, like st2's flat_file backend), `/api/v1` (st2api: actions,
executions, inquiries, keys, aliases, API keys) and `/stream/v1` (st2stream: server-sent events).

Modules: users (the flat file), credentials (tokens and API keys), http (server, routing,
auth), views (records as st2's API models), executions / inquiries / keys / aliases / catalog
(the resources), stream (events), service (wiring it to a runtime).
"""
