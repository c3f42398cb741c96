"""The lab's drop model: how fast a server's packet receiver runs under the BIOS settings in effect.

A small pure function, shared by the `vm` backend (it passes the rate to the guest's UDP receiver
on the kernel command line) and the `sim` backend (it can compute drops from the same numbers).
See docs/lab.md for the numbers and why they look like this.
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

# Packets per second the guest's receiver processes, by snoop mode (the lab's stand-in for the
# effect the CDN saw: Home Snoop handles far more packets per second than Early Snoop).
SNOOP_RATES: Dict[str, int] = {"home": 4000, "cod": 3500, "osb": 3200, "early": 3000}

# A deliberately bad BIOS setting the lab BMC offers so that a canary can regress on purpose.
SLOWDOWN_ATTRIBUTE = "LabReceiveSlowdown"
SLOWDOWN_FACTOR = 4

_TRUE = {"enabled", "true", "yes", "on", "1"}


def slowdown_active(extra: Optional[Mapping[str, str]]) -> bool:
    """True if the BIOS attributes in effect switch the lab's deliberate slowdown on."""
    value = (extra or {}).get(SLOWDOWN_ATTRIBUTE)
    return str(value).strip().lower() in _TRUE if value is not None else False


def receive_rate(snoop_mode: str, node_interleaving: str = "disabled",
                 extra: Optional[Mapping[str, str]] = None) -> int:
    """Packets per second the receiver reads with these BIOS settings in effect.

    snoop_mode: early | home | cod | osb; node_interleaving: enabled | disabled (no effect on the
    rate in this model); extra: raw BIOS attributes, `LabReceiveSlowdown: Enabled` divides the
    rate by 4.
    """
    mode = str(snoop_mode).strip().lower()
    if mode not in SNOOP_RATES:
        raise ValueError(f"snoop_mode {snoop_mode!r}: allowed values are "
                         f"{', '.join(sorted(SNOOP_RATES))}")
    if str(node_interleaving).strip().lower() not in ("enabled", "disabled"):
        raise ValueError(f"node_interleaving {node_interleaving!r}: allowed values are "
                         "enabled, disabled")
    rate = SNOOP_RATES[mode]
    if slowdown_active(extra):
        rate //= SLOWDOWN_FACTOR
    return max(1, int(rate * rate_scale()))


RATE_SCALE_ENV = "FLEET_LAB_RATE_SCALE"


def rate_scale() -> float:
    """A lab-wide factor on every rate (the lab sets it; < 1 saves CPU on small machines: the
    offered traffic is scaled alike, so the drop fractions stay the same)."""
    try:
        value = float(os.environ.get(RATE_SCALE_ENV, "1") or 1)
    except ValueError:
        return 1.0
    return value if 0 < value <= 1 else 1.0


def expected_drop_fraction(offered_pps: float, rate_pps: float) -> float:
    """Steady-state share of packets dropped when `offered_pps` arrive at a `rate_pps` reader.

    The receive buffer absorbs short bursts only, so over a long window the reader keeps
    `rate_pps` and the rest is dropped (and counted by the kernel as UDP RcvbufErrors).
    """
    if offered_pps <= 0:
        return 0.0
    return max(0.0, 1.0 - float(rate_pps) / float(offered_pps))
