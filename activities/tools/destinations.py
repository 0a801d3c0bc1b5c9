"""Where a run's connections are made: a name resolved once, every address it resolves to
checked by the destination rule (longrun/destinations.py), and the connection made to a
checked address, never to a second lookup's answer (no DNS rebinding). `http_request`,
webhooks and the sandbox's egress proxy all connect through here."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
import time
import typing

import httpcore
import httpx

from longrun.destinations import (
    ANY_LOCAL,
    Entry,
    IPAddress,
    address_of,
    address_refusal,
    embedded_ipv4,
    name_refusal,
)
from longrun.settings import Settings

OWN_TTL_S = 60.0  # how long the addresses of longrun's own services are kept


class Refused(Exception):
    """A destination the rule refuses; the message names the rule and the setting."""


async def _resolve(host: str, port: int) -> list[IPAddress]:
    literal = address_of(host)
    if literal is not None:
        return [literal]
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        found[ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])] = None
    return list(found)


Own = dict[tuple[IPAddress, int | None], str]
_own_cache: dict[tuple[tuple[Entry, str], ...], tuple[float, Own]] = {}


async def _own(settings: Settings) -> Own:
    """Where longrun's own services and the denied destinations are, by address, as
    `own_service` takes them (kept for a minute: names may move)."""
    services = tuple(sorted(settings.own_services().items(), key=str))
    cached = _own_cache.get(services)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    own: Own = {}
    for entry, what in services:
        try:
            addresses = await _resolve(entry.host, entry.port or 0)
        except OSError:
            continue  # a name that does not resolve cannot be connected to either
        for address in map(embedded_ipv4, addresses):
            own[(address, entry.port)] = what
            if address.is_loopback or address.is_unspecified:
                own[(ANY_LOCAL, entry.port)] = what
    _own_cache[services] = (time.monotonic() + OWN_TTL_S, own)
    return own


@functools.lru_cache(maxsize=1024)
def is_local(address: IPAddress) -> bool:
    """Whether `address` is one of this host's own (a socket can be bound to it)."""
    address = embedded_ipv4(address)
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


async def checked_addresses(settings: Settings, host: str, port: int) -> list[IPAddress]:
    """The addresses `host:port` resolves to, every one allowed by the rule; raises Refused
    if any is not (a name that sometimes resolves to a refused address is refused), and
    OSError if the name does not resolve."""
    host = host.strip("[]").lower()
    allowed = settings.allowed_destinations()
    refusal = name_refusal(allowed, host, port)
    if refusal is not None:
        raise Refused(refusal)
    addresses = await _resolve(host, port)
    own = await _own(settings)
    for address in addresses:
        refusal = address_refusal(allowed, own, host, port, address, is_local)
        if refusal is not None:
            raise Refused(refusal)
    return addresses


async def open_checked(
    settings: Settings, host: str, port: int, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio connection to a checked address of `host:port`."""
    addresses = await checked_addresses(settings, host, port)
    last: OSError | None = None
    for address in addresses:
        try:
            return await asyncio.wait_for(asyncio.open_connection(str(address), port), timeout_s)
        except OSError as exc:
            last = exc
    raise last or OSError(f"no address of {host}")


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network, connecting only to addresses the rule allows."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await checked_addresses(self._settings, host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: {exc}") from exc
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"no address of {host}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Refused("runs do not connect to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The default TLS context: loading the CA bundle costs tens of milliseconds of CPU, so a
    worker does it once."""
    return httpx.create_ssl_context()


class _CheckedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, settings: Settings, verify: ssl.SSLContext) -> None:
        super().__init__(verify=verify, trust_env=False)
        # httpx offers no way to name the network backend: its pool is made again with
        # ours, the rest as httpx makes it (tests of refusals by address guard this).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify, network_backend=_CheckedBackend(settings)
        )


def checked_client(
    settings: Settings, *, timeout_s: float, verify: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    """An httpx client for a run's requests: no proxies from the worker's environment, no
    redirects followed, every connection to a checked address."""
    return httpx.AsyncClient(
        transport=_CheckedTransport(settings, verify or tls_context()),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
    )
