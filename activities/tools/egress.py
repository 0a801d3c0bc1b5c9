"""Network for a sandboxed command that the policy grants it (`network = true` on the tool):
allowed hosts only, through an HTTP proxy of the worker's.

The sandbox keeps a network namespace of its own with nothing but loopback, so nothing
leaves it except through one door: a Unix socket bound into it, where the worker answers
as an HTTP proxy (CONNECT for TLS, absolute-form requests for plain HTTP) and connects only
where the destination rule allows (longrun/destinations.py: by the address the name
resolves to, once; never longrun's or Temporal's own services). Inside, a small
forwarder listens on 127.0.0.1:3128 and hands each connection to that socket, and
`HTTP_PROXY`/`HTTPS_PROXY` point there: curl, pip, git and Python's clients use it; a
program that ignores proxies reaches nothing. Routing the namespace's packets out instead
(a veth or slirp) would need firewall rules, privileges a worker does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from activities.tools.destinations import Refused, open_checked
from longrun.destinations import port_of
from longrun.settings import Settings

INSIDE = "/run/longrun"  # where the socket and the forwarder are, seen from inside
PORT = 3128
CONNECT_TIMEOUT_S = 10.0

FORWARDER = """\
import socket, sys, threading

def pipe(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def handle(client):
    door = socket.socket(socket.AF_UNIX)
    try:
        door.connect(sys.argv[1])
    except OSError:
        client.close()
        return
    threading.Thread(target=pipe, args=(client, door), daemon=True).start()
    pipe(door, client)

server = socket.create_server(("127.0.0.1", int(sys.argv[2])))
open("/tmp/.egress-ready", "w").close()
while True:
    connection, _ = server.accept()
    threading.Thread(target=handle, args=(connection,), daemon=True).start()
"""


def wrap(argv: list[str], python: str) -> list[str]:
    """`argv` run after the forwarder listens, inside the sandbox."""
    start = (
        f'"$0" -I {INSIDE}/forward.py {INSIDE}/proxy.sock {PORT} </dev/null >/dev/null 2>&1 & '
        "i=0; while [ ! -e /tmp/.egress-ready ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); "
        'done; exec "$@"'
    )
    return ["sh", "-c", start, python, *argv]


def environment() -> dict[str, str]:
    """What points a command's clients at the forwarder."""
    proxy = f"http://127.0.0.1:{PORT}"
    return {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


@contextlib.asynccontextmanager
async def door(settings: Settings) -> AsyncIterator[Path]:
    """The worker's side, for the time of one call: a folder holding the proxy's socket
    and the forwarder, to bind into the sandbox at INSIDE."""
    folder = Path(tempfile.mkdtemp(prefix="longrun-egress-"))
    try:
        (folder / "forward.py").write_text(FORWARDER)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):  # a connection's trouble is its own
                await _proxy(settings, reader, writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

        server = await asyncio.start_unix_server(serve, path=str(folder / "proxy.sock"))
        async with server:
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _proxy(
    settings: Settings, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One proxied connection, made to a checked address; refused (403, with the reason)
    where the destination rule says no."""
    head = await reader.readuntil(b"\r\n\r\n")  # at most the reader's limit, 64 KiB
    line, rest = head.split(b"\r\n", 1)
    method, target, version = line.decode("latin-1").split(" ", 2)
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        url = httpx.URL(f"https://{host}:{port}/")
    else:
        url = httpx.URL(target)
    if not url.host:
        await _answer(writer, 403, "not a proxy request")
        return
    try:
        up_reader, up_writer = await open_checked(
            settings, url.host, port_of(url.scheme, url.port), CONNECT_TIMEOUT_S
        )
    except Refused as exc:
        await _answer(writer, 403, str(exc))
        return
    except (OSError, TimeoutError) as exc:
        await _answer(writer, 502, f"{url.host}: {exc}")
        return
    try:
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:  # to the origin in origin-form, as a proxy forwards it
            path = url.raw_path.decode("latin-1") or "/"
            up_writer.write(f"{method} {path} {version}\r\n".encode("latin-1") + rest)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        up_writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await up_writer.wait_closed()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = reason.encode()
    phrase = {403: "Forbidden", 502: "Bad Gateway"}[status]
    writer.write(
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        dst.write_eof()
