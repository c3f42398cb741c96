"""CLI sub-commands: every module here defines `register(subparsers)`.

Each module adds its own sub-command(s) with `subparsers.add_parser(...)` and sets
`func=<callable(args) -> int>` as the parser default. The dispatcher discovers the modules, so
adding a command never means editing a shared file.
"""
