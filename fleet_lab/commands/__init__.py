"""The lab's `fleet-rollout` sub-commands (`lab`, `bmc-sim`): each module defines
`register(subparsers)`, found by the runtime's CLI through the `fleet_rollout.commands` entry
points (pyproject.toml), so the runtime never imports the lab."""
