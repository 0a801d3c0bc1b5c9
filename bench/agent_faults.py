"""How many long agent runs complete when model and tool calls fail now and then.

K goal-only runs of S plan steps x T tool calls (default 10 x 5 = 50 tool steps per run)
against the OpenAI-compatible stand-in, with a transient failure injected at a fixed rate
into every model call and every tool call. Each rate is run twice:

- longrun: the real API app (`POST /v1/runs` through ASGI) and an in-process worker on a
  headless Temporal dev server. Every call is an activity with longrun's default retry
  policy (5 attempts, 1 s initial backoff, x2), so runs get slower under faults but should
  almost always finish. The K runs go concurrently; the table shows their median duration.
- plain: the same sequence of real HTTP calls made in-process, one after another, with no
  retries (openai client with `max_retries=0`, httpx): a run completes only if every call
  succeeds, so it should complete about (1 - rate) ** calls of the time.

Faults. Model: before a run's scripted rules the stand-in gets the rule
`{"match": <marker>, "status": 500, "probability": rate}`; every call whose messages carry
the run's unique marker (planner, actor and judge alike: the goal is in all their prompts)
then fails with 500 at that rate, and when the rule does not fire the next matching rule
answers. Tool: `http_request GET <flaky>/ok` goes to a small server in this process that
answers 503 with probability `rate` (seeded) and 200 otherwise. Both are transient errors
for longrun (5xx), so both are retried.

What one longrun run does (workflows/agent.py), with S steps of T tool calls:

- 1 `model.plan` call: the scripted plan of S steps;
- per step: 1 `model.act` turn that asks for T `http_request` calls, T `tool.http_request`
  activities (one after another), 1 `model.act` turn that answers "done" without tools,
  then 1 `verify.step` judge call (the stand-in's default verdict: passed);
- when the plan is done, 1 `verify.acceptance` activity for the one acceptance criterion.

So 1 + 3*S model calls (31) and S*T + 1 tool calls (51) per run; `max_steps` (60) bounds
act turns, of which a run uses 2*S (20). The acceptance criterion is a deterministic tool
check, `http_request GET <flaky>/ok-always` must give `status == 200`, against a path that
never fails: it is not part of the fault budget, and no judge call is spent on it. (The
default criterion, a judge call, would add one more faulty model call per run.)

The plain loop makes the same 1 + S*(2 + T + 1) + 1 calls (82) with the same shapes
(planner with the plan schema, actor with the tools offered, judge with the verdict
schema), so 81 of them can fail; it does not read the answers, it only needs each call to
succeed.

Note what "completed" means for longrun: a tool call that still fails after its 5 attempts
does not fail the run; the model is told "The tool failed" and goes on (and the stand-in's
judge accepts the step). The "tools ok" column counts runs that completed with every tool
step succeeding, the fair comparison with the plain loop's all-or-nothing.

Repeatability: the flaky tool server and the stand-in are reseeded from `--seed` before
each phase. The plain side runs sequentially and repeats exactly; the longrun runs are
concurrent and share those random streams, so which run draws which number may vary.

Timing caveat: the worker, the API, the stand-in and the flaky server share this one
process (and the Temporal server the machine), so with K concurrent runs a run's duration
is mostly waiting for CPU, not retry backoff; compare `--rates 0` and `--runs 1` to see
how much is which. Run times are taken from POST to the workflow's result; the
`GET /v1/runs/{id}` that reads each finished run comes after.

The script prints and always exits 0: nothing here is a pass/fail.

    .venv/bin/python bench/agent_faults.py [--runs 10] [--rates 0.05,0.10] [--steps 10]
        [--tools-per-step 5] [--seed 0] [--run-timeout 180]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from openai import AsyncOpenAI, OpenAIError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client, WorkflowFailureError

# `python bench/agent_faults.py` puts bench/ on sys.path, not the repo root holding the
# packages.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from figures import Figure  # noqa: E402

from activities.model import PLAN_SCHEMA, VERDICT_SCHEMA  # noqa: E402
from api.app import create_app as create_api  # noqa: E402
from longrun import prompts  # noqa: E402
from longrun.catalogue import CATALOGUE  # noqa: E402
from longrun.dev.stack import ServerThread, TemporalDevServer, free_port  # noqa: E402
from longrun.dev.standin import STANDIN_MODEL, StandIn  # noqa: E402
from longrun.dev.standin import create_app as create_standin  # noqa: E402
from longrun.settings import Settings  # noqa: E402
from longrun.temporal import connect  # noqa: E402
from worker import serving  # noqa: E402
from workflows.agent import tool_schema  # noqa: E402

MAX_STEPS = 60
RETRY_ATTEMPTS = 5  # longrun's default RetrySpec.max_attempts


# --- servers in threads -------------------------------------------------------------------


class Flaky:
    """A tool target: `GET /ok` answers 503 with probability `rate`, `GET /ok-always` never
    fails; it counts what it answered."""

    def __init__(self) -> None:
        self.rate = 0.0
        self._random = random.Random(0)
        self._lock = threading.Lock()
        self.answered: dict[str, int] = {"200": 0, "503": 0}

    def reset(self, rate: float, seed: str) -> None:
        """Set the failure rate, reseed, and zero the counters."""
        with self._lock:
            self.rate = rate
            self._random = random.Random(seed)
            self.answered = {"200": 0, "503": 0}

    def _answer(self, fail: bool) -> Response:
        with self._lock:
            self.answered["503" if fail else "200"] += 1
        if fail:
            return JSONResponse({"error": "injected fault"}, status_code=503)
        return JSONResponse({"ok": True})

    async def ok(self, request: Request) -> Response:
        """Succeed, except with probability `rate`."""
        with self._lock:
            fail = self._random.random() < self.rate
        return self._answer(fail)

    async def ok_always(self, request: Request) -> Response:
        """Always succeed: the acceptance check's target."""
        return self._answer(False)

    def app(self) -> Starlette:
        """The ASGI app."""
        return Starlette(
            routes=[Route("/ok", self.ok), Route("/ok-always", self.ok_always)],
        )


