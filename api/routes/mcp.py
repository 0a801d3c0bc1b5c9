"""`/mcp`: longrun's MCP tools (longrun/mcp_server.py) over streamable HTTP, for the callers
this API admits. Each tool calls this API in-process with the key the MCP client sent, so
the routes' roles, the four-eyes rule and the audit apply as to any REST call."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import principal_of
from longrun.mcp_server import LongrunApi, build_server
from longrun.settings import Settings


class Admitted:
    """Passes on the requests of callers the API admits; answers the others as it would."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                principal_of(Request(scope), self.settings)
            except HTTPException as exc:
                refusal = JSONResponse(
                    {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mount_mcp(app: FastAPI, settings: Settings) -> Callable[[], AbstractAsyncContextManager[None]]:
    """Serve the MCP tools at `/mcp` of `app`; what the app's lifespan must run."""
    api = LongrunApi("http://longrun", key=None, transport=httpx.ASGITransport(app=app))
    server = build_server(api)
    # Stateless, with JSON answers: any replica of the API can take any request.
    served = server.streamable_http_app(
        streamable_http_path="/", stateless_http=True, json_response=True
    )
    app.mount("/mcp", Admitted(served, settings))
    return server.session_manager.run
