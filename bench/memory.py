"""What a run waiting for a person costs a worker: longrun against a bare waiting workflow.

Starts a headless Temporal dev server and, one after the other, two worker processes:

- longrun: `worker.serving` (the run workflow and its activities); N runs of a plan whose
  only step is an approval gate, started as `POST /v1/runs` starts them, so each ends up
  waiting for a decision;
- bare: a workflow defined here that waits on a signal, nothing else.

Each worker first takes a few warm-up runs (its imports and first sandbox are paid then),
then N more. Measured from outside the worker process, once every run's first workflow task
is done and nothing is pending: the growth of its resident memory (VmRSS) per run, the CPU
time (user + system) it spent per run, and the median duration of a run's first workflow
task (started -> completed in its history). All runs stay in the worker's cache
(`max_cached_workflows`, 1,000 by default, is raised to N if needed).

Prints the figures and their ratios, and always exits 0: nothing here is a pass/fail.

    .venv/bin/python bench/memory.py [--runs 1000] [--warmup 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import uuid
from asyncio.subprocess import PIPE
from collections.abc import Awaitable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow uses none of it.
    from figures import Figure

    from activities.tools import REGISTRY
    from longrun.attributes import STATUS_ATTRIBUTE
    from longrun.contracts import Plan, RunConfig, RunInput, Step
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.plans import normalize_plan
    from longrun.settings import Settings
    from longrun.temporal import connect, ensure_search_attributes
    from worker import serving
    from workflows import RunWorkflow

SIDES = ("bare", "longrun")
T = TypeVar("T")


@workflow.defn(name="bench.Waiting")
class WaitingWorkflow:
    """Waits for one signal: the least a workflow waiting for a person can be."""

    def __init__(self) -> None:
        self.decided = False

    @workflow.signal(name="decide")
    def decide(self) -> None:
        """The decision it waits for."""
        self.decided = True

    @workflow.run
    async def run(self) -> None:
        """Wait for the decision."""
        await workflow.wait_condition(lambda: self.decided)


@dataclass
class Cost:
    """What N waiting runs cost one worker process."""

    rss_kb_per_run: float
    cpu_ms_per_run: float
    first_task_ms: float


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


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _start(client: Client, side: str, queue: str) -> WorkflowHandle[Any, Any]:
    if side == "bare":
        return await client.start_workflow(
            WaitingWorkflow.run, id=f"bench-wait-{uuid.uuid4().hex}", task_queue=queue
        )
    run_id = f"run-{uuid.uuid4().hex}"
    plan = Plan(steps=[Step.model_validate({"id": "gate", "approval": {"message": "go on?"}})])
    inp = RunInput(
        run_id=run_id,
        goal="bench: wait for a person",
        plan=normalize_plan(plan, REGISTRY),
        labels={},
        config=RunConfig(default_model="x"),
    )
    attrs = TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "running")])
    return await client.start_workflow(
        RunWorkflow.run, inp, id=run_id, task_queue=queue, search_attributes=attrs
    )


async def _settled(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the run has no workflow task or activity pending."""
    while True:
        raw = (await handle.describe()).raw_description
        idle = not raw.HasField("pending_workflow_task") and not raw.pending_activities
        if idle and raw.workflow_execution_info.history_length > 2:
            return
        await asyncio.sleep(0.2)


async def _first_task_ms(handle: WorkflowHandle[Any, Any]) -> float:
    started = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started = event.event_time.ToDatetime()
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            assert started is not None
            return (event.event_time.ToDatetime() - started).total_seconds() * 1000
    raise RuntimeError(f"{handle.id} has completed no workflow task")


async def _in_batches(coros: Iterable[Awaitable[T]], size: int = 50) -> list[T]:
    """Await `coros` `size` at a time (a thousand at once would queue behind each other)."""
    pending, done = list(coros), []
    for i in range(0, len(pending), size):
        done += await asyncio.gather(*pending[i : i + size])
    return done


async def measure_side(
    client: Client, side: str, address: str, tmp: Path, runs: int, warmup: int
) -> Cost:
    """Start one worker process for `side`, give it warm-up runs, then N, and measure."""
    queue = f"bench-{side}-{uuid.uuid4().hex[:8]}"
    argv = ["--serve", side, "--address", address, "--queue", queue]
    argv += ["--data-dir", str(tmp / side), "--cached", str(max(runs + warmup, 1000))]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, *argv, stdin=PIPE, stdout=PIPE
    )
    try:
        assert proc.stdout is not None
        if (await proc.stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"the {side} worker did not start")
        warm = [await _start(client, side, queue) for _ in range(warmup)]
        await _in_batches(_settled(h) for h in warm)
        await asyncio.sleep(1)
        rss, cpu = _rss_kb(proc.pid), _cpu_s(proc.pid)
        handles = await _in_batches(_start(client, side, queue) for _ in range(runs))
        await _in_batches(_settled(h) for h in handles)
        await asyncio.sleep(1)
        rss, cpu = _rss_kb(proc.pid) - rss, _cpu_s(proc.pid) - cpu
        first = await _in_batches(_first_task_ms(h) for h in handles[:: max(1, runs // 50)])
        return Cost(rss / runs, cpu * 1000 / runs, statistics.median(first))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()


async def measure(runs: int, warmup: int) -> dict[str, Cost]:
    """Both sides' costs, each measured in its own worker process on one dev server."""
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            client = await connect(_settings(server.address, "unused", Path(tmp)))
            await ensure_search_attributes(client)
            return {
                side: await measure_side(client, side, server.address, Path(tmp), runs, warmup)
                for side in SIDES
            }


def report(costs: dict[str, Cost], runs: int) -> None:
    """Print each side's figures and the ratios."""
    print(f"{runs} runs waiting in one worker process (after warm-up)")
    print(f"{'':<26} {'bare':>9} {'longrun':>9} {'ratio':>7}")
    for name, label in [
        ("rss_kb_per_run", "memory per run (KB)"),
        ("cpu_ms_per_run", "worker CPU per run (ms)"),
        ("first_task_ms", "first workflow task (ms)"),
    ]:
        bare, ours = getattr(costs["bare"], name), getattr(costs["longrun"], name)
        ratio = ours / bare if bare else float("nan")
        print(f"{label:<26} {bare:>9.1f} {ours:>9.1f} {ratio:>7.2f}")


def figures(costs: dict[str, Cost], runs: int) -> list[Figure]:
    """The suite's figures of this benchmark."""
    bare, ours = costs["bare"], costs["longrun"]
    return [
        Figure(
            "waiting runs",
            f"worker memory per run, {runs} waiting for approval vs on a signal",
            "KB",
            ours.rss_kb_per_run,
            bare.rss_kb_per_run,
            target="<= 1.5",
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
            "a run's first workflow task",
            "ms",
            ours.first_task_ms,
            bare.first_task_ms,
            target="<= 1.5",
        ),
    ]


def main() -> None:
    """Parse the arguments: measure, or (`--serve`) be one side's worker process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000, help="waiting runs per side")
    parser.add_argument("--warmup", type=int, default=5, help="runs per side before measuring")
    parser.add_argument("--serve", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cached", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.address, args.queue, args.data_dir, args.cached))
        return
    if args.runs < 1 or args.warmup < 1:
        parser.error("--runs and --warmup must be >= 1")
    report(asyncio.run(measure(args.runs, args.warmup)), args.runs)


if __name__ == "__main__":
    main()