# --- the scenario -------------------------------------------------------------------------


def fault_rule(marker: str, rate: float) -> list[dict[str, Any]]:
    """The stand-in rule that fails a run's model calls at `rate` (none at rate 0)."""
    if rate <= 0:
        return []
    return [{"match": marker, "status": 500, "probability": rate, "message": "injected 500"}]


def scenario(marker: str, flaky_url: str, steps: int, tools: int) -> list[dict[str, Any]]:
    """Scripted answers of one longrun run: a plan, then per step T tool calls and 'done'."""
    plan = {
        "steps": [
            {
                "id": f"s{k}",
                "intent": f"fetch {flaky_url}/ok {tools} times (batch {k})",
                "expected_evidence": f"{tools} answers of {flaky_url}/ok",
            }
            for k in range(1, steps + 1)
        ]
    }
    rules: list[dict[str, Any]] = [{"match": marker, "role": "plan", "times": 1, "json": plan}]
    call = {"name": "http_request", "arguments": {"method": "GET", "url": f"{flaky_url}/ok"}}
    for _ in range(steps):
        rules.append({"match": marker, "role": "act", "times": 1, "tool_calls": [call] * tools})
        rules.append({"match": marker, "role": "act", "times": 1, "reply": "done"})
    return rules


def goal_of(marker: str, flaky_url: str, steps: int, tools: int) -> str:
    """A goal text carrying the run's marker (it reaches every planner, actor, judge prompt)."""
    return f"[{marker}] fetch {flaky_url}/ok {steps * tools} times in {steps} batches"


# --- results ------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """One run of either side."""

    completed: bool
    seconds: float
    tools_ok: bool = True
    error: str | None = None
    tool_steps_failed: int = 0
    tool_retries: int = 0


@dataclass
class Phase:
    """All runs of one side at one rate, and what the servers saw meanwhile."""

    runs: list[RunOutcome] = field(default_factory=list)
    wall_s: float = 0.0
    model_calls: int = 0
    model_faults: int = 0
    tool_calls: int = 0
    tool_faults: int = 0

    @property
    def done(self) -> int:
        """Runs that completed."""
        return sum(r.completed for r in self.runs)

    @property
    def clean(self) -> int:
        """Runs that completed with every tool step succeeding."""
        return sum(r.completed and r.tools_ok for r in self.runs)

    def median_s(self) -> float:
        """Median seconds of a run, finished or not."""
        return statistics.median(r.seconds for r in self.runs) if self.runs else 0.0


# --- longrun side -------------------------------------------------------------------------


