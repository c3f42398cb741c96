"""Embedded StackStorm-compatible runtime and the `fleet-rollout` CLI.

Runs the pack's own metadata, actions and Orquesta workflows on one machine. The pack never
imports this package.
"""
