"""What StackStorm itself ships, as plain data: runner types and their runner parameters, the
built-in core pack's actions, st2's internal trigger types and its policy types."""
from __future__ import annotations

from typing import Any, Dict, List

RUNNER_PARAM_OVERRIDABLE_ATTRS = ("default", "description", "enum", "immutable", "required")

DEFAULT_INQUIRY_SCHEMA = {
    "title": "response_data",
    "type": "object",
    "properties": {
        "continue": {
            "type": "boolean",
            "description": "Would you like to continue the workflow?",
            "required": True,
        }
    },
}

_TIMEOUT_LOCAL = {
    "default": 60,
    "description": "Action timeout in seconds. Action will get killed if it doesn't finish"
    " in timeout seconds.",
    "type": "integer",
}
_LOCAL_COMMON = {
    "cwd": {"description": "Working directory where the command will be executed in",
            "type": "string"},
    "env": {"description": "Environment variables which will be available to the command",
            "type": "object"},
    "kwarg_op": {"default": "--", "description": "Operator to use in front of keyword args",
                 "type": "string"},
    "sudo": {"default": False, "description": "The command will be executed with sudo.",
             "type": "boolean"},
    "sudo_password": {"default": None, "description": "Sudo password.", "type": "string",
                      "secret": True, "required": False},
    "timeout": _TIMEOUT_LOCAL,
}