async def longrun_run(
    api: httpx.AsyncClient,
    client: Client,
    standin_url: str,
    flaky_url: str,
    args: argparse.Namespace,
    rate: float,
) -> RunOutcome:
    """One goal-only run through the API, from POST to its end (or the timeout)."""
    marker = f"lr-{uuid.uuid4().hex[:16]}"
    rules = fault_rule(marker, rate) + scenario(marker, flaky_url, args.steps, args.tools_per_step)
    async with httpx.AsyncClient() as http:
        (await http.post(f"{standin_url}/_standin/rules", json=rules)).raise_for_status()
    body = {
        "goal": goal_of(marker, flaky_url, args.steps, args.tools_per_step),
        "strategy": "plan",  # the scripted plan's steps, however short the goal
        "tools": ["http_request"],
        "max_steps": MAX_STEPS,
        "acceptance": [
            {
                "id": "reachable",
                "check": {
                    "tool": "http_request",
                    "args": {"url": f"{flaky_url}/ok-always"},
                    "expect": {"json_path": "status", "equals": 200},
                },
            }
        ],
    }
    started = time.perf_counter()
    response = await api.post("/v1/runs", json=body)
    if response.status_code != 202:
        return RunOutcome(
            False, 0.0, error=f"POST /v1/runs: {response.status_code} {response.text}"
        )
    run_id: str = response.json()["run_id"]
    handle = client.get_workflow_handle(run_id)
    error: str | None = None
    try:
        await asyncio.wait_for(handle.result(), timeout=args.run_timeout)
    except WorkflowFailureError as exc:
        error = str(exc.cause or exc)
    except TimeoutError:
        error = f"not finished after {args.run_timeout:g} s"
        await handle.terminate("bench timeout")
    seconds = time.perf_counter() - started
    detail = (await api.get(f"/v1/runs/{run_id}")).json()
    tool_steps = [s for s in detail.get("steps", []) if s.get("kind") == "tool"]
    failed = sum(s.get("status") == "failed" for s in tool_steps)
    return RunOutcome(
        completed=detail.get("status") == "completed",
        seconds=seconds,
        tools_ok=failed == 0 and len(tool_steps) == args.steps * args.tools_per_step,
        error=error or detail.get("error"),
        tool_steps_failed=failed,
        tool_retries=sum(max(0, int(s.get("attempts") or 1) - 1) for s in tool_steps),
    )


# --- plain side ---------------------------------------------------------------------------


async def plain_run(
    oai: AsyncOpenAI,
    http: httpx.AsyncClient,
    standin_url: str,
    flaky_url: str,
    args: argparse.Namespace,
    rate: float,
) -> RunOutcome:
    """The same calls in-process, no retries: the first failure ends the run."""
    marker = f"pl-{uuid.uuid4().hex[:16]}"
    if rate > 0:
        rule = fault_rule(marker, rate)
        (await http.post(f"{standin_url}/_standin/rules", json=rule)).raise_for_status()
    goal = goal_of(marker, flaky_url, args.steps, args.tools_per_step)
    # The request shapes of longrun's planner, actor and judge (role_of tells them apart).
    offered = cast(Any, [tool_schema(CATALOGUE["http_request"]), prompts.FINISH_TOOL])
    plan_format = cast(
        Any, {"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN_SCHEMA}}
    )
    verdict_format = cast(
        Any, {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA}}
    )
    started = time.perf_counter()
    try:
        await oai.chat.completions.create(
            model=STANDIN_MODEL,
            messages=[
                {"role": "system", "content": prompts.PLANNER},
                {"role": "user", "content": f"Goal: {goal}"},
            ],
            response_format=plan_format,
        )
        for k in range(1, args.steps + 1):
            brief = f"Goal: {goal}\n\nYour step now: s{k}"
            await oai.chat.completions.create(
                model=STANDIN_MODEL,
                messages=[
                    {"role": "system", "content": prompts.ACTOR},
                    {"role": "user", "content": brief},
                ],
                tools=offered,
            )
            for _ in range(args.tools_per_step):
                (await http.get(f"{flaky_url}/ok")).raise_for_status()
            await oai.chat.completions.create(
                model=STANDIN_MODEL,
                messages=[
                    {"role": "system", "content": prompts.ACTOR},
                    {"role": "user", "content": f"{brief}\n\n(tool results)"},
                ],
                tools=offered,
            )
            await oai.chat.completions.create(
                model=STANDIN_MODEL,
                messages=[
                    {"role": "system", "content": prompts.JUDGE},
                    {"role": "user", "content": f"Goal: {goal}\n\nStatement: s{k} is done"},
                ],
                response_format=verdict_format,
            )
        (await http.get(f"{flaky_url}/ok-always")).raise_for_status()
    except (OpenAIError, httpx.HTTPError) as exc:
        seconds = time.perf_counter() - started
        return RunOutcome(False, seconds, tools_ok=False, error=type(exc).__name__)
    return RunOutcome(True, time.perf_counter() - started)


# --- phases -------------------------------------------------------------------------------


