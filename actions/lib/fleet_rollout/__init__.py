"""fleet_rollout domain library: everything the pack's actions do, as plain Python.

No StackStorm import anywhere in this package; it must run on Python 3.8-3.11.
"""

__version__ = "0.1.0"
