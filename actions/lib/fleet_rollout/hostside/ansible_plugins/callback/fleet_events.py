"""Ansible stdout callback `fleet_events`: one JSON line per host result, to a file.

The pack's runs (fleet_rollout.hostside.playbook_process) make it their stdout callback and
name the file in FLEET_ROLLOUT_EVENTS. Each line is
    {"event": "runner_on_ok" | "runner_on_failed" | "runner_on_unreachable",
     "event_data": {"host": ..., "task": ..., "ignore_errors": ..., "res": {...}}}
with only the result keys the pack reads (a no_log task's result arrives censored by Ansible).
Skipped hosts and loop items write nothing: the pack's playbooks have no loops, and a skipped
task says nothing about a host. With FLEET_ROLLOUT_EVENTS_ECHO=1 a line per result also goes
to stdout, for a person watching.

Loaded by Ansible (ANSIBLE_CALLBACK_PLUGINS), never imported by the pack; it reads its
environment when a run creates it, not when it is imported.
"""
from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: fleet_events
    type: stdout
    short_description: one JSON line per host result, to the file FLEET_ROLLOUT_EVENTS names
    description:
      - The fleet_rollout pack's per-host results, read back by the pack after the run.
"""

RESULT_KEYS = ("changed", "failed", "unreachable", "rc", "msg", "stdout", "stderr",
               "module_stderr", "module_stdout", "censored")


def _plain(value):
    """A JSON-safe copy (Ansible's tagged strings and other types as their text)."""
    return json.loads(json.dumps(value, default=str))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "fleet_events"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ.get("FLEET_ROLLOUT_EVENTS")
        self._out = open(path, "a", encoding="utf-8") if path else None
        self._echo = os.environ.get("FLEET_ROLLOUT_EVENTS_ECHO") == "1"

    def _emit(self, kind, result, ignore_errors=False):
        res = getattr(result, "result", None)
        if res is None:  # ansible-core before 2.19
            res = result._result
        host = (getattr(result, "host", None) or result._host).get_name()
        task = getattr(result, "task", None) or result._task
        data = {key: res[key] for key in RESULT_KEYS if key in res}
        facts = res.get("ansible_facts") or {}
        if "fleet_result" in facts:
            data["ansible_facts"] = {"fleet_result": facts["fleet_result"]}
        line = {"event": kind, "event_data": {
            "host": host, "task": task.get_name(), "ignore_errors": bool(ignore_errors),
            "res": _plain(data)}}
        text = json.dumps(line, sort_keys=True)
        if self._out is not None:
            self._out.write(text + "\n")
            self._out.flush()
        if self._echo:
            self._display.display(f"{kind[len('runner_on_'):]}: [{host}] {task.get_name()}")

    def v2_runner_on_ok(self, result):
        self._emit("runner_on_ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._emit("runner_on_failed", result, ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._emit("runner_on_unreachable", result)

    def v2_playbook_on_stats(self, stats):
        # the end of one playbook: a run may have more (drain.yml, then drain_command.yml), so
        # the file stays open (every line is flushed as written; the process's exit closes it)
        if self._out is not None:
            self._out.flush()
