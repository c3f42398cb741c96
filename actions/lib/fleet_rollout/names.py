"""What a caller may pass: ids and names, checked against strict patterns before anything is
read or changed. The pack's action metadata carries the same patterns (StackStorm checks them
first); these checks are for every other way in (the library, the runtime's CLI, tests).

Values are data, never paths, templates or Ansible patterns: a rollout id becomes a datastore key
prefix and a directory name, a host name an exact Ansible --limit entry, a profile name a file
in the pack's profiles/ directory.
"""
from __future__ import annotations

import re

from fleet_rollout.errors import ConfigError

# Patterns end with \Z, not $: `$` also matches before a final newline ("abc\n" would pass),
# in Python's re and in the jsonschema st2 validates parameters with.

ROLLOUT_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,95}\Z"
# Ansible host patterns over the pack config's inventory: names, groups, `*`, `:` `,` (union),
# `!` (exclusion), `&` (intersection); never `@file`, `~regex` or `[slices]`.
TARGETS_PATTERN = r"^[A-Za-z0-9_.*:,!&-]{1,512}\Z"

_ROLLOUT_ID = re.compile(ROLLOUT_ID_PATTERN)
_TARGETS = re.compile(TARGETS_PATTERN)


def _shown(value: object) -> str:
    """A refused value, shortened and with template markers cut: never echo a template back."""
    text = str(value)
    if any(mark in text for mark in ("{{", "{%", "{#")):
        return "(a template: values are data, never templates)"
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def check_rollout_id(value: object, where: str = "rollout_id") -> str:
    if not isinstance(value, str) or not _ROLLOUT_ID.match(value):
        raise ConfigError(f"{where}: {_shown(value)} is not a rollout id (lower-case letters, "
                          "digits and dashes, at most 96)")
    return value


def check_targets(value: object, where: str = "targets") -> str:
    if not isinstance(value, str) or not _TARGETS.match(value):
        raise ConfigError(f"{where}: {_shown(value)} is not an inventory pattern (host and group "
                          "names with * : , ! &; no @file, ~regex or [slices])")
    return value
