"""Helpers the tests share: servers in threads, the stand-in handle, run submission."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from temporalio.api.batch.v1 import BatchOperationTermination
from temporalio.api.workflowservice.v1 import StartBatchOperationRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.app import create_app
from longrun.dev.stack import ServerThread, free_port
from longrun.settings import Settings

REPO = Path(__file__).resolve().parent.parent

Poll = Callable[..., Awaitable[dict[str, Any]]]

# A namespace of the tests' Temporal server (besides the default) for a test whose runs
# would crowd the others' listings.
APART = "longrun-tests-apart"


class StandIn:
    """Test-side handle on the stand-in model server: script it, read what it received."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.base_url = f"{url}/v1"

    def rule(self, **rule: Any) -> None:
        """Append a scripted rule (see longrun.dev.standin.Rule)."""
        httpx.post(f"{self.url}/_standin/rules", json=rule).raise_for_status()

    def scenario(self, rules: list[dict[str, Any]]) -> None:
        """Append a scenario: rules tried in order (see longrun.dev.standin.Rule)."""
        httpx.post(f"{self.url}/_standin/rules", json=rules).raise_for_status()

    def calls(self, match: str | None = None, role: str | None = None) -> list[dict[str, Any]]:
        """Calls received whose messages contain `match`, of one role if given."""
        params = {k: v for k, v in (("match", match), ("role", role)) if v}
        response = httpx.get(f"{self.url}/_standin/calls", params=params)
        response.raise_for_status()
        calls: list[dict[str, Any]] = response.json()
        return calls

    def profile(self, **profile: Any) -> None:
        """Behave as another kind of server until the next reset (see Profile)."""
        httpx.put(f"{self.url}/_standin/profile", json=profile).raise_for_status()

    def play(self, cassette: dict[str, Any]) -> None:
        """Answer from a recorded run's calls until the next reset (longrun/cassettes.py)."""
        httpx.put(f"{self.url}/_standin/cassette", json=cassette).raise_for_status()

    def generating(self) -> int:
        """How many answers the stand-in is generating right now."""
        response = httpx.get(f"{self.url}/_standin/state")
        response.raise_for_status()
        count: int = response.json()["generating"]
        return count

    def reset(self) -> None:
        """Drop all rules and recorded calls."""
        httpx.delete(f"{self.url}/_standin/rules").raise_for_status()


async def submit(api: httpx.AsyncClient, steps: list[dict[str, Any]], **extra: Any) -> str:
    """POST a plan and return its run id (asserting 202)."""
    response = await api.post("/v1/runs", json={"goal": "test", "plan": {"steps": steps}, **extra})
    assert response.status_code == 202, response.text
    run_id: str = response.json()["run_id"]
    return run_id


def sleep_for() -> str:
    """A duration of `sleep` no other process uses: how a test finds the sandboxed process
    among the host's (its pid inside the sandbox means nothing outside)."""
    return f"30.{uuid.uuid4().int % 10**9:09d}"


def sleeping(duration: str) -> list[int]:
    """The host pids of `sleep <duration>` processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == f"sleep\0{duration}\0".encode():
                found.append(int(entry.name))
    return found


# How long a started API or worker process may take to answer: on a machine loaded with
# other tests, importing and connecting took more than 30 s.
START_WAIT_S = 120.0


def _env(settings: Settings) -> dict[str, str]:
    """The environment of a longrun process configured like a deployment would be."""
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "TEMPORAL_NAMESPACE": settings.temporal_namespace,
        "LONGRUN_TASK_QUEUE": settings.task_queue,
        "OPENAI_BASE_URL": settings.openai_base_url or "",
        "OPENAI_API_KEY": "test-key",
        "LONGRUN_MODEL": settings.model,
        "LONGRUN_DATA_DIR": str(settings.data_dir),
        "LONGRUN_CONTINUE_AS_NEW_EVERY": str(settings.continue_as_new_every),
        "LONGRUN_HTTP_ALLOW_HOSTS": ",".join(settings.http_allow_hosts),
    }


def allow(settings: Settings, *urls: str) -> None:
    """Let runs of `settings` reach the servers at `urls` (host:port): in place, so a
    worker already serving these settings in this process takes them too, and one started
    after this, in a process of its own, is told."""
    for url in urls:
        netloc = httpx.URL(url).netloc.decode()
        if netloc not in settings.http_allow_hosts:
            settings.http_allow_hosts.append(netloc)


def start_api(
    settings: Settings, cwd: Path, port: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """The API (`uvicorn api.app:app`) as its own process (with `env` besides the
    settings'); returns once it answers."""
    with (cwd / "api.log").open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api.app:app", "--port", str(port)],
            cwd=cwd,
            env={**_env(settings), **(env or {})},
            stderr=sink,
            stdout=sink,
        )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"the API did not start: {(cwd / 'api.log').read_text()}")


