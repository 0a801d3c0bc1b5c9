"""What longrun costs per step on top of bare Temporal.

Starts one headless Temporal dev server and, in this process, two workers on the same client
(pydantic data converter): one hosts longrun's `RunWorkflow` with its real activities, the
other a bare workflow defined here. Each side then runs N no-op steps, one activity per step,
strictly in sequence:

- longrun: a plan of N `echo` tool steps (each depends on the previous one), started the way
  `POST /v1/runs` starts a run, each step an activity task (`echo` is a quick tool, which
  runs as a local activity: bench/quick.py measures those);
- bare: `bench.Bare`, a loop of N `workflow.execute_activity` calls of a no-op activity with
  the timeouts and retry policy of a longrun tool step.

Runs alternate between the sides (and which side goes first) so both share the machine's
noise. A run is timed from start to result, so per-step ms = run time / N and includes
starting and completing the workflow, spread over its steps.

Reading the ratio (longrun / bare, medians): 1.00 means longrun adds nothing measurable to
Temporal's own cost of a workflow task plus an activity task per step; 1.25 means a step
costs a quarter more. The target is <= 1.25 at N=50. Both workflows run in the sandbox.

Throughput: then batches of concurrent runs (50 runs of 10 steps by default), the sides in
turn, 5 rounds by default, medians kept: steps per second, and the CPU this process (both
workers and the client) spent per step meanwhile.
The script prints and always exits 0: speed is never a pass/fail here.

Caveat: the dev server reads its transfer queue at most 20 times a second
(`history.transferProcessorMaxPollRPS`), and every step waits for one such read to dispatch
its next workflow task, so wall time per step is quantised at about 50 ms and overhead below
that slack is hidden. The second ratio, "worker", therefore also compares the time the
workers held each run's tasks (workflow task started -> completed plus activity started ->
completed, from the run's history): that is where longrun's own code runs.

    .venv/bin/python bench/overhead.py [--steps 50] [--runs 5] [--warmup 1] [--batch-runs 50]
        [--batch-rounds 5]
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
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

# `python bench/overhead.py` puts bench/ on sys.path, not the repo root holding the packages.
# Guarded because the workflow sandbox re-executes this module for every bare run.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import, and the bare workflow only reads constants.
    # It also spares the sandbox re-importing all of this for every bare run, a cost the
    # longrun side does not pay either (its worker imports `workflows` once for all runs).
    from figures import Figure

    from api.admission import run_memo, run_search_attributes
    from longrun import wire
    from longrun.catalogue import CATALOGUE
    from longrun.contracts import Plan, RunConfig, RunInput, Step
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.plans import normalize_plan
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving
    from workflows.common import TOOL_HEARTBEAT_TIMEOUT, TOOL_TIMEOUT, retry_policy

# The policy longrun gives a tool step without its own `retry`.
TOOL_RETRY = retry_policy(None)
# Today's changes but the quick tools': a run started with them calls every tool through the
# task queue, as a bare workflow's activities go. Here `echo` stands for any tool step; quick
# steps, which skip the task queue, are measured in bench/quick.py.
TASK_QUEUE_CHANGES = tuple(c for c in wire.STARTED_WITH if c != "quick-tools-local")
TARGET_RATIO = 1.25


@activity.defn(name="bench.noop")
async def noop(value: int) -> int:
    """Do nothing: one step of the bare baseline."""
    return value


@workflow.defn(name="bench.Bare")
class BareWorkflow:
    """N sequential no-op activities, timed and retried like longrun tool steps."""

    @workflow.run
    async def run(self, steps: int) -> int:
        """Run `steps` no-op activities one after another."""
        for i in range(steps):
            await workflow.execute_activity(
                noop,
                i,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=TOOL_RETRY,
            )
        return steps


Timing = tuple[float, float]  # (wall seconds, worker-busy seconds) of one run

_DONE = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "workflow_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
}


async def worker_busy(handle: WorkflowHandle[Any, Any]) -> float:
    """Seconds the workers held this run's workflow and activity tasks, per its history."""
    times: dict[int, datetime] = {}
    busy = 0.0
    async for event in handle.fetch_history_events():
        at = event.event_time.ToDatetime()
        times[event.event_id] = at
        if event.event_type in _DONE:
            started = getattr(event, _DONE[event.event_type]).started_event_id
            busy += (at - times[started]).total_seconds()
    return busy


