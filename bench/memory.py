"""What runs waiting for a person cost: a worker's memory and CPU, its resumption after a
crash, and listing them, against bare waiting workflows.

Starts a headless Temporal dev server and, one after the other, two worker processes:

- longrun: `worker.serving` (the run workflow and its activities); N runs of a plan whose
  only step is an approval gate, started as `POST /v1/runs` starts them (api/admission.py:
  `run_input`, then `start_run`), so each ends up waiting for a decision;
- bare: a workflow defined here that waits on a signal and answers a `status` query,
  nothing else.

Each worker first takes a few warm-up runs (its imports and first sandbox are paid then),
then N more, started a bounded number at a time. Then, for each side:

- cost: measured from outside the worker process, once every run's first workflow task is
  done and nothing is pending: the growth of its resident memory (VmRSS) per run, the CPU
  time (user + system) it spent per run, and the median duration of a run's first workflow
  task (scheduled -> completed in its history, so its wait for a poll counts: a longrun
  worker polls as many tasks as the server has and queues them itself, a bare one polls a
  few; printed too: started -> completed). All runs stay in the worker's cache
  (`max_cached_workflows`, 1,000 by default, is raised to N + warm-up if needed);
- resumption after a crash: the worker is killed (SIGKILL) and a new one started (same
  cache size); timed from the kill until every one of the N runs has answered its `status`
  query (longrun: the query `GET /v1/runs/{id}` asks, through the API's own retrying call,
  api/reading.py `query_until`), a bounded number asked at a time. Each answer replays the
  run's history on the new worker. The first ~10 s after the kill are a floor on both sides:
  Temporal sends a run's query to the dead worker's sticky queue until it has gone 10 s
  without polling, and only then to the task queue.

Then, both sides' runs still open on the server and Temporal's visibility listing all of
them: `GET /v1/runs?status=waiting_approval` (the API built in this process and called over
ASGI, so no network stack is timed) against bare Temporal's list of its waiting workflows
(`list_workflows` by workflow type and `Running`), the first page of the same size each,
alternating; the client's `list_workflows` with the API's own query is timed beside them.

Prints the figures and their ratios, and always exits 0: nothing here is a pass/fail.

    .venv/bin/python bench/memory.py [--runs 10000] [--warmup 5] [--lists 200]
        [--page-size 100] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from asyncio.subprocess import PIPE, Process
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow uses none of it.
    import httpx
    from figures import Figure
    from procs import cpu_s, rss_kb

    from activities.mcp import McpHub
    from api.admission import (
        IDEMPOTENCY_NAMESPACE,
        fresh_id,
        request_digest,
        run_input,
        start_run,
    )
    from api.app import create_app
    from api.auth import Principal
    from api.reading import STATUS_FILTERS, WORKFLOW_TYPE, query_until
    from longrun import wire
    from longrun.contracts import RunInput, RunRequest, RunState
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.policy import load_policy
    from longrun.settings import Settings
    from longrun.temporal import connect, ensure_search_attributes
    from worker import serving

SIDES = ("bare", "longrun")
BARE_TYPE = "bench.Waiting"
# The API's listing of runs waiting for a person (api/routes/runs.py `list_runs`, a local
# admin: no narrowing to a tenant), and bare Temporal's of its waiting workflows.
LONGRUN_WAITING = f"WorkflowType = '{WORKFLOW_TYPE}' AND ({STATUS_FILTERS['waiting_approval']})"
BARE_WAITING = f"WorkflowType = '{BARE_TYPE}' AND ExecutionStatus = 'Running'"
# A query unanswered this long is asked again (the API answers 503 after as long).
QUERY_WAIT_S = 20.0
GIVE_UP_S = 600.0  # on a run that does not settle or answer: something is broken
T = TypeVar("T")


@workflow.defn(name=BARE_TYPE)
class WaitingWorkflow:
    """Waits for one signal: the least a workflow waiting for a person can be."""

    def __init__(self) -> None:
        self.decided = False

    @workflow.signal(name="decide")
    def decide(self) -> None:
        """The decision it waits for."""
        self.decided = True

    @workflow.query(name="status")
    def status(self) -> dict[str, bool]:
        """Whether it was decided."""
        return {"decided": self.decided}

    @workflow.run
    async def run(self) -> None:
        """Wait for the decision."""
        await workflow.wait_condition(lambda: self.decided)


@dataclass
class Cost:
    """What N waiting runs cost one worker process, and its successor after a kill."""

    rss_kb_per_run: float
    cpu_ms_per_run: float
    first_task_ms: float  # started -> completed
    first_task_scheduled_ms: float  # scheduled -> completed
    resume_s: float  # from the kill until every run answered its status
    restart_s: float  # from the kill until the new worker polled


@dataclass
class Waiting:
    """Both sides' costs and the list calls' milliseconds."""

    runs: int
    page_size: int
    costs: dict[str, Cost]
    list_ms: dict[str, list[float]]

    def list_quantile(self, name: str, q: int) -> float:
        """The q-th percentile of one list call's milliseconds."""
        return statistics.quantiles(self.list_ms[name], n=100, method="inclusive")[q - 1]