def start_worker(
    settings: Settings,
    cwd: Path,
    *,
    ready: bool = True,
    env: dict[str, str] | None = None,
    module: str = "worker",
) -> subprocess.Popen[bytes]:
    """`python -m worker` (or another `module`) as its own process, configured like a
    deployment would be (and with `env` besides); returns once it polls (`ready`) or at
    once."""
    env = {**_env(settings), **(env or {})}
    log = cwd / f"worker-{len(list(cwd.glob('worker-*.log')))}.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", module], cwd=cwd, env=env, stderr=sink, stdout=sink
        )
    if not ready:
        return proc
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:  # wait until it polls
        if "worker polling" in log.read_text():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"worker did not start: {log.read_text()}")


@contextmanager
def api_process(settings: Settings, cwd: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """The API as its own process on a free port, for the block; its URL."""
    port = free_port()
    proc = start_api(settings, cwd, port, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_processes(proc)


def stop_processes(*procs: subprocess.Popen[bytes] | None) -> None:
    """Kill the processes still running (SIGKILL) and reap them."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


# About 60 KB of JSON made of short strings: no string is long enough to be stored alone.
LISTING_WORDS = [f"item-{i:05d}-of-the-listing" for i in range(2000)]


@contextmanager
def listing_server() -> Iterator[str]:
    """A server whose `/listing/{n}` answers `{"n": n, "words": LISTING_WORDS}`; its URL."""
    app = FastAPI()

    @app.get("/listing/{n}")
    async def listing(n: int) -> dict[str, Any]:
        return {"n": n, "words": LISTING_WORDS}

    with ServerThread(app) as server:
        yield server.url


# Above this many, a test's open runs are ended in one batch operation rather than one by one.
ONE_BY_ONE = 100


async def end_open_runs(client: Client, task_queue: str, reason: str = "the test is over") -> None:
    """Terminate the runs still open on a test's task queue. Later tests on the same server
    list runs (the approvals inbox, `GET /v1/runs?status=...`), and a run whose worker has
    gone answers nothing: each would wait for it."""
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    found = [wf async for wf in client.list_workflows(query, limit=ONE_BY_ONE + 1)]
    if not found:
        return
    if len(found) <= ONE_BY_ONE:
        await asyncio.gather(*(_terminated(client, wf.id, wf.run_id, reason) for wf in found))
        return
    await client.workflow_service.start_batch_operation(
        StartBatchOperationRequest(
            namespace=client.namespace,
            visibility_query=query,
            job_id=f"end-{task_queue}-{uuid.uuid4().hex[:8]}",
            reason=reason,
            max_operations_per_second=2_000,
            termination_operation=BatchOperationTermination(),
        )
    )
    for _ in range(300):
        if not (await client.count_workflows(query)).count:
            return
        await asyncio.sleep(1)
    raise AssertionError(f"the runs on {task_queue} were not terminated")


async def _terminated(client: Client, workflow_id: str, run_id: str | None, reason: str) -> None:
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:  # it ended meanwhile
            raise


@asynccontextmanager
async def api_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API app with these settings, called through ASGI."""
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        yield http
    await app.state.mcp_hub.aclose()  # MCP servers it started exit
