"""What reading an ended run costs: `GET /v1/runs/{id}` against the bare Temporal calls.

Starts a headless Temporal dev server, a longrun worker and the API (in this process, over
ASGI, so no network stack is timed on either side), runs one plan of N echo steps to its
end, and then times, alternating and in the same run:

- `GET /v1/runs/{id}` through the API, as every read after the first is answered (key check,
  `describe`, the answer the API kept: an ended run does not change);
- the first `GET` of it (the API's kept answers cleared before each): `describe` and the
  refused query at once, then the final record read from the store;
- a bare `describe` of the same workflow (the least any read of a run costs);
- the `status` query on the closed workflow (what the API did before runs stored their
  final status: the worker replays the whole history every time);
- `GET /healthz`, the API's own floor (middleware, no Temporal call).

Then a live run waiting for approval after N steps: `GET` against a bare `status` query
(target: <= 1.5). Prints medians and ratios (ended: against the bare `describe`, target
<= 1.2 at 500 steps); speed is never a pass/fail here.

    .venv/bin/python bench/status.py [--steps 500] [--reads 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from api.app import create_app  # noqa: E402
from api.ended import EndedRuns  # noqa: E402
from longrun import wire  # noqa: E402
from longrun.contracts import RunState  # noqa: E402
from longrun.dev.stack import TemporalDevServer, free_port  # noqa: E402
from longrun.settings import Settings  # noqa: E402
from longrun.temporal import connect  # noqa: E402
from worker import serving  # noqa: E402

TARGET_RATIO = 1.2
LIVE_TARGET_RATIO = 1.5


async def _ms(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def bench(steps: int, reads: int) -> None:
    """Run one plan to its end and another to its approval, then time the reads of them,
    interleaved."""
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            client = await connect(settings)
            app = create_app(settings)
            transport = httpx.ASGITransport(app=app)
            async with (
                serving(client, settings),
                httpx.AsyncClient(transport=transport, base_url="http://api", timeout=120) as api,
            ):
                plan = [{"id": f"s{i}", "tool": "echo", "args": {"value": i}} for i in range(steps)]
                for i in range(1, steps):
                    plan[i]["depends_on"] = [f"s{i - 1}"]
                gate = {"id": "gate", "approval": {"message": "?"}, "depends_on": [f"s{steps - 1}"]}
                ended = client.get_workflow_handle(await _submit(api, plan))
                live = client.get_workflow_handle(await _submit(api, [*plan, gate]))
                await ended.result()
                for _ in range(600):  # the gate opens once the steps before it are done
                    if (await api.get(f"/v1/runs/{live.id}")).json()["status"] != "running":
                        break
                    await asyncio.sleep(0.5)
                history = [e async for e in ended.fetch_history_events()]
                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "GET": lambda: api.get(f"/v1/runs/{ended.id}"),
                    "first GET": lambda: _first_get(api, app.state.ended, ended.id),
                    "describe": ended.describe,
                    "query": lambda: ended.query(wire.STATUS, result_type=RunState),
                    "floor": lambda: api.get("/healthz"),
                    "live GET": lambda: api.get(f"/v1/runs/{live.id}"),
                    "live query": lambda: live.query(wire.STATUS, result_type=RunState),
                }
                times: dict[str, list[float]] = {name: [] for name in calls}
                for n in range(reads + 2):
                    order = list(calls) if n % 2 == 0 else list(reversed(calls))
                    for name in order:
                        took = await _ms(calls[name])
                        if n >= 2:  # the first two of each warm up
                            times[name].append(took)
    _report(times, steps, len(history))


async def _first_get(api: httpx.AsyncClient, kept: EndedRuns, run_id: str) -> httpx.Response:
    kept.forget(run_id)
    return await api.get(f"/v1/runs/{run_id}")


async def _submit(api: httpx.AsyncClient, steps: list[dict[str, Any]]) -> str:
    created = await api.post("/v1/runs", json={"goal": "bench", "plan": {"steps": steps}})
    run_id: str = created.json()["run_id"]
    return run_id


def _report(times: dict[str, list[float]], steps: int, events: int) -> None:
    median = {name: statistics.median(took) for name, took in times.items()}
    bare = median["describe"]
    print(f"ended run of {steps} steps ({events} history events), medians of {len(times['GET'])}")
    print(f"{'read':<18} {'ms':>9} {'x describe':>11}")
    for name, label in [
        ("GET", "GET /v1/runs/{id}"),
        ("first GET", "first GET"),
        ("describe", "describe"),
        ("query", "status query"),
        ("floor", "GET /healthz"),
    ]:
        print(f"{label:<18} {median[name]:>9.1f} {median[name] / bare:>11.2f}")
    ratio = median["GET"] / bare
    verdict = "within" if ratio <= TARGET_RATIO else "above"
    print(f"ended: GET / describe = {ratio:.2f}, {verdict} the target of {TARGET_RATIO}")
    live = median["live GET"] / median["live query"]
    verdict = "within" if live <= LIVE_TARGET_RATIO else "above"
    print(
        f"live, waiting after {steps} steps: GET {median['live GET']:.1f} ms, status query "
        f"{median['live query']:.1f} ms: {live:.2f}, {verdict} the target of {LIVE_TARGET_RATIO}"
    )


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=500, help="echo steps of the run")
    parser.add_argument("--reads", type=int, default=30, help="timed reads of each kind")
    args = parser.parse_args()
    asyncio.run(bench(args.steps, args.reads))


if __name__ == "__main__":
    main()