def _settings(address: str, queue: str, data_dir: Path) -> Settings:
    return Settings(
        _env_file=None,
        TEMPORAL_ADDRESS=address,
        LONGRUN_TASK_QUEUE=queue,
        LONGRUN_DATA_DIR=data_dir,
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OPENAI_API_KEY="x",
    )


async def serve(side: str, address: str, queue: str, data_dir: Path, cached: int) -> None:
    """The worker process: poll `queue` until stdin closes; say "ready" once polling."""
    settings = _settings(address, queue, data_dir)
    client = await connect(settings)
    worker: AbstractAsyncContextManager[Worker] = (
        serving(client, settings.model_copy(update={"max_cached_runs": cached}))
        if side == "longrun"
        else Worker(
            client, task_queue=queue, workflows=[WaitingWorkflow], max_cached_workflows=cached
        )
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def _at_most(n: int, coros: Iterable[Awaitable[T]]) -> list[T]:
    """Await `coros`, at most `n` at a time (thousands at once would queue behind each
    other), their results in order."""
    gate = asyncio.Semaphore(n)

    async def one(coro: Awaitable[T]) -> T:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


class Starter:
    """Starts one side's runs: longrun's as `POST /v1/runs` does, by a local admin."""

    def __init__(self, client: Client, side: str, settings: Settings) -> None:
        self.client, self.side, self.settings = client, side, settings
        self.caller = Principal(name="local", roles=frozenset({"admin"}), secrets=frozenset({"*"}))
        gate = {"id": "gate", "approval": {"message": "go on?"}}
        self.body = RunRequest.model_validate(
            {"goal": "bench: wait for a person", "plan": {"steps": [gate]}}
        )
        self.inp: RunInput | None = None

    async def start(self) -> WorkflowHandle[Any, Any]:
        """Start one run; its handle."""
        if self.side == "bare":
            return await self.client.start_workflow(
                BARE_TYPE, id=f"bench-wait-{uuid.uuid4().hex}", task_queue=self.settings.task_queue
            )
        if self.inp is None:  # checked once: every run is of the same request
            policy, hub = load_policy(self.settings.policy_file), McpHub.of(self.settings)
            self.inp = await run_input(self.body, self.settings, policy, hub, self.caller)
        run_id = fresh_id("run", IDEMPOTENCY_NAMESPACE, self.caller.name, None)
        await start_run(
            self.client,
            self.settings,
            self.inp.model_copy(update={"run_id": run_id, **self.caller.as_owner()}),
            request_sha256=request_digest(self.body),
        )
        return self.client.get_workflow_handle(run_id)


async def _settled(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the run has no workflow task or activity pending."""
    for _ in range(int(GIVE_UP_S / 0.2)):
        raw = (await handle.describe()).raw_description
        idle = not raw.HasField("pending_workflow_task") and not raw.pending_activities
        if idle and raw.workflow_execution_info.history_length > 2:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{handle.id} still has work pending after {GIVE_UP_S:g} s")


async def _first_task_ms(handle: WorkflowHandle[Any, Any]) -> tuple[float, float]:
    """A run's first workflow task: started -> completed, and scheduled -> completed (its
    wait for a poll included), in milliseconds."""
    times: dict[int, datetime] = {}
    async for event in handle.fetch_history_events():
        times.setdefault(event.event_type, event.event_time.ToDatetime())
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            done = times[EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
            started = done - times[EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED]
            scheduled = done - times[EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED]
            return started.total_seconds() * 1000, scheduled.total_seconds() * 1000
    raise RuntimeError(f"{handle.id} has completed no workflow task")


async def _answered(side: str, handle: WorkflowHandle[Any, Any]) -> None:
    """Ask the run its status until a worker answers; it must still be waiting."""
    for _ in range(int(GIVE_UP_S / QUERY_WAIT_S)):
        if side == "bare":
            answered, state = await query_until(handle, "status", dict, wait_s=QUERY_WAIT_S)
            waiting = answered and state == {"decided": False}
        else:
            answered, state = await query_until(handle, wire.STATUS, RunState, wait_s=QUERY_WAIT_S)
            waiting = answered and state.status == "waiting_approval"
        if answered:
            if not waiting:
                raise RuntimeError(f"{handle.id} is not waiting: {state}")
            return
    raise RuntimeError(f"{handle.id} answered no query in {GIVE_UP_S:g} s")


async def _worker(side: str, argv: list[str]) -> Process:
    """A new worker process for `side`, once it polls."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, *argv, stdin=PIPE, stdout=PIPE
    )
    assert proc.stdout is not None
    if (await proc.stdout.readline()).strip() != b"ready":
        await _kill(proc)
        raise RuntimeError(f"the {side} worker did not start")
    return proc


