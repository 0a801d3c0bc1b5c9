"""Prometheus text at `/metrics`: the API's requests (prometheus-fastapi-instrumentator) and
longrun's runs by status, counted in Temporal's visibility at each scrape. Workers serve the
SDK's worker metrics and longrun's run counters at their own LONGRUN_METRICS_ADDRESS."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, FastAPI, Header, HTTPException, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_fastapi_instrumentator import Instrumentator
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from api import access
from api.access import Reader
from api.deps import Gateway, TemporalGateway
from api.reading import WORKFLOW_TYPE, run_status
from api.schemas import answers

log = logging.getLogger("longrun.api")

router = APIRouter(tags=["metrics"], responses=answers(401, 403))

STATUSES = ("running", "waiting_approval", "paused", "completed", "failed", "cancelled")
# Requests whose duration is not the API's latency: streams last as long as a run.
NOT_TIMED = ["/metrics", "/healthz", "/readyz", r".*/events$"]


class RunGauges:
    """Runs Temporal keeps, by status: live ones as they stand, ended ones by outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Gauge(
            "longrun_runs",
            "runs Temporal keeps, by status (live: running, waiting_approval, paused; "
            "ended: completed, failed, cancelled)",
            ["status"],
            registry=registry,
        )
        self.reachable = Gauge(
            "longrun_temporal_reachable",
            "1 if Temporal answered the last count of runs, else 0",
            registry=registry,
        )

    async def refresh(self, gateway: TemporalGateway) -> None:
        """Count again: one count grouped by Temporal's status, one per waiting status."""
        base = f"WorkflowType = '{WORKFLOW_TYPE}'"
        live = f"{base} AND ExecutionStatus = 'Running'"
        try:
            client = await gateway.client()
            grouped, waiting, paused = await asyncio.gather(
                client.count_workflows(f"{base} GROUP BY ExecutionStatus"),
                client.count_workflows(f"{live} AND LongrunStatus = 'waiting_approval'"),
                client.count_workflows(f"{live} AND LongrunStatus = 'paused'"),
            )
        except (RPCError, HTTPException) as exc:
            log.warning("could not count runs for /metrics: %s", exc)
            self.runs.clear()  # no stale counts: absent until Temporal answers again
            self.reachable.set(0)
            return
        counts = dict.fromkeys(STATUSES, 0)
        for group in grouped.groups:
            status = _execution_status(str(group.group_values[0]))
            if status is None:  # continued as new: the run goes on as its next segment
                continue
            counts[run_status(status, None)] += group.count
        counts["waiting_approval"] = waiting.count
        counts["paused"] = paused.count
        counts["running"] -= waiting.count + paused.count
        for name, count in counts.items():
            self.runs.labels(name).set(max(0, count))
        self.reachable.set(1)


# Temporal's statuses by the names visibility groups them by ("Completed", "TimedOut").
_BY_NAME = {s.name.replace("_", "").lower(): s for s in WorkflowExecutionStatus}


def _execution_status(name: str) -> WorkflowExecutionStatus | None:
    """Temporal's status from the name visibility groups by; None for continued-as-new."""
    found = _BY_NAME.get(name.lower())
    return None if found == WorkflowExecutionStatus.CONTINUED_AS_NEW else found


def instrument(app: FastAPI) -> CollectorRegistry:
    """Count and time the API's requests, and keep the run gauges, in a registry of the
    app's, which it returns for the app's other metrics."""
    registry = CollectorRegistry()
    Instrumentator(excluded_handlers=NOT_TIMED, registry=registry).instrument(app)
    app.state.prometheus = registry
    app.state.run_gauges = RunGauges(registry)
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
)
async def prometheus_metrics(
    request: Request,
    gateway: Gateway,
    caller: Reader,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Prometheus metrics: the API's requests (`http_*`) and runs by status
    (`longrun_runs`); scrape with an API key as a bearer token. While Temporal does not
    answer, `longrun_temporal_reachable` is 0 and the run counts are left out. Counts are
    of every tenant's runs: not for a key of a tenant."""
    access.server_wide(caller)
    await request.app.state.run_gauges.refresh(gateway)
    encoder, content_type = choose_encoder(accept or "")
    return Response(encoder(request.app.state.prometheus), media_type=content_type)
