"""Minimal `st2common` shim for running pack actions without StackStorm (fleet_runtime)."""

__version__ = "3.9.0+fleet-runtime-shim"
