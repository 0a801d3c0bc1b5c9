"""Dependencies shared by the routes: settings and the Temporal client. All are `async def`:
FastAPI runs a plain `def` dependency in a worker thread, a hop dearer than its work."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from temporalio.client import Client

from activities.mcp import McpHub
from api.closed_runs import EndedRuns, ended_runs
from longrun.policy import Policy
from longrun.settings import Settings
from longrun.temporal import connect


class TemporalGateway:
    """Connects to Temporal on first use, so the API starts (and says 503) without it."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        """The connected client; 503 when Temporal cannot be reached."""
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    try:
                        self._client = await connect(self._settings)
                    except Exception as exc:
                        raise HTTPException(
                            503,
                            f"Temporal is unreachable at {self._settings.temporal_address}: {exc}",
                        ) from exc
        return self._client


async def app_settings(request: Request) -> Settings:
    """This app's settings."""
    settings: Settings = request.app.state.settings
    return settings


async def gateway(request: Request) -> TemporalGateway:
    """This app's connection to Temporal, for routes that connect only after validating."""
    found: TemporalGateway = request.app.state.temporal
    return found


async def get_client(request: Request) -> Client:
    """The Temporal client of this app."""
    gateway: TemporalGateway = request.app.state.temporal
    return await gateway.client()


async def app_policy(request: Request) -> Policy:
    """This app's permission policy."""
    policy: Policy = request.app.state.policy
    return policy


async def mcp_hub(request: Request) -> McpHub:
    """The configured MCP servers, whose tools runs may call."""
    hub: McpHub = request.app.state.mcp_hub
    return hub


SettingsDep = Annotated[Settings, Depends(app_settings)]
McpHubDep = Annotated[McpHub, Depends(mcp_hub)]
PolicyDep = Annotated[Policy, Depends(app_policy)]
Gateway = Annotated[TemporalGateway, Depends(gateway)]
TemporalClient = Annotated[Client, Depends(get_client)]
Ended = Annotated[EndedRuns, Depends(ended_runs)]