async def timed(client: Client, handle_id: str, started: float) -> Timing:
    """The wall time since `started` and the worker-busy time of the finished run."""
    wall = time.perf_counter() - started
    return wall, await worker_busy(client.get_workflow_handle(handle_id))


async def run_longrun(
    client: Client, task_queue: str, steps: int, timed_: bool = True
) -> Timing | None:
    """Times of one longrun run of `steps` echo steps, started as the API starts runs."""
    run_id = f"run-{uuid.uuid4().hex}"
    plan = Plan(steps=[Step(id=f"s{i}", tool="echo", args={"value": i}) for i in range(steps)])
    inp = RunInput(
        run_id=run_id,
        goal=f"bench: {steps} no-op steps",
        plan=normalize_plan(plan, CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    started = time.perf_counter()
    await client.execute_workflow(
        wire.RUN_WORKFLOW,
        inp,
        id=run_id,
        task_queue=task_queue,
        search_attributes=run_search_attributes(inp),
        memo=run_memo(inp, TASK_QUEUE_CHANGES),
    )
    return await timed(client, run_id, started) if timed_ else None


async def run_bare(
    client: Client, task_queue: str, steps: int, timed_: bool = True
) -> Timing | None:
    """Times of one bare run of `steps` no-op activities."""
    workflow_id = f"bench-bare-{uuid.uuid4().hex}"
    started = time.perf_counter()
    await client.execute_workflow(BareWorkflow.run, steps, id=workflow_id, task_queue=task_queue)
    return await timed(client, workflow_id, started) if timed_ else None


@dataclass
class Overhead:
    """What the benchmark measured: timings of sequential runs, and the throughput of
    batches of concurrent runs per side (median steps per second, and this process's CPU
    per step)."""

    steps: int
    runs: int
    warmup: int
    times: dict[str, list[Timing]]
    batch: tuple[int, int]  # runs x steps of the throughput batch
    steps_per_s: dict[str, float] = field(default_factory=dict)
    cpu_ms_per_step: dict[str, float] = field(default_factory=dict)

    def median_ms(self, side: str, which: int) -> float:
        """Median milliseconds per step of `side`, wall (0) or worker (1)."""
        return statistics.median(t[which] * 1000 / self.steps for t in self.times[side])


async def _batch(client: Client, side: str, queue: str, runs: int, steps: int) -> float:
    """Start `runs` runs of `steps` steps at once on `side`; seconds until all are done."""
    run = run_longrun if side == "longrun" else run_bare
    started = time.perf_counter()
    await asyncio.gather(*(run(client, queue, steps, timed_=False) for _ in range(runs)))
    return time.perf_counter() - started


async def measure(
    steps: int,
    runs: int,
    warmup: int,
    batch_runs: int = 50,
    batch_steps: int = 10,
    batch_rounds: int = 5,
) -> Overhead:
    """Start Temporal and both workers in this process; run the sides interleaved, one run
    at a time, then rounds of a batch of concurrent runs on each side."""
    result = Overhead(steps, runs, warmup, {"longrun": [], "bare": []}, (batch_runs, batch_steps))
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-longrun-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            queues = {"longrun": settings.task_queue, "bare": f"bench-bare-{uuid.uuid4().hex[:8]}"}
            client = await connect(settings)
            async with (
                serving(client, settings),
                Worker(
                    client, task_queue=queues["bare"], workflows=[BareWorkflow], activities=[noop]
                ),
            ):
                for n in range(warmup + runs):
                    sides = ["longrun", "bare"] if n % 2 == 0 else ["bare", "longrun"]
                    for side in sides:
                        run = run_longrun if side == "longrun" else run_bare
                        took = await run(client, queues[side], steps)
                        if n >= warmup and took is not None:
                            result.times[side].append(took)
                total = batch_runs * batch_steps
                batches: dict[str, list[tuple[float, float]]] = {"longrun": [], "bare": []}
                for n in range(batch_rounds):  # each side first in turn
                    for side in ("bare", "longrun") if n % 2 == 0 else ("longrun", "bare"):
                        cpu = time.process_time()
                        wall = await _batch(client, side, queues[side], batch_runs, batch_steps)
                        cpu = time.process_time() - cpu
                        batches[side].append((total / wall, cpu * 1000 / total))
                # Medians: one batch swings by a tenth either way on a busy machine.
                for side, measured in batches.items():
                    result.steps_per_s[side] = statistics.median(b[0] for b in measured)
                    result.cpu_ms_per_step[side] = statistics.median(b[1] for b in measured)
    return result


def report(result: Overhead) -> None:
    """Print per-step milliseconds of each side, the ratios and the throughput."""
    print(
        f"{result.steps} no-op steps per run, {result.runs} runs per side after "
        f"{result.warmup} warm-up, interleaved"
    )
    print(f"{'ms per step':<15} {'median':>8} {'min':>8} {'max':>8}   runs")
    for which, label in ((0, "wall"), (1, "worker")):
        for side in ("bare", "longrun"):
            ms = [t[which] * 1000 / result.steps for t in result.times[side]]
            runs_text = " ".join(f"{m:.1f}" for m in ms)
            cells = f"{result.median_ms(side, which):>8.2f} {min(ms):>8.2f} {max(ms):>8.2f}"
            print(f"{f'{side} {label}':<15} {cells}   {runs_text}")
    for which, label in ((0, "wall"), (1, "worker")):
        ratio = result.median_ms("longrun", which) / result.median_ms("bare", which)
        verdict = "within" if ratio <= TARGET_RATIO else "ABOVE"
        print(
            f"ratio longrun/bare, {label:<6}: {ratio:.2f} ({verdict} the target {TARGET_RATIO:.2f})"
        )
    runs, steps = result.batch
    for side in ("bare", "longrun"):
        print(
            f"throughput, {runs} runs x {steps} steps at once, {side}: "
            f"{result.steps_per_s[side]:.1f} steps/s, {result.cpu_ms_per_step[side]:.2f} ms CPU "
            "per step (this process: worker and client)"
        )


def figures(result: Overhead) -> list[Figure]:
    """The suite's figures of this benchmark."""
    runs, steps = result.batch
    return [
        Figure(
            "per step",
            f"wall, {result.steps} sequential no-op steps",
            "ms",
            result.median_ms("longrun", 0),
            result.median_ms("bare", 0),
        ),
        Figure(
            "per step",
            "worker time (tasks held)",
            "ms",
            result.median_ms("longrun", 1),
            result.median_ms("bare", 1),
            target="<= 1.10",
        ),
        Figure(
            "per step",
            f"throughput, {runs} runs x {steps} steps at once",
            "steps/s",
            result.steps_per_s["longrun"],
            result.steps_per_s["bare"],
            target=">= 0.97",
        ),
        Figure(
            "per step",
            "CPU of worker + client per step in that batch",
            "ms",
            result.cpu_ms_per_step["longrun"],
            result.cpu_ms_per_step["bare"],
        ),
    ]


def main() -> None:
    """Parse the arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=50, help="no-op steps per run")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per side first")
    parser.add_argument("--batch-runs", type=int, default=50, help="runs at once for throughput")
    parser.add_argument("--batch-rounds", type=int, default=5, help="throughput batches per side")
    args = parser.parse_args()
    if args.steps < 1 or args.runs < 1 or args.warmup < 0:
        parser.error("--steps and --runs must be >= 1, --warmup >= 0")
    measured = measure(
        args.steps, args.runs, args.warmup, args.batch_runs, batch_rounds=args.batch_rounds
    )
    report(asyncio.run(measured))


if __name__ == "__main__":
    main()
