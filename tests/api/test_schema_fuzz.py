"""The API against its own OpenAPI document: schemathesis generates requests (valid,
invalid and stateful sequences) to the real app over real HTTP, with a worker process
running the runs it starts. Bounded and seeded, so a failure reproduces; every answer must
be a documented status, and none a server error."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from longrun.dev.stack import TemporalDevServer, free_port
from longrun.settings import Settings
from tests.helpers import start_api, start_worker, stop_processes

pytestmark = pytest.mark.long

SEED = 20261203
EXAMPLES = 20  # per operation and phase
# Checks left out, and why: `positive_data_acceptance` expects any schema-valid request to
# be taken, but a tool name must be a registered tool and a page token one the listing
# gave out; `use_after_free` reads a run's artifact list after DELETE as a deleted
# resource, but the run (and its empty list) is still there.
LEFT_OUT = "positive_data_acceptance,use_after_free"
# `--checks=all` limits answers to 10 s; a long poll (`/events/page?wait_s=…`) answers when
# its wait is up, by design, so the limit is above the longest wait (speed is for bench/).
RESPONSE_LIMIT_S = 60
# The coverage phase walks every property of a body to its bounds; a plan's steps may hold
# child runs with plans of their own, which makes that tens of thousands of requests for
# the operations that take a plan. They get the other phases; the rest get all four.
PLAN_TAKING = r"^/v1/(runs|schedules|runs/\{run_id\}/fork)$"


async def test_the_api_keeps_to_its_openapi_document(settings: Settings, tmp_path: Path) -> None:
    # A Temporal of its own: listings must show only runs a worker here can answer for
    # (a run whose worker is gone answers 503, rightly, which would count as a failure).
    async with TemporalDevServer(tmp_path / "fuzz.sqlite", port=free_port()) as temporal:
        settings = settings.model_copy(update={"temporal_address": temporal.address})
        runs = await _fuzz(settings, tmp_path)
    for found in runs:
        assert found.returncode == 0, found.stdout[-6000:] + found.stderr[-2000:]
        assert "generated" in found.stdout, found.stdout[-2000:]
    assert len(runs) == 2


async def _fuzz(settings: Settings, tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    # The API and the worker as processes of their own: they know the same tools (this
    # test process also holds tools other tests registered).
    worker = start_worker(settings, tmp_path)
    api = None
    try:
        port = free_port()
        api = start_api(settings, tmp_path, port)
        schema = f"http://127.0.0.1:{port}/openapi.json"
        common = [
            "--checks=all",
            f"--exclude-checks={LEFT_OUT}",
            f"--max-response-time={RESPONSE_LIMIT_S}",
            f"--max-examples={EXAMPLES}",
            f"--seed={SEED}",
            "--workers=1",
            "--request-timeout=30",
            "--generation-database=none",
            "--no-color",
        ]
        phases = await _st(tmp_path, schema, "--phases=examples,fuzzing,stateful", *common)
        if phases.returncode != 0:
            return [phases]
        coverage = await _st(
            tmp_path, schema, "--phases=coverage", f"--exclude-path-regex={PLAN_TAKING}", *common
        )
        return [phases, coverage]
    finally:
        stop_processes(api, worker)


async def _st(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    st = str(Path(sys.executable).parent / "st")
    return await asyncio.to_thread(
        subprocess.run,
        [st, "run", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
