"""What the API refuses before any route parses a body: bodies too big, and JSON a route
could parse but nothing after it could carry (nested deeper than MAX_JSON_DEPTH, not
Unicode text, not finite numbers), however the body is labelled. Each is a 422 that names
the problem and where it is; nothing starts."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Plans nest a handful of levels above tool arguments; payload conversion and history
# readers fail somewhere above 150.
MAX_JSON_DEPTH = 64
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


Loc = tuple[str | int, ...]


class _NotFinite:
    """Where NaN or Infinity stood in a body, found again by the walk that follows."""


_NOT_FINITE = _NotFinite()


def json_problem(body: bytes) -> tuple[Loc, str] | None:
    """Where and why a JSON body cannot be taken, or None; a body that is not JSON at all
    is left to the route, which says so. Every body is looked at, whatever its
    Content-Type says: the label is the client's, the bytes are what a route may parse."""
    try:
        value = json.loads(body, parse_constant=lambda _: _NOT_FINITE)
    except RecursionError:
        return ("body",), f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    except UnicodeDecodeError:
        return ("body",), "the body is not UTF-8 text"
    except ValueError:
        return None
    stack: list[tuple[Any, Loc]] = [(value, ("body",))]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, dict | list):
            if len(loc) > MAX_JSON_DEPTH:
                return loc, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and _unpaired(key):
                    return (*loc, key), _SURROGATE
                stack.append((child, (*loc, key)))
        elif isinstance(item, str):
            if _unpaired(item):
                return loc, _SURROGATE
        elif item is _NOT_FINITE or (isinstance(item, float) and not math.isfinite(item)):
            return loc, "numbers must be finite (no NaN or Infinity; 1e999 is not)"
    return None


_SURROGATE = "strings must be Unicode text (a lone surrogate such as \\ud800 is not)"


def _unpaired(text: str) -> bool:
    return not text.isascii() and _LONE_SURROGATE.search(text) is not None


class BodyGuard:
    """Refuse request bodies above a size limit, and JSON bodies `json_problem` finds
    fault with, before they are parsed by a route."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _refuse(send, "too_large", self._too_big(length.decode()))
            return
        # Read the body up front (it is small by definition) so that an oversized stream is
        # refused before any route sees it, with or without a Content-Length header.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            if received > self.limit:
                await _refuse(send, "too_large", self._too_big(f"more than {self.limit}"))
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_problem(body) if body else None
        if problem is not None:
            await _refuse(send, "invalid_json", problem[1], problem[0])
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_big(self, size: str) -> str:
        return f"request body is {size} bytes; the limit is {self.limit} bytes"


async def _refuse(send: Send, kind: str, message: str, loc: Loc = ("body",)) -> None:
    detail = [{"type": kind, "loc": list(loc), "msg": message}]
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
