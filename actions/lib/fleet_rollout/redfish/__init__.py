"""Redfish BIOS change path: a safe client, vendor personalities, registry checks, operations.

Modules, one idea each:
  client         safe wrapper over python-redfish-library (TLS, timeouts, retries, re-login)
  registry       BIOS attribute registries and their dependencies
  personalities  logical knobs -> vendor attributes/values; vendor detection
  discovery      find system/BIOS/settings/manager URIs and the registry of one BMC
  bios           snapshot, plan, stage, commit, restore targets
  power          reset (exactly once; BMC or host-side evidence) and wait_applied
  operations     whole operations per host (what actions call)
"""
