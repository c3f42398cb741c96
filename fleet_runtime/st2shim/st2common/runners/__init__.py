"""st2common.runners (shim)."""
