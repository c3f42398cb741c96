"""A Redfish BMC simulator: many BMCs of several vendor personalities in one asyncio process.

It follows each vendor's URIs and quirks (docs/bmc-simulator.md) so the pack's Redfish layer
meets the strictness of real BMCs: pending settings that apply only at a reset (Dell: only with a
scheduled config job), ETags with 412/428, jobs, task monitors, and injectable faults.
"""
