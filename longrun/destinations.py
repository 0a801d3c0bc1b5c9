"""The destination rule: where a run may make the worker connect. One rule for everything
that leaves the worker for a run (`http_request`, webhooks, the sandbox's egress proxy,
stdio MCP servers with network), decided by the address the connection goes to.

- An allow-list entry names a host and its port: `api.example.com:443`,
  `*.example.com:443` (any name below example.com), `10.0.0.5:8080`, `[::1]:8100`. A name
  off the list is refused before anything is resolved.
- Every address a name resolves to is checked. Loopback, link-local, private (RFC 1918,
  ULA, shared), unspecified, multicast and reserved addresses, also written as IPv4-mapped,
  6to4, Teredo or NAT64 IPv6, are refused unless an entry names that address, or the name
  itself (not a wildcard), with the port.
- longrun's own services and Temporal's (`Settings.own_services`, with
  `LONGRUN_DENIED_DESTINATIONS`) are refused by address even when listed.

This module decides; `activities/tools/destinations.py` resolves names once and connects
to the address that was checked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_SETTING = "LONGRUN_HTTP_ALLOW_HOSTS"
DENY_SETTING = "LONGRUN_DENIED_DESTINATIONS"
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
ANY_LOCAL = ipaddress.IPv4Address("0.0.0.0")  # in own-service maps: every address of this host
SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT: private in practice


@dataclass(frozen=True)
class Entry:
    """One `host:port` of a destination list; `port` None is every port (deny lists only)."""

    host: str  # a lower-case name, `*.` and a suffix, or an address without brackets
    port: int | None

    @property
    def wildcard(self) -> bool:
        """Whether the entry names every name below a suffix."""
        return self.host.startswith("*.")

    def names(self, host: str, port: int) -> bool:
        """Whether the entry covers `host` (lower case) at `port`."""
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{'*' if self.port is None else self.port}"


def parse_entry(text: str, *, any_port: bool = False) -> Entry:
    """An entry from `host:port` (`[v6]:port` for IPv6; `host:*` where `any_port`).
    Raises ValueError with what is wrong."""
    text = text.strip().lower()
    host, colon, port = text.rpartition(":")
    if not colon or not host or (":" in host and not host.startswith("[")):
        example = "api.example.com:443" if not any_port else "temporal-history:*"
        raise ValueError(
            f"'{text}' names no port: an entry is host:port, such as {example} "
            "([v6 address]:port for IPv6)"
        )
    host = host.removeprefix("[").removesuffix("]") if host.startswith("[") else host
    if port == "*" and any_port:
        return Entry(host, None)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{text}' has no valid port (1-65535)")
    body = host.removeprefix("*.")
    if not body or "*" in body or "/" in body or " " in body:
        raise ValueError(f"'{text}' is not a host name or address")
    return Entry(host, int(port))


def address_of(host: str) -> IPAddress | None:
    """`host` as an address if it is one (brackets and an IPv6 zone allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), or itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def reserved_kind(address: IPAddress) -> str | None:
    """What kind of non-public address this is ("loopback", "private", …), or None."""
    address = embedded_ipv4(address)
    kinds = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private or address in SHARED),
        ("reserved", address.is_reserved or not address.is_global),
    )
    return next((kind for kind, hit in kinds if hit), None)


def name_refusal(allowed: Iterable[Entry], host: str, port: int) -> str | None:
    """Why `host:port` is off the allow-list, or None; decided before anything resolves."""
    entries = list(allowed)
    if any(entry.names(host.lower(), port) for entry in entries):
        return None
    listed = ", ".join(map(str, entries)) or "nothing"
    return (
        f"'{pair(host, port)}' is not an allowed destination (allowed: {listed}); "
        f"add it to {ALLOW_SETTING} as host:port to allow it"
    )


def own_service(
    own: Mapping[tuple[IPAddress, int | None], str],
    address: IPAddress,
    port: int,
    is_local: Callable[[IPAddress], bool],
) -> str | None:
    """What of longrun's or Temporal's `address:port` is, or None. `own` maps addresses and
    ports (None: every port) to what is there; ANY_LOCAL stands for every address of this
    host (a service on loopback or on every address answers on each of them), which
    `is_local` recognises."""
    address = embedded_ipv4(address)
    keys = [(address, port), (address, None)]
    if is_local(address):
        keys += [(ANY_LOCAL, port), (ANY_LOCAL, None)]
    return next((own[key] for key in keys if key in own), None)


def address_refusal(
    allowed: Iterable[Entry],
    own: Mapping[tuple[IPAddress, int | None], str],
    host: str,
    port: int,
    address: IPAddress,
    is_local: Callable[[IPAddress], bool],
) -> str | None:
    """Why a connection to `address:port`, reached by the name `host`, is refused, or None
    (`own` and `is_local` as `own_service` takes them)."""
    target = pair(str(address), port)
    what = own_service(own, address, port, is_local)
    if what is not None:
        return (
            f"'{pair(host, port)}' ({target}) is {what}, which runs never reach, "
            f"whatever {ALLOW_SETTING} says"
        )
    kind = reserved_kind(address)
    if kind is None:
        return None
    exact = {host.lower(), str(address), str(embedded_ipv4(address))}
    if any(not e.wildcard and e.port == port and e.host in exact for e in allowed):
        return None
    return (
        f"'{pair(host, port)}' resolves to {target}, a {kind} address, which runs reach only "
        f"when {ALLOW_SETTING} names that address or name with its port (a wildcard is not "
        "enough)"
    )


def early_refusal(allowed: Iterable[Entry], host: str, port: int) -> str | None:
    """What can be said of `host:port` before anything resolves (the allow-list, and an
    address written out), as a courtesy at submission: where the connection is made, the
    whole rule is applied again."""
    entries = list(allowed)
    refusal = name_refusal(entries, host, port)
    literal = address_of(host)
    if refusal is None and literal is not None:
        refusal = address_refusal(entries, {}, host.strip("[]"), port, literal, lambda _: False)
    return refusal


def pair(host: str, port: int | str) -> str:
    """host:port as an allow-list entry writes it ([v6]:port for IPv6 addresses)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_of(scheme: str, port: int | None) -> int:
    """The port a URL of `scheme` with `port` (None: its default) connects to."""
    return port or (443 if scheme == "https" else 80)
