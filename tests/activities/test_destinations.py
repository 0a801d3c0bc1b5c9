"""The destination rule: where a run may make the worker connect, decided by address. The
rule on its own, then as `http_request` applies it (names resolved once, every address
checked, the connection made to a checked one)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from longrun.destinations import (
    ANY_LOCAL,
    Entry,
    address_refusal,
    early_refusal,
    name_refusal,
    parse_entry,
    reserved_kind,
)
from longrun.dev.stack import ServerThread
from longrun.settings import Settings
from tests.activities.test_tools import Tools

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("api.example.com:443", Entry("api.example.com", 443)),
        ("*.Example.com:443", Entry("*.example.com", 443)),
        ("10.0.0.5:8080", Entry("10.0.0.5", 8080)),
        ("[::1]:8100", Entry("::1", 8100)),
    ],
)
def test_an_entry_names_a_host_and_its_port(text: str, entry: Entry) -> None:
    assert parse_entry(text) == entry


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("api.example.com", "names no port"),
        ("::1", "names no port"),
        ("api.example.com:0", "no valid port"),
        ("api.example.com:https", "no valid port"),
        ("a*.example.com:443", "not a host name"),
        ("temporal:*", "no valid port"),
    ],
)
def test_a_bad_entry_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_entry(text)
    with pytest.raises(ValueError, match=says):
        Settings(_env_file=None, LONGRUN_HTTP_ALLOW_HOSTS=text)  # type: ignore[call-arg]


def test_every_port_of_a_host_may_be_denied() -> None:
    assert parse_entry("temporal:*", any_port=True) == Entry("temporal", None)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("fd00::1", "private"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
    ],
)
def test_non_public_addresses_in_every_spelling(address: str, kind: str | None) -> None:
    assert reserved_kind(ip(address)) == kind


def test_the_allow_list_is_by_name_and_port() -> None:
    allowed = [parse_entry("api.example.com:443"), parse_entry("*.cdn.example:443")]
    assert name_refusal(allowed, "api.example.com", 443) is None
    assert name_refusal(allowed, "API.example.com", 443) is None
    assert name_refusal(allowed, "a.b.cdn.example", 443) is None
    refused = name_refusal(allowed, "api.example.com", 80)
    assert refused is not None and "'api.example.com:80' is not an allowed destination" in refused
    assert "LONGRUN_HTTP_ALLOW_HOSTS" in refused
    assert name_refusal(allowed, "cdn.example", 443) is not None  # the wildcard is below
    assert name_refusal(allowed, "evilcdn.example", 443) is not None


def _never_local(_: Any) -> bool:
    return False


def test_a_non_public_address_needs_an_exact_entry() -> None:
    wildcard = [parse_entry("*.corp.example:443")]
    refused = address_refusal(wildcard, {}, "db.corp.example", 443, ip("10.0.0.7"), _never_local)
    assert refused is not None and "a private address" in refused and "wildcard" in refused
    for exact in ("db.corp.example:443", "10.0.0.7:443"):
        allowed = [parse_entry(exact)]
        assert (
            address_refusal(allowed, {}, "db.corp.example", 443, ip("10.0.0.7"), _never_local)
            is None
        )
    other_port = [parse_entry("db.corp.example:8443")]
    assert address_refusal(other_port, {}, "db.corp.example", 443, ip("10.0.0.7"), _never_local)
    # A public address needs no more than the name's entry.
    assert (
        address_refusal(wildcard, {}, "www.corp.example", 443, ip("8.8.8.8"), _never_local) is None
    )


def test_own_services_are_refused_even_when_named() -> None:
    listed = [parse_entry("127.0.0.1:7233"), parse_entry("10.0.0.9:7234")]
    own = {(ip("127.0.0.1"), 7233): "Temporal", (ip("10.0.0.9"), None): "denied"}
    for host, port, address in (
        ("127.0.0.1", 7233, "127.0.0.1"),
        ("::ffff:127.0.0.1", 7233, "::ffff:127.0.0.1"),
        ("10.0.0.9", 7234, "10.0.0.9"),
    ):
        refused = address_refusal(listed, own, host, port, ip(address), _never_local)
        assert refused is not None and "which runs never reach" in refused, (host, refused)
    # A service on loopback or on every address answers on each of the host's addresses.
    everywhere = {(ANY_LOCAL, 8000): "the longrun API"}
    on_host = [parse_entry("192.168.5.5:8000")]
    refused = address_refusal(
        on_host, everywhere, "192.168.5.5", 8000, ip("192.168.5.5"), lambda _: True
    )
    assert refused is not None and "the longrun API" in refused


def test_a_webhook_is_refused_at_submission_by_what_can_be_said_before_resolving() -> None:
    allowed = [parse_entry("hooks.example.com:443"), parse_entry("*.example.com:443")]
    assert early_refusal(allowed, "hooks.example.com", 443) is None
    assert early_refusal(allowed, "other.test", 443) is not None
    assert early_refusal([parse_entry("127.0.0.1:9")], "127.0.0.1", 9) is None
    assert early_refusal([parse_entry("*.example.com:443")], "10.0.0.1", 443) is not None


# --- as http_request applies it ------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    """A local HTTP server answering `ok`; its port."""
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with ServerThread(app) as running:
        yield int(running.url.rsplit(":", 1)[1])


def _tools(tmp_path: Path, allow: str) -> Tools:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path,
        LONGRUN_HTTP_ALLOW_HOSTS=allow,
    )
    return Tools(settings, "run-" + uuid.uuid4().hex)


@pytest.fixture
async def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Names of `.test` answered from a script of answers, one per lookup (the last one
    repeats); how many lookups each got is what is left out of the script."""
    script: dict[str, list[list[str]]] = {}
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".test"):
            return await real(host, port, *args, **kwargs)
        answers = script[name]
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, int(port or 0)))
            for a in addresses
        ]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return script


async def test_a_name_is_resolved_once_and_the_checked_address_is_used(
    tmp_path: Path, server: int, resolver: dict[str, list[list[str]]]
) -> None:
    # First answer: loopback, allowed by the exact name; any later one: another address.
    resolver["rebind.test"] = [["127.0.0.1"], ["10.66.66.66"], ["10.66.66.66"]]
    tools = _tools(tmp_path, f"rebind.test:{server}")
    out = await tools.run("http_request", url=f"http://rebind.test:{server}/", timeout_s=5)
    assert out["status"] == 200 and out["body"] == "ok"
    assert resolver["rebind.test"] == [["10.66.66.66"], ["10.66.66.66"]], "looked up twice"


async def test_a_name_with_one_refused_address_is_refused(
    tmp_path: Path, server: int, resolver: dict[str, list[list[str]]]
) -> None:
    resolver["mixed.test"] = [["8.8.8.8", "169.254.169.254"]]
    resolver["inside.test"] = [["127.0.0.1"]]
    tools = _tools(tmp_path, f"*.test:{server}")
    err = await tools.fail("http_request", url=f"http://mixed.test:{server}/")
    assert err.type == "DestinationRefused" and "169.254.169.254" in err.message
    assert "a link-local address" in err.message
    # Named by a wildcard only, a name that resolves to loopback is refused.
    err = await tools.fail("http_request", url=f"http://inside.test:{server}/")
    assert err.type == "DestinationRefused" and "a loopback address" in err.message