async def _kill(proc: Process) -> None:
    """SIGKILL, as a crash: nothing in the process is saved or handed back."""
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()


async def measure_side(
    client: Client, side: str, address: str, tmp: Path, runs: int, warmup: int, concurrency: int
) -> Cost:
    """Start one worker process for `side`, give it warm-up runs, then N, and measure; then
    kill it, start another and time until every run answers."""
    queue = f"bench-{side}-{uuid.uuid4().hex[:8]}"
    starter = Starter(client, side, _settings(address, queue, tmp / side))
    argv = ["--serve", side, "--address", address, "--queue", queue]
    argv += ["--data-dir", str(tmp / side), "--cached", str(max(runs + warmup, 1000))]
    proc = await _worker(side, argv)
    try:
        warm = [await starter.start() for _ in range(warmup)]
        await _at_most(concurrency, (_settled(h) for h in warm))
        await asyncio.sleep(1)
        rss, cpu = rss_kb(proc.pid), cpu_s(proc.pid)
        handles = await _at_most(concurrency, (starter.start() for _ in range(runs)))
        await _at_most(concurrency, (_settled(h) for h in handles))
        await asyncio.sleep(1)
        rss, cpu = rss_kb(proc.pid) - rss, cpu_s(proc.pid) - cpu
        sample = handles[:: max(1, runs // 50)]
        first, scheduled = zip(
            *await _at_most(concurrency, (_first_task_ms(h) for h in sample)), strict=True
        )
        killed = time.perf_counter()
        await _kill(proc)
        proc = await _worker(side, argv)
        restart = time.perf_counter() - killed
        await _at_most(concurrency, (_answered(side, h) for h in handles))
        resume = time.perf_counter() - killed
    finally:
        await _kill(proc)
    median = statistics.median
    return Cost(rss / runs, cpu * 1000 / runs, median(first), median(scheduled), resume, restart)


async def _listed(client: Client, query: str, n: int) -> None:
    """Wait until Temporal's visibility lists `n` workflows for `query` (it follows the
    workflows a moment later)."""
    for _ in range(3000):
        if (listed := (await client.count_workflows(query)).count) == n:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{listed} workflows listed for {query!r}, not {n}")


async def _first_page(client: Client, query: str, page_size: int) -> None:
    listing = client.list_workflows(query, page_size=page_size)
    await listing.fetch_next_page()
    if len(listing.current_page or []) != page_size:
        raise RuntimeError(f"a short first page for {query!r}")


async def _get_page(api: httpx.AsyncClient, page_size: int) -> None:
    listed = await api.get(f"/v1/runs?status=waiting_approval&page_size={page_size}")
    listed.raise_for_status()
    if len(listed.json()["runs"]) != page_size:
        raise RuntimeError("a short first page of GET /v1/runs?status=waiting_approval")


async def measure_lists(
    client: Client, settings: Settings, listed: int, lists: int, page_size: int
) -> dict[str, list[float]]:
    """Time the API's list of waiting runs and bare Temporal's, alternating, each `lists`
    times after two untimed; and the client's call with the API's query beside them."""
    await _listed(client, LONGRUN_WAITING, listed)
    await _listed(client, BARE_WAITING, listed)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        calls: dict[str, Callable[[], Awaitable[None]]] = {
            "GET": lambda: _get_page(api, page_size),
            "list": lambda: _first_page(client, LONGRUN_WAITING, page_size),
            "bare list": lambda: _first_page(client, BARE_WAITING, page_size),
        }
        ms: dict[str, list[float]] = {name: [] for name in calls}
        for n in range(lists + 2):
            for name in list(calls) if n % 2 == 0 else reversed(list(calls)):
                started = time.perf_counter()
                await calls[name]()
                if n >= 2:
                    ms[name].append((time.perf_counter() - started) * 1000)
    return ms


async def measure(
    runs: int, warmup: int, lists: int = 200, page_size: int = 100, concurrency: int = 50
) -> Waiting:
    """Both sides' costs, each measured in its own worker process on one dev server, then
    the list calls over both sides' runs (a page at most as long as the runs listed)."""
    page_size = min(page_size, runs + warmup)
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = _settings(server.address, "unused", Path(tmp) / "api")
            client = await connect(settings)
            await ensure_search_attributes(client)
            costs = {
                side: await measure_side(
                    client, side, server.address, Path(tmp), runs, warmup, concurrency
                )
                for side in SIDES
            }
            list_ms = await measure_lists(client, settings, runs + warmup, lists, page_size)
    return Waiting(runs, page_size, costs, list_ms)


def report(result: Waiting, runs: int) -> None:
    """Print each side's figures and the ratios."""
    print(f"{runs} runs waiting in one worker process (after warm-up)")
    print(f"{'':<34} {'bare':>9} {'longrun':>9} {'ratio':>7}")
    for name, label, scale in [
        ("rss_kb_per_run", "memory per run (KB)", 1.0),
        ("cpu_ms_per_run", "worker CPU per run (ms)", 1.0),
        ("first_task_ms", "first workflow task (ms)", 1.0),
        ("first_task_scheduled_ms", "  from scheduled (ms)", 1.0),
        ("restart_s", "kill -> new worker polling (s)", 1.0),
        ("resume_s", "kill -> all answering (s)", 1.0),
        ("resume_s", "kill -> all answering, per run (ms)", 1000 / runs),
    ]:
        bare, ours = getattr(result.costs["bare"], name), getattr(result.costs["longrun"], name)
        ratio = ours / bare if bare else float("nan")
        print(f"{label:<34} {bare * scale:>9.1f} {ours * scale:>9.1f} {ratio:>7.2f}")
    print(f"first page of {result.page_size}, {len(result.list_ms['GET'])} calls each")
    print(f"{'list call (ms)':<50} {'p50':>8} {'p95':>8} {'p99':>8}")
    for name, label in [
        ("GET", "GET /v1/runs?status=waiting_approval"),
        ("list", "list_workflows, the API's query"),
        ("bare list", "list_workflows, bare waiting workflows"),
    ]:
        q = [result.list_quantile(name, p) for p in (50, 95, 99)]
        print(f"{label:<50} {q[0]:>8.1f} {q[1]:>8.1f} {q[2]:>8.1f}")


def figures(result: Waiting, runs: int) -> list[Figure]:
    """The suite's figures of this benchmark."""
    bare, ours = result.costs["bare"], result.costs["longrun"]
    q, size = result.list_quantile, result.page_size
    return [
        Figure(
            "waiting runs",
            f"worker memory per run, {runs} waiting for approval vs on a signal",
            "KB",
            ours.rss_kb_per_run,
            bare.rss_kb_per_run,
            target="<= 1.1",
        ),
        Figure(
            "waiting runs",
            "worker CPU per run until it waits",
            "ms",
            ours.cpu_ms_per_run,
            bare.cpu_ms_per_run,
        ),
        Figure(
            "waiting runs",
            "a run's first workflow task, scheduled to completed",
            "ms",
            ours.first_task_scheduled_ms,
            bare.first_task_scheduled_ms,
            target="<= 1.5",
        ),
        Figure(
            "waiting runs",
            f"resume after worker restart: all {runs} answering",
            "s",
            ours.resume_s,
            bare.resume_s,
        ),
        Figure(
            "waiting runs",
            "resume after worker restart: per run",
            "ms",
            ours.resume_s * 1000 / runs,
            bare.resume_s * 1000 / runs,
        ),
        *(
            Figure(
                "waiting runs",
                f"GET ?status=waiting_approval {label} (page of {size}) vs list_workflows",
                "ms",
                q("GET", p),
                q("bare list", p),
            )
            for label, p in (("p50", 50), ("p99", 99))
        ),
    ]


def main() -> None:
    """Parse the arguments: measure, or (`--serve`) be one side's worker process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000, help="waiting runs per side")
    parser.add_argument("--warmup", type=int, default=5, help="runs per side before measuring")
    parser.add_argument("--lists", type=int, default=200, help="timed list calls of each kind")
    parser.add_argument("--page-size", type=int, default=100, help="runs on a listed page")
    parser.add_argument("--concurrency", type=int, default=50, help="starts or queries at once")
    parser.add_argument("--serve", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cached", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.address, args.queue, args.data_dir, args.cached))
        return
    if min(args.runs, args.warmup, args.concurrency) < 1 or args.lists < 2:
        parser.error("--runs, --warmup and --concurrency must be >= 1, --lists >= 2")
    if not 1 <= args.page_size <= min(100, args.runs):
        parser.error("--page-size must be from 1 to 100, and at most --runs")
    waiting = asyncio.run(
        measure(args.runs, args.warmup, args.lists, args.page_size, args.concurrency)
    )
    report(waiting, args.runs)


if __name__ == "__main__":
    main()
