"""Whether a target's address is this server itself, under any spelling: ``127.0.0.1``, ``127.1``,
``2130706433``, ``0x7f000001``, ``[::ffff:127.0.0.1]``, ``localhost``, this host's name or any of
its interfaces' addresses. A target there would have the server's Prometheus scrape the hub's own
``/metrics`` (or Prometheus itself) again under the writer's labels: a copy of every series per target.

A host is resolved as the system resolves it (``getaddrinfo``: the forms above, DNS names), and an
address is this machine's when a socket can be bound to it (the kernel's own answer: loopback,
the unspecified address, every address of every interface)."""

from __future__ import annotations

import ipaddress
import socket


def resolved(host: str) -> list[str]:
    """The addresses ``host`` resolves to ([] when it does not)."""
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return []
    return sorted({str(info[4][0]) for info in found})


def is_this_machine(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine (loopback, unspecified, an interface's)."""
    try:
        address = ipaddress.ip_address(ip.partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if isinstance(address, ipaddress.IPv6Address) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
        return True
    except OSError:
        return False


def pinned(address: str) -> tuple[str | None, list[str]]:
    """(what Prometheus is handed for ``address``, the addresses its host resolves to now): an IP
    literal as it is; a name as the address it resolves to now (None: it resolves to nothing), so
    that what was checked is what is scraped: a name that later resolves to this machine (DNS
    rebinding) cannot turn a target into one of this server's own ports."""
    host, _, port = address.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
        return address, [bare]
    except ValueError:
        pass
    ips = resolved(host)
    if not ips:
        return None, []
    first = sorted(ips, key=lambda ip: ":" in ip)[0]  # IPv4 first
    return (f"[{first}]:{port}" if ":" in first else f"{first}:{port}"), ips


def own_port_problem(address: str, own_ports: frozenset[int], ips: list[str] | None = None) -> str | None:
    """Why ``address`` (host:port) may not be a target: it is one of this server's ports here
    (``ips``: what its host resolves to, where the caller resolved it already)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) not in own_ports:
        return None
    for ip in resolved(host) if ips is None else ips:
        if is_this_machine(ip):
            return (
                f"address {address[:80]!r} is this server's own port {port} ({ip}): the server's Prometheus "
                "scrapes its own services itself; a target there would scrape them again under your labels"
            )
    return None
