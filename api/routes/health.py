"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel
from temporalio.service import RPCError

from api.deps import TemporalGateway
from api.schemas import answers

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A health answer."""

    status: str


@router.get("/healthz")
async def healthz() -> Health:
    """The API process is up."""
    return Health(status="ok")


@router.get("/readyz", responses=answers(503))
async def readyz(request: Request) -> Health:
    """Temporal is reachable, so runs can be started and inspected."""
    gateway: TemporalGateway = request.app.state.temporal
    client = await gateway.client()
    try:
        await client.service_client.check_health()
    except (RPCError, RuntimeError) as exc:
        raise HTTPException(503, f"Temporal is not healthy: {exc}") from exc
    return Health(status="ready")
