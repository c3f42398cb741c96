"""Whether a host's OS can answer yet, as its BMC shows it: the host side is an Ansible run
(about 0.6 CPU-s on the controller, whether the host answers or not), a look at the BMC one GET.
A wait for a rebooting host asks the BMC first and the host only when it may answer.

    DOWN     power not On, or the system is in POST (BootProgress.LastState before
             SystemHardwareInitializationComplete, HPE PostState InPost/PowerOff): the OS cannot
             answer
    BOOTING  POST done, the OS is booting (SystemHardwareInitializationComplete, OSBootStarted):
             it may answer soon; many BMCs never report more than this
    UP       BootProgress.LastState OSRunning
    UNKNOWN  the BMC reports nothing that decides (no BootProgress, "None", OEM) or did not
             answer: ask the host, as without a BMC

Only DOWN keeps the host from being asked; the host's own answer (its boot id) stays what
decides that the OS is back.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from fleet_rollout.redfish import power as rf_power

DOWN = "down"
BOOTING = "booting"
UP = "up"
UNKNOWN = "unknown"

IN_POST = ("PrimaryProcessorInitializationStarted", "BusInitializationStarted",
           "MemoryInitializationStarted", "SecondaryProcessorInitializationStarted",
           "PCIResourceConfigStarted", "SetupEntered")
OS_BOOTING = ("SystemHardwareInitializationComplete", "OSBootStarted")

# what a look at the BMC says (one of the states above)
Look = Callable[[], str]


def os_state(marker: rf_power.BootMarker) -> str:
    if marker.power_state is not None and marker.power_state != "On":
        return DOWN
    if marker.post_state is not None and marker.post_state not in rf_power.HP_POST_DONE:
        return DOWN
    if marker.last_state in IN_POST:
        return DOWN
    if marker.last_state == "OSRunning":
        return UP
    if marker.last_state in OS_BOOTING or marker.post_state is not None:
        return BOOTING
    return UNKNOWN


def look_with(session: Any, bmc: Any) -> Look:
    """A look through an open RedfishSession and its BmcContext."""
    def look() -> str:
        try:
            body = session.get(bmc.system_uri).body
            return os_state(rf_power.boot_marker(body, bmc.personality.post_state_oem,
                                                 bmc.host, bmc.system_uri))
        except Exception:  # a BMC that does not answer decides nothing: ask the host
            return UNKNOWN
    return look


@contextlib.contextmanager
def lazy_look(open_session: Callable[[], Any],
              discover: Callable[[Any], Any]) -> Iterator[Look]:
    """A look that opens its session (open_session() -> a RedfishSession context manager,
    discover(session) -> BmcContext) at the first use and closes it at the end; a session that
    cannot be opened makes every look UNKNOWN."""
    with contextlib.ExitStack() as stack:
        opened: dict = {}

        def look() -> str:
            if "look" not in opened:
                try:
                    session = stack.enter_context(open_session())
                    opened["look"] = look_with(session, discover(session))
                except Exception:
                    opened["look"] = lambda: UNKNOWN
            result: str = opened["look"]()
            return result

        yield look


def gate_boot_id(look: Optional[Look], ask: Callable[[], Optional[str]]) -> Optional[str]:
    """The host's boot id through `ask` (an Ansible run), skipped (None: no answer) while the
    BMC shows the OS cannot answer."""
    if look is not None and look() == DOWN:
        return None
    return ask()