# Runner types with their runner parameters (as st2's runner.yaml files define them).
RUNNERS: Dict[str, Dict[str, Any]] = {
    "python-script": {
        "output_key": "result",
        "runner_parameters": {
            "debug": {"description": "Enable runner debug mode.", "type": "boolean",
                      "required": False, "default": False},
            "content_version": {"description": "Git revision of the pack content to use.",
                                "type": "string", "required": False},
            "env": {"description": "Environment variables which will be available to the"
                    " script.", "type": "object"},
            "timeout": {"default": 600, "description": "Action timeout in seconds.",
                        "type": "integer"},
            "log_level": {"description": "Default log level for Python runner actions.",
                          "type": "string", "default": "DEBUG",
                          "enum": ["AUDIT", "CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]},
        },
    },
    "orquesta": {
        "output_key": "output",
        "runner_parameters": {
            "notify": {"type": "array", "description": "List of tasks to trigger notifications"
                       " for.", "uniqueItems": True,
                       "items": {"type": "string", "minLength": 1, "pattern": "^\\w+$"},
                       "default": []},
        },
    },
    "noop": {"output_key": None, "runner_parameters": {}},
    "local-shell-cmd": {
        "output_key": "stdout",
        "runner_parameters": dict(
            {"cmd": {"description": "Arbitrary Linux command to be executed on the host.",
                     "type": "string"}},
            **_LOCAL_COMMON,
        ),
    },
    "local-shell-script": {
        "output_key": "stdout",
        "runner_parameters": dict(
            {"debug": {"description": "Enable runner debug mode.", "type": "boolean",
                       "required": False, "default": False},
             "content_version": {"description": "Git revision of the pack content to use.",
                                 "type": "string", "required": False}},
            **_LOCAL_COMMON,
        ),
    },
    "inquirer": {
        "output_key": "response",
        "runner_parameters": {
            "schema": {"default": DEFAULT_INQUIRY_SCHEMA, "required": True,
                       "description": "A JSON schema that will be used to validate the response"
                       " data", "type": "object"},
            "route": {"default": "", "required": False, "type": "string",
                      "description": "An arbitrary value for allowing rules to route to proper"
                      " notification channel"},
            "roles": {"default": [], "required": False, "type": "array",
                      "description": "A list of roles that are permitted to respond to the"
                      " action (if nothing provided, all are permitted)"},
            "users": {"default": [], "required": False, "type": "array",
                      "description": "A list of usernames that are permitted to respond to the"
                      " action (if nothing provided, all are permitted)"},
            "ttl": {"default": 1440, "required": True, "type": "integer",
                    "description": "Time (in minutes) to wait before timing out the inquiry if"
                    " no response is received"},
        },
    },
    "announcement": {
        "output_key": None,
        "runner_parameters": {
            "experimental": {"description": "Flag to indicate acknowledgment of using"
                             " experimental runner", "type": "boolean", "required": True,
                             "default": False},
            "route": {"description": "The routing_key used to route the message to consumers."
                      " Might be a list of words, delimited by dots.", "type": "string",
                      "default": "general", "maxLength": 255, "minLength": 1},
        },
    },
}
RUNNER_ALIASES = {"orchestra": "orquesta", "run-python": "python-script",
                  "run-local": "local-shell-cmd", "run-local-script": "local-shell-script"}

# The built-in core pack (what `st2 pack list` shows as core), as metadata documents.
BUILTIN_ACTIONS: Dict[str, List[Dict[str, Any]]] = {
    "core": [
        {"name": "noop", "runner_type": "noop", "description": "Action that does nothing",
         "parameters": {}},
        {"name": "echo", "runner_type": "local-shell-cmd",
         "description": "Action that executes the Linux echo command on the localhost.",
         "parameters": {
             "message": {"description": "The message that the command will echo.",
                         "type": "string", "required": True},
             "cmd": {"description": "Arbitrary Linux command to be executed on the local host.",
                     "required": True, "type": "string", "default": 'echo "{{message}}"',
                     "immutable": True},
             "kwarg_op": {"immutable": True},
             "sudo": {"default": False, "immutable": True},
             "sudo_password": {"immutable": True}}},
        {"name": "local", "runner_type": "local-shell-cmd",
         "description": "Action that executes an arbitrary Linux command on the localhost.",
         "parameters": {
             "cmd": {"description": "Arbitrary Linux command to be executed on the local host.",
                     "required": True, "type": "string"},
             "sudo": {"immutable": True}}},
        {"name": "ask", "runner_type": "inquirer",
         "description": "Action for initiating an Inquiry (usually in a workflow)",
         "parameters": {}},
        {"name": "inject_trigger", "runner_type": "python-script",
         "description": "Action which injects a new trigger in the system.",
         "parameters": {
             "trigger": {"type": "string", "description": "Trigger reference (e.g."
                         " mypack.my_trigger).", "required": False},
             "trigger_name": {"type": "string", "description": "Trigger reference.",
                              "required": False},
             "payload": {"type": "object", "description": "Trigger payload."},
             "trace_tag": {"type": "string", "description": "Optional trace tag.",
                           "required": False}}},
    ],
}

# st2's timer units (st2common/constants/triggers.py INTERVAL_PARAMETERS_SCHEMA), in seconds
INTERVAL_UNITS = {"weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
INTERVAL_TIMER = "core.st2.IntervalTimer"

# Trigger types the runtime itself emits (st2's internal trigger types, and the interval timer
# st2timersengine fires).
INTERNAL_TRIGGER_TYPES: Dict[str, Dict[str, Any]] = {
    INTERVAL_TIMER: {
        "description": "Triggers on specified intervals. e.g. every 30s, 1week etc.",
        "payload_schema": {"type": "object", "properties": {
            "executed_at": {"type": "string", "format": "date-time"},
            "schedule": {"type": "object"}}},
    },
    "core.st2.generic.actiontrigger": {
        "description": "Trigger encapsulating the completion of an action execution.",
        "payload_schema": {"type": "object", "properties": {
            "execution_id": {}, "status": {}, "start_timestamp": {}, "action_name": {},
            "action_ref": {}, "runner_ref": {}, "parameters": {}, "result": {}}},
    },
    "core.st2.generic.notifytrigger": {
        "description": "Notification trigger.",
        "payload_schema": {"type": "object", "properties": {
            "execution_id": {}, "status": {}, "start_timestamp": {}, "end_timestamp": {},
            "action_ref": {}, "runner_ref": {}, "channel": {}, "route": {}, "message": {},
            "data": {}}},
    },
    "core.st2.generic.inquiry": {
        "description": "Trigger indicating a new \"inquiry\" has entered \"pending\" status",
        "payload_schema": {"type": "object", "properties": {
            "id": {"type": "string", "description": "ID of the new inquiry.", "required": True},
            "route": {"type": "string", "description": "An arbitrary value for allowing rules"
                      " to route to proper notification channel.", "required": True}},
            "additionalProperties": False},
    },
}

POLICY_TYPES: Dict[str, Dict[str, Any]] = {
    "action.concurrency": {
        "threshold": {"description": "Concurrency threshold.", "type": "integer",
                      "required": True},
        "action": {"description": "Which action to perform on the execution once the"
                   " concurrency threshold has been reached.", "type": "string",
                   "default": "delay", "enum": ["delay", "cancel"]},
    },
    "action.concurrency.attr": {
        "threshold": {"description": "Concurrency threshold.", "type": "integer",
                      "required": True},
        "action": {"description": "Which action to perform on the execution once the"
                   " concurrency threshold has been reached.", "type": "string",
                   "default": "delay", "enum": ["delay", "cancel"]},
        "attributes": {"description": "List of attributes by which to limit the concurrency.",
                       "type": "array", "uniqueItems": True,
                       "items": {"type": "string", "minLength": 1}},
    },
    "action.retry": {
        "retry_on": {"type": "string", "description": "Condition to retry on.",
                     "required": True, "enum": ["failure", "timeout"]},
        "max_retry_count": {"type": "integer", "description": "Maximum number of times to"
                            " retry before giving up.", "required": True, "minimum": 1,
                            "maximum": 5, "default": 2},
        "delay": {"type": "number", "description": "Number of seconds to wait before retrying"
                  " the execution.", "required": False, "minimum": 0, "maximum": 120},
    },
}
