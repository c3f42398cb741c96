"""Ansible plugins of the pack (loaded by Ansible from their directories, not imported)."""
