"""What the API refuses before any route parses a body: bodies too big, and JSON a route
could parse but nothing after it could carry (too deeply nested, not Unicode text, not
finite numbers). Each is a 422 that names the problem; nothing starts."""

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


class _NotFinite(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _NotFinite(name)


def json_problem(body: bytes) -> str | None:
    """Why a JSON body cannot be taken, or None; a body that is not JSON at all is left
    to the route, which says so."""
    try:
        value = json.loads(body, parse_constant=_no_constants)
    except _NotFinite:
        return "numbers must be finite (no NaN or Infinity)"
    except RecursionError:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    except UnicodeDecodeError:
        return "the body is not UTF-8 text"
    except ValueError:
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            if not item.isascii() and _LONE_SURROGATE.search(item):
                return "strings must be Unicode text (a lone surrogate such as \\ud800 is not)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite (1e999 is not)"
    return None


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
        kind = headers.get(b"content-type", b"")
        if body and (not kind or b"json" in kind):
            problem = json_problem(body)
            if problem is not None:
                await _refuse(send, "invalid_json", problem)
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


async def _refuse(send: Send, kind: str, message: str) -> None:
    body = json.dumps({"detail": [{"type": kind, "loc": ["body"], "msg": message}]}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
