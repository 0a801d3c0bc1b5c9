"""405 answers whose Allow header lists every method the path has: Starlette names only
the methods of the first route whose path matched (POST for /v1/runs, which also has GET)."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class AllowEveryMethod:
    """Rewrite the Allow header of 405 answers from all routes matching the path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                methods = sorted(_methods_of(scope))
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {
                    **message,
                    "headers": [*headers, (b"allow", ", ".join(methods).encode())],
                }
            await send(message)

        await self.app(scope, receive, sending)


def _methods_of(scope: Scope) -> set[str]:
    methods: set[str] = set()
    for route in scope["app"].router.routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(scope["path"]):
            methods |= route.methods
    return methods