async def begin_phase(
    standin_url: str, standin: StandIn, flaky: Flaky, seed: str, rate: float
) -> None:
    """Start a phase: forget rules and calls, reseed both fault sources (each its own
    stream: with one seed, model and tool faults would fall on the same draws)."""
    async with httpx.AsyncClient() as http:
        reset = await http.delete(
            f"{standin_url}/_standin/rules", params={"seed": f"standin:{seed}"}
        )
        reset.raise_for_status()
    flaky.reset(rate, f"flaky:{seed}")


async def collect(standin_url: str, flaky: Flaky, phase: Phase) -> None:
    """End a phase: count the model and tool calls the servers answered during it."""
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.get(f"{standin_url}/_standin/calls")
        response.raise_for_status()
        calls: list[dict[str, Any]] = response.json()
    phase.model_calls = len(calls)
    phase.model_faults = sum(c["outcome"] != "ok" for c in calls)
    phase.tool_calls = flaky.answered["200"] + flaky.answered["503"]
    phase.tool_faults = flaky.answered["503"]


Results = dict[tuple[float, str], Phase]


async def measure(args: argparse.Namespace, rates: list[float]) -> tuple[Results, float]:
    """Start Temporal, the stand-in, the flaky server and a worker; run both sides per rate.
    The phases by rate and side, and the seconds it all took."""
    results: dict[tuple[float, str], Phase] = {}
    started = time.perf_counter()
    flaky = Flaky()
    standin_app = create_standin()
    standin: StandIn = standin_app.state.standin
    with (
        tempfile.TemporaryDirectory(prefix="longrun-faults-") as tmp,
        ServerThread(standin_app) as standin_server,
        ServerThread(flaky.app()) as flaky_server,
    ):
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-faults-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL=f"{standin_server.url}/v1",
                OPENAI_API_KEY="x",
                LONGRUN_MODEL=STANDIN_MODEL,
                LONGRUN_HTTP_ALLOW_HOSTS=urlsplit(flaky_server.url).netloc,
            )
            client = await connect(settings)
            transport = httpx.ASGITransport(app=create_api(settings))
            oai = AsyncOpenAI(base_url=f"{standin_server.url}/v1", api_key="x", max_retries=0)
            async with (
                serving(client, settings),
                httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
                httpx.AsyncClient(timeout=30) as http,
            ):
                for i, rate in enumerate(rates):
                    seed = f"{args.seed}:{i}"

                    plain = results[rate, "plain"] = Phase()
                    await begin_phase(standin_server.url, standin, flaky, seed, rate)
                    t0 = time.perf_counter()
                    for _ in range(args.runs):
                        plain.runs.append(
                            await plain_run(
                                oai, http, standin_server.url, flaky_server.url, args, rate
                            )
                        )
                    plain.wall_s = time.perf_counter() - t0
                    await collect(standin_server.url, flaky, plain)

                    ours = results[rate, "longrun"] = Phase()
                    await begin_phase(standin_server.url, standin, flaky, seed, rate)
                    t0 = time.perf_counter()
                    ours.runs = list(
                        await asyncio.gather(
                            *(
                                longrun_run(
                                    api, client, standin_server.url, flaky_server.url, args, rate
                                )
                                for _ in range(args.runs)
                            )
                        )
                    )
                    ours.wall_s = time.perf_counter() - t0
                    await collect(standin_server.url, flaky, ours)
            await oai.close()
    return results, time.perf_counter() - started


