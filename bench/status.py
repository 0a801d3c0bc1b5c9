"""What the API's calls cost against the bare Temporal client calls they stand for.

Starts a headless Temporal dev server, a longrun worker, a bare worker (a workflow defined
here: N no-op activities, then it waits for a signal and answers a small query) and the API
(in this process, over ASGI, so no network stack is timed on either side), then times,
alternating and in the same run:

- submit: `POST /v1/runs` of a one-step plan against `start_workflow` of a bare workflow;
- an ended run, short (3 steps) and long (N steps): `GET /v1/runs/{id}` as every read after
  the first is answered (key check, `describe`, the answer the API kept: an ended run does
  not change) and the first `GET` (the kept answers cleared before each: `describe` and the
  refused query at once, then the final record from the store), against a bare `describe`
  (the least any read of a run costs), and against a plain FastAPI app defined here whose
  one route answers a run's `describe` as JSON (the least a REST read of a run costs, HTTP
  handling included); and the `status` query on the closed workflow, what the API did
  before runs stored their final status (the worker replays the whole history);
- a live run waiting for approval after N steps: `GET` against the bare `status` query;
- after a worker restart (both workers stopped and started again, so nothing is cached):
  the first `GET` of the live run against the first query of a bare workflow waiting after
  N activities (both replay their history: N steps, as the runs here hand over to a new
  history only after more steps than N; a longrun run hands over every 500 steps by default,
  which bounds what a first read after a restart replays);
- `GET /healthz`, the API's own floor (middleware, no Temporal call).

Each step of longrun's runs is a `note` call, an activity task like each bare step (`echo`
would run as a local activity, measured in bench/quick.py).

Prints medians (and p95/p99 for submit) and ratios; speed is never a pass/fail here.

    .venv/bin/python bench/status.py [--steps 500] [--reads 30] [--restarts 3]
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
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow uses none of it.
    import httpx
    from fastapi import FastAPI
    from figures import Figure

    from api.app import create_app
    from api.closed_runs import EndedRuns
    from longrun import wire
    from longrun.contracts import RunState
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving

TARGET_RATIO = 1.2
LIVE_TARGET_RATIO = 1.5
Call = Callable[[], Awaitable[Any]]
_ACTIVITY_TIMEOUT = timedelta(seconds=30)


@activity.defn(name="bench.noop")
async def noop(value: int) -> int:
    """Do nothing: one step of the bare workflow."""
    return value


@workflow.defn(name="bench.WaitingAfterSteps")
class WaitingAfterSteps:
    """N no-op activities, then waits for a signal; its query answers how many ran."""

    def __init__(self) -> None:
        self.done = 0
        self.released = False

    @workflow.signal(name="release")
    def release(self) -> None:
        """Let it end."""
        self.released = True

    @workflow.query(name="status")
    def status(self) -> dict[str, int]:
        """How many activities ran."""
        return {"done": self.done}

    @workflow.run
    async def run(self, steps: int) -> int:
        """Run the activities, then wait."""
        for i in range(steps):
            await workflow.execute_activity(noop, i, start_to_close_timeout=_ACTIVITY_TIMEOUT)
            self.done += 1
        await workflow.wait_condition(lambda: self.released)
        return self.done


def plain_app(client: Client) -> FastAPI:
    """The plain REST baseline: one route answering a workflow's `describe` as JSON."""
    app = FastAPI()

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str) -> dict[str, Any]:
        desc = await client.get_workflow_handle(run_id).describe()
        status = desc.status.name if desc.status else None
        return {"run_id": run_id, "status": status, "memo": await desc.memo()}

    return app


@dataclass
class Latency:
    """Milliseconds of each call, by name."""

    steps: int
    events: int  # history events of the ended long run
    ms: dict[str, list[float]]

    def median(self, name: str) -> float:
        """Median milliseconds of one call."""
        return statistics.median(self.ms[name])

    def quantile(self, name: str, q: int) -> float:
        """The q-th percentile of one call (the one time there is, if there is one)."""
        times = self.ms[name]
        if len(times) < 2:
            return times[0]
        return statistics.quantiles(times, n=100, method="inclusive")[q - 1]


