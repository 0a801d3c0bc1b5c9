"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from temporalio.service import RPCError

from activities.tools.sandbox import confinement
from api.deps import SettingsDep, TemporalGateway
from api.schemas import ProcessTools, answers

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A health answer."""

    status: str


@router.get("/healthz")
async def healthz() -> Health:
    """The API process is up."""
    return Health(status="ok")


class Ready(Health):
    """A readiness answer."""

    process_tools: ProcessTools = Field(
        description="how process tools (shell, python) run on a worker of this host"
    )


async def process_tools(settings: SettingsDep) -> ProcessTools:
    """How this host's workers run process tools (probed once, in a thread: it starts a
    sandbox)."""
    found = await run_in_threadpool(confinement, settings)
    return ProcessTools.model_validate(found.describe())


@router.get("/readyz", responses=answers(503))
async def readyz(request: Request, settings: SettingsDep) -> Ready:
    """Temporal is reachable, so runs can be started and inspected; and how process tools
    are confined."""
    gateway: TemporalGateway = request.app.state.temporal
    client = await gateway.client()
    try:
        await client.service_client.check_health()
    except (RPCError, RuntimeError) as exc:
        raise HTTPException(503, f"Temporal is not healthy: {exc}") from exc
    return Ready(status="ready", process_tools=await process_tools(settings))
