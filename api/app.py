"""The longrun REST API: `uvicorn api.app:app`."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from api.deps import TemporalGateway
from api.routes import artifacts, health, runs
from longrun.policy import load_policy
from longrun.settings import Settings, get_settings
from longrun.telemetry import configure_tracing

log = logging.getLogger("longrun.api")


class BodyLimit:
    """Refuse request bodies above a size limit before they are parsed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _refuse(self, send: Send, size: str) -> None:
        body = json.dumps(
            {
                "detail": [
                    {
                        "type": "too_large",
                        "loc": ["body"],
                        "msg": f"request body is {size} bytes; the limit is {self.limit} bytes",
                    }
                ]
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 422,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._refuse(send, length.decode())
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
                await self._refuse(send, f"more than {self.limit}")
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _temporal_error(request: Request, exc: Exception) -> JSONResponse:
    """Any Temporal RPC failure a route did not handle: 503, never a stack trace."""
    message = exc.message if isinstance(exc, RPCError) else str(exc)
    log.warning("Temporal call failed on %s %s: %s", request.method, request.url.path, message)
    return JSONResponse({"detail": f"Temporal did not answer: {message}"}, status_code=503)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for `settings` (default: from the environment)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_tracing("longrun-api", settings)
        if not settings.api_keys:
            log.warning(
                "no API keys configured (LONGRUN_API_KEYS): answering loopback clients only, "
                "each as admin"
            )
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="longrun",
        version="0.1.0",
        description="Durable runs for long AI agent jobs, on Temporal.",
    )
    app.state.settings = settings
    app.state.policy = load_policy(settings.policy_file)  # a bad file stops start-up
    app.state.temporal = TemporalGateway(settings)
    app.include_router(health.router)
    app.include_router(runs.router)
    app.include_router(artifacts.router)
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    app.add_exception_handler(RPCError, _temporal_error)
    return app


app = create_app()
