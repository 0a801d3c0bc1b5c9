"""The longrun REST API: `uvicorn api.app:app`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from activities.mcp import McpHub
from api.closed_runs import EndedRuns
from api.deps import TemporalGateway
from api.feed import EventFeed
from api.guard import BodyGuard
from api.method_not_allowed import AllowEveryMethod
from api.openapi import describe_tools
from api.routes import (
    approvals,
    artifacts,
    decisions,
    events,
    grants,
    health,
    metrics,
    prometheus,
    retries,
    runs,
    schedules,
    tools,
    ui,
)
from api.routes.mcp import mount_mcp
from longrun.catalogue import CATALOGUE
from longrun.policy import load_policy
from longrun.settings import Settings, get_settings
from longrun.telemetry import configure_tracing, exporting

log = logging.getLogger("longrun.api")
READMIT_RETRY_S = 10.0


async def _temporal_error(request: Request, exc: Exception) -> JSONResponse:
    """Any Temporal RPC failure a route did not handle: 503, never a stack trace."""
    message = exc.message if isinstance(exc, RPCError) else str(exc)
    log.warning("Temporal call failed on %s %s: %s", request.method, request.url.path, message)
    return JSONResponse({"detail": f"Temporal did not answer: {message}"}, status_code=503)


async def _query_failed(request: Request, exc: Exception) -> JSONResponse:
    """A query the run's worker could not answer (a run that cannot be replayed, say):
    503 with the worker's reason, never a stack trace."""
    log.warning("a run's query failed on %s %s: %s", request.method, request.url.path, exc)
    detail = f"the run's worker could not answer: {str(exc)[:500]}"
    return JSONResponse({"detail": detail}, status_code=503)


async def _readmit_schedules(app: FastAPI) -> None:
    """Once Temporal answers, bring every schedule's run under the policy this API enforces
    (a policy changes with a restart); the runs they start are then checked against it."""
    gateway: TemporalGateway = app.state.temporal
    while True:
        try:
            changed = await schedules.readmit_schedules(await gateway.client(), app.state.policy)
        except (HTTPException, RPCError) as exc:
            log.warning("schedules not yet checked against the policy in force: %s", exc)
            await asyncio.sleep(READMIT_RETRY_S)
            continue
        if changed:
            log.info("schedules brought under the policy in force: %s", ", ".join(changed))
        return


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for `settings` (default: from the environment)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not settings.api_keys:
            log.warning(
                "no API keys configured (LONGRUN_API_KEYS): answering loopback clients only, "
                "each as admin"
            )
        readmitting = asyncio.create_task(_readmit_schedules(app), name="readmit-schedules")
        async with app.state.mcp_sessions():
            try:
                yield
            finally:
                readmitting.cancel()
                await app.state.mcp_hub.aclose()

    # /docs and /redoc with their scripts and styles served from the package, not a CDN.
    app = FastAPIOffline(
        lifespan=lifespan,
        title="longrun",
        version="0.1.0",
        description="Durable runs for long AI agent jobs, on Temporal.",
    )
    configure_tracing("longrun-api", settings)
    if exporting():
        # A server span per request: a run's trace starts at the POST that started it.
        # The ASGI send and receive spans under it say nothing a trace reader needs, and
        # cost every request their time; with no exporter, no request pays for spans.
        FastAPIInstrumentor.instrument_app(
            app, excluded_urls="healthz,readyz", exclude_spans=["receive", "send"]
        )
    app.state.settings = settings
    app.state.policy = load_policy(settings.policy_file)  # a bad file stops start-up
    app.state.mcp_hub = McpHub.of(settings)  # so does a bad MCP servers file
    app.state.temporal = TemporalGateway(settings)
    app.state.ended = EndedRuns()
    app.state.events = EventFeed(settings, prometheus.instrument(app))
    app.include_router(health.router)
    app.include_router(runs.router)
    app.include_router(decisions.router)
    app.include_router(retries.router)
    app.include_router(schedules.router)
    app.include_router(events.router)
    app.include_router(grants.router)
    app.include_router(approvals.router)
    app.include_router(tools.router)
    app.include_router(metrics.router)
    app.include_router(prometheus.router)
    app.include_router(ui.router)
    app.include_router(artifacts.router)
    app.state.mcp_sessions = mount_mcp(app, settings)
    describe_tools(app, CATALOGUE)
    app.add_middleware(BodyGuard, limit=settings.max_request_bytes)
    app.add_middleware(AllowEveryMethod)
    app.add_exception_handler(RPCError, _temporal_error)
    app.add_exception_handler(WorkflowQueryFailedError, _query_failed)
    return app


app = create_app()