def report(
    results: dict[tuple[float, str], Phase],
    rates: list[float],
    args: argparse.Namespace,
    total_s: float,
) -> None:
    """Print the table and the reasons runs did not complete."""
    k, s, t = args.runs, args.steps, args.tools_per_step
    model_calls = 1 + 3 * s
    exposed = model_calls + s * t  # per run; the acceptance call never fails
    print(
        f"{k} runs per side and rate; {s} steps x {t} tool calls = {s * t} tool steps per run; "
        f"{model_calls} model + {s * t + 1} tool calls per run, {exposed} of them faulty at `rate`"
    )
    print(
        f"longrun: {RETRY_ATTEMPTS} attempts per call, 1 s initial backoff, runs concurrent; "
        "plain: no retries, runs one after another"
    )
    print()
    header = (
        f"{'rate':>5}  {'longrun':>8} {'tools ok':>8}  {'plain':>6} {'expected':>8}  "
        f"{'lr median s':>11} {'lr wall s':>9}  "
        f"{'lr model (5xx)':>15} {'lr tool (503)':>14}  "
        f"{'pl model (5xx)':>15} {'pl tool (503)':>14}"
    )
    print(header)
    print("-" * len(header))
    for rate in rates:
        lr, pl = results[rate, "longrun"], results[rate, "plain"]
        expected = k * (1 - rate) ** exposed
        print(
            f"{rate:>5.2f}  {f'{lr.done}/{k}':>8} {f'{lr.clean}/{k}':>8}  "
            f"{f'{pl.done}/{k}':>6} {expected:>8.2f}  "
            f"{lr.median_s():>11.1f} {lr.wall_s:>9.1f}  "
            f"{f'{lr.model_calls} ({lr.model_faults})':>15} "
            f"{f'{lr.tool_calls} ({lr.tool_faults})':>14}  "
            f"{f'{pl.model_calls} ({pl.model_faults})':>15} "
            f"{f'{pl.tool_calls} ({pl.tool_faults})':>14}"
        )
    print()
    print("longrun = runs completed; tools ok = completed with no tool step failed for good;")
    print(
        f"plain = runs whose {exposed + 1} calls all succeeded; expected = "
        f"K x (1 - rate)^{exposed}, the plain loop's expected completions"
    )
    for rate in rates:
        lr, pl = results[rate, "longrun"], results[rate, "plain"]
        p_model = 1 - (1 - rate**RETRY_ATTEMPTS) ** model_calls
        retries = sum(r.tool_retries for r in lr.runs)
        given_up = sum(r.tool_steps_failed for r in lr.runs)
        print(
            f"rate {rate:.2f}: longrun run s min/median/max "
            f"{min(r.seconds for r in lr.runs):.1f}/{lr.median_s():.1f}/"
            f"{max(r.seconds for r in lr.runs):.1f}; tool retries {retries}, tool steps given "
            f"up {given_up}; chance a run fails (a model call failing {RETRY_ATTEMPTS}x) "
            f"{p_model:.1e}; plain wall {pl.wall_s:.2f} s"
        )
        for side, phase in (("longrun", lr), ("plain", pl)):
            reasons: dict[str, int] = {}
            for r in phase.runs:
                if not r.completed:
                    key = (r.error or "?").splitlines()[0][:120]
                    reasons[key] = reasons.get(key, 0) + 1
            for reason, n in sorted(reasons.items(), key=lambda x: -x[1]):
                print(f"  {side} not completed x{n}: {reason}")
    print(f"\ntotal wall time {total_s:.1f} s")


def figures(results: Results, rates: list[float], args: argparse.Namespace) -> list[Figure]:
    """The suite's figures of this benchmark: runs completed, longrun against the plain loop.
    Raises if longrun completed no run at a rate: the point of the row, which must not read
    0 as if it were a measure (the plain loop completing none is what faults do to it)."""
    calls = 1 + 3 * args.steps + args.steps * args.tools_per_step
    for rate in rates:
        if results[rate, "longrun"].done == 0:
            raise RuntimeError(
                f"longrun completed none of its {args.runs} runs at {rate:.0%}: the benchmark "
                "did not do its work (see the reasons above)"
            )
    return [
        Figure(
            "under faults",
            f"agent runs completed, {calls} calls each failing at {rate:.0%}",
            "runs",
            results[rate, "longrun"].done,
            results[rate, "plain"].done,
            baseline_name=f"plain loop, of {args.runs}",
        )
        for rate in rates
    ]


def main() -> None:
    """Parse the arguments and run the benchmark; always exits 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, help="runs per side and rate (K)")
    parser.add_argument("--rates", default="0.05,0.10", help="comma list of failure rates")
    parser.add_argument("--steps", type=int, default=10, help="plan steps per run (S)")
    parser.add_argument("--tools-per-step", type=int, default=5, help="tool calls per step (T)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault injection")
    parser.add_argument(
        "--run-timeout", type=float, default=180.0, help="seconds before a longrun run is cut"
    )
    args = parser.parse_args()
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error("--rates is a comma list of numbers, e.g. 0.05,0.10")
    if not rates or any(not 0 <= r < 1 for r in rates):
        parser.error("--rates must be in [0, 1)")
    if args.runs < 1 or args.tools_per_step < 1 or not 1 <= args.steps <= 50:
        parser.error("--runs and --tools-per-step must be >= 1, --steps in 1..50")
    if 2 * args.steps > MAX_STEPS:
        parser.error(f"--steps above {MAX_STEPS // 2} needs more than max_steps={MAX_STEPS} turns")
    # Every retried attempt is logged as a warning by the worker; the table says it all.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    try:
        results, total_s = asyncio.run(measure(args, rates))
        report(results, rates, args, total_s)
    except Exception:
        # A benchmark reports; it never fails the build.
        traceback.print_exc()
        print("benchmark aborted; see the traceback above")


if __name__ == "__main__":
    main()