async def _ms(call: Call) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def _alternating(calls: dict[str, Call], reads: int, into: dict[str, list[float]]) -> None:
    """Time each call `reads` times (after two untimed), in turns, each turn reversed."""
    for n in range(reads + 2):
        order = list(calls) if n % 2 == 0 else list(reversed(calls))
        for name in order:
            took = await _ms(calls[name])
            if n >= 2:
                into.setdefault(name, []).append(took)


def _chain(steps: int) -> list[dict[str, Any]]:
    plan: list[dict[str, Any]] = [
        {"id": f"s{i}", "tool": "note", "args": {"text": f"step {i}"}} for i in range(steps)
    ]
    for i in range(1, steps):
        plan[i]["depends_on"] = [f"s{i - 1}"]
    return plan


async def measure(steps: int, reads: int, restarts: int) -> Latency:
    """Run the runs, then time the calls; see the module's docstring."""
    ms: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                # No hand-over: a first read after a restart replays all N steps.
                LONGRUN_CONTINUE_AS_NEW_EVERY=steps + 10,
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
            client = await connect(settings)
            app = create_app(settings)
            transport = httpx.ASGITransport(app=app)

            plain_transport = httpx.ASGITransport(app=plain_app(client))
            async with (
                httpx.AsyncClient(
                    transport=transport, base_url="http://localhost", timeout=120
                ) as api,
                httpx.AsyncClient(transport=plain_transport, base_url="http://localhost") as plain,
            ):
                async with AsyncExitStack() as running:
                    await running.enter_async_context(serving(client, settings))
                    await running.enter_async_context(_bare_worker(client, bare_queue))
                    last = f"s{steps - 1}"
                    gate = {"id": "gate", "approval": {"message": "?"}, "depends_on": [last]}
                    long = client.get_workflow_handle(await _submit(api, _chain(steps)))
                    short = client.get_workflow_handle(await _submit(api, _chain(3)))
                    live = client.get_workflow_handle(await _submit(api, [*_chain(steps), gate]))
                    bare = await client.start_workflow(
                        WaitingAfterSteps.run,
                        steps,
                        id=f"bench-{uuid.uuid4().hex}",
                        task_queue=bare_queue,
                    )
                    await long.result()
                    await short.result()
                    for _ in range(1200):  # the gate opens once the steps before it are done
                        run = (await api.get(f"/v1/runs/{live.id}")).json()
                        done = (await bare.query(WaitingAfterSteps.status))["done"]
                        if run["status"] != "running" and done == steps:
                            break
                        await asyncio.sleep(0.5)
                    events = len([e async for e in long.fetch_history_events()])
                    await _alternating(
                        {
                            "submit": lambda: _submit(api, _chain(1)),
                            "bare submit": lambda: client.start_workflow(
                                WaitingAfterSteps.run,
                                0,
                                id=f"bench-{uuid.uuid4().hex}",
                                task_queue=bare_queue,
                            ),
                        },
                        reads * 3,
                        ms,
                    )
                    kept: EndedRuns = app.state.ended
                    await _alternating(
                        {
                            "GET": lambda: api.get(f"/v1/runs/{long.id}"),
                            "first GET": lambda: _first_get(api, kept, long.id),
                            "describe": long.describe,
                            "short GET": lambda: api.get(f"/v1/runs/{short.id}"),
                            "short first GET": lambda: _first_get(api, kept, short.id),
                            "short describe": short.describe,
                            "short plain GET": lambda: plain.get(f"/runs/{short.id}"),
                            "floor": lambda: api.get("/healthz"),
                            "live GET": lambda: api.get(f"/v1/runs/{live.id}"),
                            "live query": lambda: live.query(wire.STATUS, result_type=RunState),
                        },
                        reads,
                        ms,
                    )
                    # Apart: the worker (in this process) replays the whole run for it,
                    # and what it does after answering would slow the next call timed.
                    await _alternating(
                        {"query": lambda: long.query(wire.STATUS, result_type=RunState)},
                        reads,
                        ms,
                    )
                for n in range(restarts):  # nothing cached: each first read replays
                    async with AsyncExitStack() as running:
                        await running.enter_async_context(serving(client, settings))
                        await running.enter_async_context(_bare_worker(client, bare_queue))
                        first: dict[str, Call] = {
                            "restart GET": lambda: api.get(f"/v1/runs/{live.id}"),
                            "restart query": lambda: bare.query(WaitingAfterSteps.status),
                        }
                        for name in list(first) if n % 2 == 0 else reversed(list(first)):
                            ms.setdefault(name, []).append(await _ms(first[name]))
    return Latency(steps, events, ms)


