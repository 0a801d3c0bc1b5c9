"""Liveness and readiness."""

from __future__ import annotations

import logging
from dataclasses import asdict

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client
from temporalio.service import RPCError

from activities.tools.sandbox import confinement
from api.deps import SettingsDep, TemporalGateway
from api.schemas import ProcessTools, WorkerVersion, answers
from longrun.settings import Settings
from longrun.versions import versions

log = logging.getLogger("longrun.api")
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
    versions: list[WorkerVersion] | None = Field(
        None,
        description="the worker deployment's versions, newest first; none if unversioned "
        "(LONGRUN_VERSIONING=false) or Temporal would not say",
    )


async def process_tools(settings: SettingsDep) -> ProcessTools:
    """How this host's workers run process tools (probed once, in a thread: it starts a
    sandbox)."""
    found = await run_in_threadpool(confinement, settings)
    return ProcessTools.model_validate(found.describe())


@router.get("/readyz", responses=answers(503))
async def readyz(request: Request, settings: SettingsDep) -> Ready:
    """Temporal is reachable, so runs can be started and inspected; how process tools are
    confined; and which worker versions serve runs (a version with no open runs may stop)."""
    gateway: TemporalGateway = request.app.state.temporal
    client = await gateway.client()
    try:
        await client.service_client.check_health()
    except (RPCError, RuntimeError) as exc:
        raise HTTPException(503, f"Temporal is not healthy: {exc}") from exc
    return Ready(
        status="ready",
        process_tools=await process_tools(settings),
        versions=await worker_versions(client, settings),
    )


async def worker_versions(client: Client, settings: Settings) -> list[WorkerVersion] | None:
    """The versions of the workers' deployment with their runs and workers."""
    if not settings.versioning:
        return None
    try:
        found = await versions(client, settings)
    except RPCError as exc:
        log.warning("the worker deployment's versions are unknown: %s", exc)
        return None
    return [WorkerVersion(stranded=v.stranded, **asdict(v)) for v in found]
