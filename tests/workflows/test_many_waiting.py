"""Two thousand runs waiting for a person on one worker process, with a real Temporal
server: the worker is killed (SIGKILL) and another started; every run answers its status
from the new worker, and runs a person then approves carry on to their end."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from temporalio.client import Client

from api.reading import STATUS_FILTERS
from longrun.settings import Settings
from longrun.temporal import connect
from tests.helpers import APART, Poll, api_app, start_worker, stop_processes, submit

pytestmark = pytest.mark.long

RUNS = 2_000
APPROVED = 50
T = TypeVar("T")


async def at_most(n: int, calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Await every call, `n` at a time."""
    gate = asyncio.Semaphore(n)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(call) for call in calls))


async def waiting(client: Client, settings: Settings) -> int:
    """How many of the test's runs Temporal lists as waiting for an approval."""
    query = f"TaskQueue = '{settings.task_queue}' AND {STATUS_FILTERS['waiting_approval']}"
    return (await client.count_workflows(query)).count


async def until_waiting(client: Client, settings: Settings, n: int) -> None:
    """Wait until Temporal lists `n` of the test's runs as waiting (its listing follows the
    runs a moment later)."""
    for _ in range(600):
        if (listed := await waiting(client, settings)) == n:
            return
        await asyncio.sleep(1)
    raise AssertionError(f"{listed} runs listed as waiting, not {n}")


async def status_once_answered(api: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run's status, asked until it answers: a run's first query after the kill waits
    for the new worker to take it up."""
    while True:
        response = await api.get(f"/v1/runs/{run_id}")
        if response.status_code == 200:
            run: dict[str, Any] = response.json()
            return run
        assert response.status_code == 503, response.text  # no worker has answered yet
        await asyncio.sleep(0.5)


@pytest.fixture
def apart(settings: Settings) -> Settings:
    """The test's settings in a namespace of its own: the runs it leaves waiting (ending
    them took 20 s) are in no other test's listings."""
    return settings.model_copy(update={"temporal_namespace": APART})


@pytest.fixture
async def apart_api(apart: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with api_app(apart) as http:
        yield http


@pytest.mark.timeout(900)  # 2-3 minutes on two busy cores: too near the suite's 5-minute limit
async def test_two_thousand_waiting_runs_answer_and_carry_on_after_a_worker_kill(
    apart: Settings, apart_api: httpx.AsyncClient, tmp_path: Path, wait_run: Poll
) -> None:
    settings, api, client = apart, apart_api, await connect(apart)
    worker = start_worker(settings, tmp_path, env={"LONGRUN_MAX_CACHED_RUNS": str(RUNS)})
    steps = [
        {"id": "gate", "approval": {"message": "go on?"}},
        {"id": "after", "tool": "echo", "args": {"value": "approved"}, "depends_on": ["gate"]},
    ]
    try:
        run_ids = await at_most(8, [lambda: submit(api, steps)] * RUNS)
        assert len(set(run_ids)) == RUNS
        await until_waiting(client, settings, RUNS)
        assert worker.poll() is None, "the worker exited"

        worker.kill()  # SIGKILL: every run's state in it is lost
        worker.wait()
        # With the default cache (1,000 runs): runs it answers for push others out of it,
        # and they are replayed again when asked.
        worker = start_worker(settings, tmp_path)

        runs = await at_most(8, [partial(status_once_answered, api, r) for r in run_ids])
        assert [r["run_id"] for r in runs] == run_ids
        assert {r["status"] for r in runs} == {"waiting_approval"}
        assert all([a["approval_id"] for a in r["pending_approvals"]] == ["apr-gate"] for r in runs)

        chosen = random.sample(run_ids, APPROVED)
        for run_id in chosen:
            response = await api.post(
                f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"}
            )
            assert response.status_code == 202, response.text
        ended = await at_most(8, [partial(wait_run, r, http=api) for r in chosen])
        assert {r["status"] for r in ended} == {"completed"}
        assert {r["steps"][-1]["output"]["value"] for r in ended} == {"approved"}
        await until_waiting(client, settings, RUNS - APPROVED)
    finally:
        stop_processes(worker)
