"""Fixture packs for the adversarial runtime tests: files written from indented text, a pack.yaml,
an announcement action (the runner chat posts go through)."""
from __future__ import annotations

import textwrap
from pathlib import Path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def write_pack_yaml(pack: Path, ref: str, description: str) -> None:
    write(pack / "pack.yaml", f"""
        ref: {ref}
        name: {ref}
        description: {description}
        version: 0.1.0
        author: t
        email: t@example.com
        """)


def write_announce_action(pack: Path, name: str, route: str, message: str) -> None:
    """An st2 announcement action posting `message` (YAML scalar text) on `route`."""
    write(pack / "actions" / f"{name}.yaml", f"""
        name: {name}
        runner_type: announcement
        parameters:
          experimental:
            immutable: true
            default: true
          route:
            default: {route}
          channel:
            type: string
            default: ops
          message:
            type: string
            default: {message}
        """)