def _bare_worker(client: Client, queue: str) -> Worker:
    return Worker(client, task_queue=queue, workflows=[WaitingAfterSteps], activities=[noop])


async def _first_get(api: httpx.AsyncClient, kept: EndedRuns, run_id: str) -> httpx.Response:
    kept.forget(run_id)
    return await api.get(f"/v1/runs/{run_id}")


async def _submit(api: httpx.AsyncClient, steps: list[dict[str, Any]]) -> str:
    created = await api.post("/v1/runs", json={"goal": "bench", "plan": {"steps": steps}})
    created.raise_for_status()
    run_id: str = created.json()["run_id"]
    return run_id


def report(result: Latency) -> None:
    """Print the medians and the ratios."""
    m = result.median
    print(f"ended run of {result.steps} steps: {result.events} history events")
    print(f"{'call':<34} {'p50 ms':>8} {'p95':>8} {'p99':>8}")
    for name in result.ms:
        p95, p99 = result.quantile(name, 95), result.quantile(name, 99)
        print(f"{name:<34} {m(name):>8.1f} {p95:>8.1f} {p99:>8.1f}")
    ratio = m("GET") / m("describe")
    verdict = "within" if ratio <= TARGET_RATIO else "above"
    print(f"ended: GET / describe = {ratio:.2f}, {verdict} the target of {TARGET_RATIO}")
    plain = m("short GET") / m("short plain GET")
    print(f"ended: GET / a plain FastAPI describe route = {plain:.2f}")
    live = m("live GET") / m("live query")
    verdict = "within" if live <= LIVE_TARGET_RATIO else "above"
    print(f"live: GET / status query = {live:.2f}, {verdict} the target of {LIVE_TARGET_RATIO}")


def figures(result: Latency) -> list[Figure]:
    """The suite's figures of this benchmark."""
    m, q, n = result.median, result.quantile, result.steps
    submit = [
        Figure(
            "API", f"POST /v1/runs vs start_workflow, {label}", "ms", v("submit"), v("bare submit")
        )
        for label, v in (
            ("p50", m),
            ("p95", lambda name: q(name, 95)),
            ("p99", lambda name: q(name, 99)),
        )
    ]
    return [
        *submit,
        Figure(
            "API",
            "GET live run vs status query",
            "ms",
            m("live GET"),
            m("live query"),
            target="<= 1.5",
        ),
        Figure(
            "API",
            "GET ended 3-step run vs describe",
            "ms",
            m("short GET"),
            m("short describe"),
            target="<= 1.2",
        ),
        Figure(
            "API",
            "GET ended 3-step run vs a plain FastAPI describe route",
            "ms",
            m("short GET"),
            m("short plain GET"),
            baseline_name="plain FastAPI",
        ),
        Figure(
            "API",
            "first GET of the 3-step run vs describe",
            "ms",
            m("short first GET"),
            m("short describe"),
        ),
        Figure(
            "API",
            f"GET ended {n}-step run vs describe",
            "ms",
            m("GET"),
            m("describe"),
            target="<= 1.2",
        ),
        Figure(
            "API", f"first GET of the {n}-step run vs describe", "ms", m("first GET"), m("describe")
        ),
        Figure(
            "API",
            f"first GET of the {n}-step run vs status query (replay)",
            "ms",
            m("first GET"),
            m("query"),
            baseline_name="query replaying",
        ),
        Figure(
            "API",
            f"first GET of a live {n}-step run after a worker restart",
            "ms",
            m("restart GET"),
            m("restart query"),
        ),
    ]


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=500, help="echo steps of the long runs")
    parser.add_argument("--reads", type=int, default=30, help="timed reads of each kind")
    parser.add_argument("--restarts", type=int, default=3, help="worker restarts timed")
    args = parser.parse_args()
    report(asyncio.run(measure(args.steps, args.reads, args.restarts)))


if __name__ == "__main__":
    main()
