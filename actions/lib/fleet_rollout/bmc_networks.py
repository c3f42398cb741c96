"""Where BMC credentials may go: the networks the pack config allows BMCs in.

An inventory names each host's BMC address; the pack sends a BMC password there. So an address
is used only when it falls in the pack config's `bmc_networks` (and, for a credential that lists
its own `networks`, in those too): an inventory entry pointing elsewhere is refused, naming host
and address, before any request. A host name is resolved and every address it resolves to must
be inside; one outside (or a name that does not resolve) refuses the host.
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Any, List, Sequence, Union
from urllib.parse import urlsplit

from fleet_rollout.errors import ConfigError

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def parse_networks(value: Any, where: str) -> List[Network]:
    """A list of CIDR networks (`10.20.0.0/16`, `fd00::/8`; a lone address is a /32 or /128)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"pack config: {where} must be a list of networks (e.g. 10.20.0.0/16)")
    networks: List[Network] = []
    for item in value:
        try:
            networks.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError:
            raise ConfigError(f"pack config: {where}: {item!r} is not a network "
                              "(e.g. 10.20.0.0/16)") from None
    return networks


def bmc_host(address: str) -> str:
    """The host part of a BMC address (scheme://host[:port])."""
    return urlsplit(address if "://" in address else "https://" + address).hostname or ""


def resolved(host: str) -> List[Address]:
    """Every address `host` stands for: itself when it is one, else what it resolves to."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    found: List[Address] = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]
        address = ipaddress.ip_address(text)
        if address not in found:
            found.append(address)
    return found


def inside(address: Address, networks: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def check_bmc_address(host_name: str, address: str, allowed: Sequence[Network],
                      credential: str, credential_networks: Sequence[Network]) -> None:
    """ConfigError unless every address of the BMC is inside `allowed` (and inside
    `credential_networks` when the credential lists any)."""
    name = bmc_host(address)
    if not allowed:
        raise ConfigError(f"BMC {address}: the pack config allows no BMC "
                          "network; list the networks your BMCs are in as bmc_networks "
                          "(e.g. [10.20.0.0/16])", host_name)
    addresses = resolved(name)
    if not addresses:
        raise ConfigError(f"BMC {address}: {name!r} does not resolve to an "
                          "address; nothing is sent to it", host_name)
    for ip in addresses:
        if not inside(ip, allowed):
            raise ConfigError(f"BMC {address} ({ip}) is outside the pack "
                              "config's bmc_networks "
                              f"({', '.join(str(n) for n in allowed)}); nothing is sent to it",
                              host_name)
        if credential_networks and not inside(ip, credential_networks):
            raise ConfigError(f"BMC {address} ({ip}) is outside the networks "
                              f"of credential {credential!r} "
                              f"({', '.join(str(n) for n in credential_networks)}); its "
                              "password is not sent there", host_name)
