"""Quick steps: a plan of short read-only steps in longrun, run as local activities, against
the same steps as regular activities of a bare Temporal workflow.

Starts one headless Temporal dev server and, in this process, two workers on the same
client: longrun's (`worker.serving`) and a bare one defined here. Each side runs N steps
that read the same small file, strictly in sequence:

- longrun: a plan of N `read_file` steps, started as `POST /v1/runs` starts a run; a quick
  tool (workflows/calls.py) runs as a local activity, in the workflow task that asked for it;
- longrun, task queue: the same plan started without the quick-tools change (as runs
  started before it were), each step an activity task like the bare side's;
- bare: `bench.BareReads`, a loop of N `workflow.execute_activity` calls of an activity
  reading the file, with the timeouts and retry policy of a longrun tool step.

Runs alternate between the sides (and which goes first). A run is timed from start to
result. A bare step waits for the task queue twice (its activity task, then the workflow
task with its result): on the dev server about 40 to 50 ms, most of it the server's transfer
queue. A local activity waits for neither. What it costs instead: a worker lost in the
middle of a run's quick steps loses the calls since its last workflow task completed (at
most the workflow task's timeout, 10 s), which the next worker runs again after that
timeout; they read and change nothing, so running them again is safe.

Prints medians and ratios, and always exits 0: speed is never a pass/fail here.

    .venv/bin/python bench/quick.py [--steps 20] [--runs 10] [--warmup 2]
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
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow reads only constants.
    from figures import Figure
    from overhead import TASK_QUEUE_CHANGES, TOOL_RETRY

    from activities.tools.registry import workspace_of
    from api.admission import start_run
    from longrun import wire
    from longrun.catalogue import CATALOGUE
    from longrun.contracts import Plan, RunConfig, RunInput, Step
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.plans import normalize_plan
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving
    from workflows.common import TOOL_HEARTBEAT_TIMEOUT, TOOL_TIMEOUT
FILE = "notes.txt"
TEXT = "a short file a step reads\n" * 8
SIDES = ("longrun", "longrun, task queue", "bare")


@activity.defn(name="bench.read")
async def read(path: str) -> str:
    """Read a small file: one step of the bare baseline."""
    return await asyncio.to_thread(Path(path).read_text)


@workflow.defn(name="bench.BareReads")
class BareReads:
    """N sequential reads, each an activity timed and retried like a longrun tool step."""

    @workflow.run
    async def run(self, path: str, steps: int) -> int:
        """Read `path` `steps` times, one activity after another."""
        for _ in range(steps):
            await workflow.execute_activity(
                read,
                path,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=TOOL_RETRY,
            )
        return steps


@dataclass
class Quick:
    """Wall seconds of each timed run, per side."""

    steps: int
    runs: int
    warmup: int
    times: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})

    def median_ms(self, side: str) -> float:
        """Median milliseconds per step of `side`."""
        return statistics.median(self.times[side]) * 1000 / self.steps


async def _longrun(client: Client, settings: Settings, steps: int, local: bool) -> float:
    """Seconds of one longrun run of `steps` reads, started as the API starts runs (or
    without the quick-tools change)."""
    run_id = f"run-{uuid.uuid4().hex}"
    (workspace_of(settings, run_id) / FILE).write_text(TEXT)
    plan = Plan(
        steps=[Step(id=f"r{i}", tool="read_file", args={"path": FILE}) for i in range(steps)]
    )
    inp = RunInput(
        run_id=run_id,
        goal=f"bench: {steps} reads",
        plan=normalize_plan(plan, CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    started = time.perf_counter()
    await start_run(client, settings, inp, wire.STARTED_WITH if local else TASK_QUEUE_CHANGES)
    await client.get_workflow_handle(run_id).result()
    return time.perf_counter() - started


async def _bare(client: Client, queue: str, path: Path, steps: int) -> float:
    """Seconds of one bare run of `steps` reads."""
    started = time.perf_counter()
    await client.execute_workflow(
        BareReads.run,
        args=[str(path), steps],
        id=f"bench-reads-{uuid.uuid4().hex}",
        task_queue=queue,
    )
    return time.perf_counter() - started


async def measure(steps: int, runs: int, warmup: int) -> Quick:
    """Start Temporal and both workers in this process; run the sides in turn, one run at a
    time."""
    result = Quick(steps, runs, warmup)
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        path = Path(tmp) / FILE
        path.write_text(TEXT)
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-quick-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            bare_queue = f"bench-reads-{uuid.uuid4().hex[:8]}"
            client = await connect(settings)
            async with (
                serving(client, settings),
                Worker(client, task_queue=bare_queue, workflows=[BareReads], activities=[read]),
            ):
                for n in range(warmup + runs):
                    order = SIDES[n % 3 :] + SIDES[: n % 3]  # each side first in turn
                    for side in order:
                        if side == "bare":
                            took = await _bare(client, bare_queue, path, steps)
                        else:
                            took = await _longrun(client, settings, steps, side == "longrun")
                        if n >= warmup:
                            result.times[side].append(took)
    return result


def report(result: Quick) -> None:
    """Print per-step milliseconds of each side and the ratios."""
    print(
        f"{result.steps} sequential reads per run, {result.runs} runs per side after "
        f"{result.warmup} warm-up, in turn"
    )
    for side in SIDES:
        ms = " ".join(f"{t * 1000 / result.steps:.1f}" for t in result.times[side])
        print(f"{side:<20} median {result.median_ms(side):7.2f} ms/step   runs: {ms}")
    bare = result.median_ms("bare")
    for side in SIDES[:2]:
        print(f"ratio {side} / bare: {result.median_ms(side) / bare:.2f}")


def figures(result: Quick) -> list[Figure]:
    """The suite's figures of this benchmark."""
    return [
        Figure(
            "quick steps",
            f"wall, {result.steps} sequential read-only steps (local activities)",
            "ms/step",
            result.median_ms("longrun"),
            result.median_ms("bare"),
            baseline_name="bare Temporal, activities",
            target="<= 0.6",
        ),
        Figure(
            "quick steps",
            "the same steps through the task queue",
            "ms/step",
            result.median_ms("longrun, task queue"),
            result.median_ms("bare"),
            baseline_name="bare Temporal, activities",
        ),
    ]


def main() -> None:
    """Parse the arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20, help="read steps per run")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    args = parser.parse_args()
    if args.steps < 1 or args.runs < 1 or args.warmup < 0:
        parser.error("--steps and --runs must be >= 1, --warmup >= 0")
    report(asyncio.run(measure(args.steps, args.runs, args.warmup)))


if __name__ == "__main__":
    main()
