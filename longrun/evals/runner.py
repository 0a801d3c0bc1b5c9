"""`longrun eval`: the suite's tasks, k attempts each, submitted through the API of a local
stack this command starts (longrun.dev.processes), with the fixture server in this process
and the model server (the stand-in, or a real one) behind a proxy that can be cut. With
chaos, faults come one at a time at random moments while attempts are in flight: a worker
SIGKILLed (a new one starts), Temporal stopped and started again on its database, the
model server cut off. Each ended run is checked by its task's checkers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.service import RPCError

from longrun.dev.processes import Stack
from longrun.dev.stack import ServerThread, free_port
from longrun.dev.standin import STANDIN_MODEL
from longrun.evals.fixture import Fixture, fixture_app
from longrun.evals.plain import Loop
from longrun.evals.proxy import CuttableProxy
from longrun.evals.tasks import Task, failures, without_effect
from longrun.settings import Settings

ENDED = ("completed", "failed", "cancelled")
POLL_S = 1.0  # how often each attempt in flight is read
FAULT_GAP_S = (2.0, 10.0)
FAULT_KINDS = ["worker", "temporal", "model"]  # between one fault's recovery and the next fault
RECOVERY_LIMIT_S = 300.0
# How long a run cancelled at its timeout may take to end before the eval terminates it in
# Temporal and scores it "stuck" (a run whose workflow tasks keep failing never ends).
CANCEL_GRACE_S = 120.0
STANDIN_CHAOS_READ_TPS = 400.0  # prompt tokens a second: an agent's call takes seconds
TRAIL_EVENTS = 80  # the latest events of a failed attempt's run kept in the results
TRAIL_CHARS = 240  # of one event there
# What a trail leaves out: the run's bookkeeping, not what it did.
TRAIL_SKIPS = ("usage", "phase", "audit", "step.started")


@dataclass
class Options:
    """How the suite runs."""

    k: int = 4
    chaos: bool = False
    concurrency: int = 4
    timeout_s: float = 900.0
    model_url: str | None = None  # a real OpenAI-compatible server; None: the stand-in
    model: str | None = None
    workers: int = 2
    seed: int = 0
    max_duration_s: float | None = None  # a time budget for every run (fail when used up)
    baseline: str | None = None  # "plain": the plain tool loop (longrun.evals.plain) beside
    strategy: str | None = None  # every goal-only run's strategy; None: the server's


@dataclass
class Attempt:
    """One run of a task."""

    task: str
    kind: str
    level: str
    number: int
    run_id: str = ""
    status: str = "not started"
    passed: bool = False
    failures: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    cost_usd: float = 0.0
    model_calls: int = 0
    input_tokens: int = 0  # prompt tokens over all its model calls
    recovering_s: float = 0.0  # what its model calls waited on recovery (not its budget's)
    trail: list[str] = field(default_factory=list)  # a failed run's latest events, in short
    without_effect: bool = False  # completed having made none of the changes asked for


@dataclass
class Fault:
    """A fault injected, and how long runs took to move on after it."""

    kind: str
    at_s: float
    down_s: float
    recovery_s: float | None = None


@dataclass
class Outcome:
    """What a suite run found."""

    options: dict[str, Any]
    attempts: list[Attempt] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    fixture: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    baseline: list[Attempt] = field(default_factory=list)  # the baseline's, if one ran


class Eval:
    """One run of the suite against a stack it owns."""

    def __init__(
        self, tasks: list[Task], options: Options, tmp: Path, say: Callable[[str], None]
    ) -> None:
        self.tasks = tasks
        self.say = say
        self.options = options
        self.rng = random.Random(options.seed)
        self.fixture = Fixture()
        self.outcome = Outcome(options=asdict(options))
        self.open: dict[str, Attempt] = {}  # run id -> attempt in flight
        self.loops: dict[str, asyncio.Task[dict[str, Any]]] = {}  # the plain loops in flight
        self._tmp = tmp
        self._start = time.monotonic()
        self._done = asyncio.Event()
        self.proxy: CuttableProxy | None = None
        self.stack: Stack | None = None

    async def run(self) -> Outcome:
        """Start the stack, run every attempt (with chaos if asked), stop the stack."""
        chaos: asyncio.Task[None] | None = None
        with ServerThread(fixture_app(self.fixture)) as server:
            self.fixture_url = server.url
            try:
                stack = await self._start_stack()
                async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
                    self.api = api
                    chaos = asyncio.create_task(self._chaos()) if self.options.chaos else None
                    await self._attempts()
                    self._done.set()
                    if chaos is not None:
                        await chaos
            finally:
                if chaos is not None and not chaos.done():
                    # Stopped early: no fault (a worker started again, say) after the stop.
                    chaos.cancel()
                    await asyncio.gather(chaos, return_exceptions=True)
                if self.stack is not None:  # what of it started, even if not all did
                    self.stack.stop()
                if self.proxy is not None:
                    await self.proxy.close()
        seen = self.fixture.report()
        self.outcome.fixture = seen.model_dump(exclude={"effects"})
        # Each system's own: the baseline's runs go to the same fixture.
        for key, attempts in (
            ("applied_twice", self.outcome.attempts),
            ("baseline_applied_twice", self.outcome.baseline),
        ):
            self.outcome.fixture[key] = seen.twice_among({a.run_id for a in attempts})
        self.outcome.wall_s = round(time.monotonic() - self._start, 1)
        return self.outcome

    async def _start_stack(self) -> Stack:
        """The stack, its workers asking the model through the proxy."""
        standin_port = free_port()
        target = urlsplit(self.options.model_url or f"http://127.0.0.1:{standin_port}/v1")
        self.proxy = CuttableProxy(target.hostname or "127.0.0.1", target.port or 80)
        await self.proxy.start()
        self.stack = Stack(
            self._tmp,
            self.options.workers,
            model_url=f"http://127.0.0.1:{self.proxy.port}{target.path}",
            model=self.options.model or STANDIN_MODEL,
            task_queue="eval",
            standin_port=standin_port,
            allow=(urlsplit(self.fixture_url).netloc,),
        )
        await self.stack.start()
        if self.options.chaos and self.options.model_url is None:
            # A stand-in as quick as a function call leaves nothing in flight for a fault
            # to hit: under chaos it reads prompts at a small server's pace.
            async with httpx.AsyncClient() as http:
                profile = {"read_tps": STANDIN_CHAOS_READ_TPS}
                await http.put(f"{self.stack.standin_url}/_standin/profile", json=profile)
        return self.stack

    async def _attempts(self) -> None:
        """Every attempt, a few at a time; with a baseline, its attempt of each task and
        number right after longrun's, sharing the model server alike."""
        limit = asyncio.Semaphore(self.options.concurrency)
        systems = ["longrun"] + ([self.options.baseline] if self.options.baseline else [])
        order = [
            (t, n, s) for n in range(1, self.options.k + 1) for t in self.tasks for s in systems
        ]

        async def one(task: Task, number: int, system: str) -> None:
            async with limit:
                attempt = Attempt(task.name, task.kind, task.level, number)
                if system == "longrun":
                    self.outcome.attempts.append(attempt)
                    await self._attempt(task, attempt)
                else:
                    self.outcome.baseline.append(attempt)
                    await self._plain_attempt(task, attempt)
                said = "passed" if attempt.passed else "; ".join(attempt.failures)[:200]
                self._said(
                    f"{system}: {task.name} #{number} ({attempt.status}, {attempt.duration_s} s)"
                    f": {said}"
                )

        await asyncio.gather(*(one(t, n, s) for t, n, s in order))

    async def _plain_attempt(self, task: Task, attempt: Attempt) -> None:
        """One attempt of the plain loop, in this process, scored by the same checker."""
        assert self.proxy is not None
        marker, body = await self._prepared(task)
        attempt.run_id = f"plain-{marker}"
        workspace = self._tmp / "plain" / attempt.run_id / "workspace"
        workspace.mkdir(parents=True)
        loop = Loop(
            run_id=attempt.run_id,
            goal=body["goal"],
            tools=body.get("tools", []),
            budget=body.get("budget", {}),
            decide=task.decide,
            model=self.options.model or STANDIN_MODEL,
            workspace=workspace,
            settings=Settings(
                LONGRUN_DATA_DIR=self._tmp / "plain",
                LONGRUN_HTTP_ALLOW_HOSTS=urlsplit(self.fixture_url).netloc,
            ),
        )
        target = urlsplit(self.options.model_url or "http://127.0.0.1/v1")
        started = time.monotonic()
        async with AsyncOpenAI(
            base_url=f"http://127.0.0.1:{self.proxy.port}{target.path}",
            api_key="unused",
            max_retries=2,  # the openai package's own default, as a plain loop has it
        ) as client:
            running = asyncio.create_task(loop.run(client))
            self.loops[attempt.run_id] = running
            try:
                run = await running
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():  # this eval is being stopped
                    raise
                # Killed with its process (chaos): what it did stays done, the rest is lost.
                loop.status, loop.error = "failed", "its process was killed"
                run = loop.record(time.monotonic() - started)
            finally:
                self.loops.pop(attempt.run_id, None)
        attempt.duration_s = round(time.monotonic() - started, 1)
        attempt.status = run["status"]
        attempt.failures = await self._checked(task, attempt, run, workspace)
        attempt.passed = not attempt.failures

    async def _prepared(self, task: Task) -> tuple[str, dict[str, Any]]:
        """An attempt's marker and the run it submits; the stand-in scripted for it."""
        assert self.stack is not None
        marker = f"eval-{uuid.uuid4().hex[:10]}"
        if self.options.model_url is None and task.standin:
            script = task.script(marker, self.fixture_url)
            await self._retrying("POST", f"{self.stack.standin_url}/_standin/rules", json=script)
        body = task.body(
            marker,
            self.fixture_url,
            self.options.max_duration_s,
            marked=self.options.model_url is None,
        )
        if self.options.strategy is not None and "plan" not in body:
            body["strategy"] = self.options.strategy
        return marker, body

    async def _checked(
        self, task: Task, attempt: Attempt, run: dict[str, Any], workspace: Path
    ) -> list[str]:
        """The ended run's usage taken into `attempt`, and what of the task it failed."""
        attempt.cost_usd = run["usage"]["cost_usd"]
        attempt.model_calls = run["usage"]["model_calls"]
        attempt.input_tokens = run["usage"]["input_tokens"]
        attempt.recovering_s = run["usage"].get("recovering_s", 0.0)  # none in the loop's
        seen = self.fixture.report()

        def scored() -> tuple[bool, list[str]]:  # both read the workspace: one thread hop
            return without_effect(task, run, seen, workspace), failures(task, run, seen, workspace)

        attempt.without_effect, found = await asyncio.to_thread(scored)
        return found

    async def _attempt(self, task: Task, attempt: Attempt) -> None:
        marker, body = await self._prepared(task)
        started = time.monotonic()
        created = await self._retrying(
            "POST", "/v1/runs", json=body, headers={"Idempotency-Key": marker}
        )
        if created.status_code != 202:
            attempt.status = "refused"
            attempt.failures = [f"submit answered {created.status_code}: {created.text[:300]}"]
            return
        attempt.run_id = created.json()["run_id"]
        self.open[attempt.run_id] = attempt
        try:
            run = await self._follow(task, attempt.run_id, started)
        finally:
            self.open.pop(attempt.run_id, None)
        attempt.duration_s = round(time.monotonic() - started, 1)
        attempt.status = run["status"]
        if attempt.status == "stuck":
            attempt.failures = [
                f"did not end within {self.options.timeout_s:g} s (and what it waited on "
                f"recovery), nor once cancelled; terminated: {run['error']}"
            ]
            return
        workspace = self._tmp / "data" / "runs" / run["run_id"] / "workspace"
        found = await self._checked(task, attempt, run, workspace)
        if attempt.status == "cancelled" and run.get("error") == "eval timeout":
            found.insert(0, f"did not end within {self.options.timeout_s:g} s and its recovery")
        attempt.failures = found
        attempt.passed = not found
        if found:
            attempt.trail = await self._trail(attempt.run_id)

    async def _trail(self, run_id: str) -> list[str]:
        """What a run did, in short (its latest events), to read why it failed."""
        lines: list[str] = []
        after = 0
        while True:
            answer = await self._retrying(
                "GET",
                f"/v1/runs/{run_id}/events/page",
                params={"after": after, "limit": 500, "wait_s": 5},  # the first read waits
            )
            if answer.status_code != 200:
                return [*lines, f"events: {answer.status_code} {answer.text[:200]}"]
            page = answer.json()
            for event in page["events"]:
                if event["type"] in TRAIL_SKIPS:
                    continue
                step = f" {event['step']}" if event.get("step") else ""
                data = json.dumps(event.get("data") or {}, sort_keys=True)
                lines.append(f"{event['type']}{step} {data}"[:TRAIL_CHARS])
            if page["ended"] or not page["events"]:
                return lines[-TRAIL_EVENTS:]
            after = page["next_after"]

    async def _follow(self, task: Task, run_id: str, started: float) -> dict[str, Any]:
        """Poll the run until it ends, answering its approvals as the task says; cancel it
        once it outlives the timeout, and terminate it if it does not end even then (its
        status is then "stuck", with the API's last word on it)."""
        cancelled = timed_out = False
        said = "the API did not answer"
        # The time its model calls waited on recovery is the run's own budget's to forgive:
        # the timeout moves with it.
        timeout_s = self.options.timeout_s
        while True:
            run, said = await self._read(run_id, said)
            if run is not None:
                timeout_s = self.options.timeout_s + run["usage"].get("recovering_s", 0.0)
                if run["status"] in ENDED:
                    if timed_out:
                        run["error"] = "eval timeout"
                    return run
                if run["pause_reason"] == "budget" and not cancelled:
                    # The eval's answer to a run held at its budget: stop it, not raise it.
                    await self._retrying("POST", f"/v1/runs/{run_id}/cancel")
                    cancelled = True
                    continue
                for asked in run["pending_approvals"]:
                    decision = task.decide if asked.get("kind") != "stalled" else "reject"
                    await self._retrying(
                        "POST",
                        f"/v1/runs/{run_id}/approvals/{asked['approval_id']}",
                        json={"decision": decision, "comment": "the eval's answer"},
                    )
            waited = time.monotonic() - started
            if not cancelled and waited > timeout_s:
                await self._retrying("POST", f"/v1/runs/{run_id}/cancel")
                cancelled = timed_out = True
            if timed_out and waited > timeout_s + CANCEL_GRACE_S:
                await self._terminate(run_id, said)
                return {"run_id": run_id, "status": "stuck", "error": said}
            await asyncio.sleep(POLL_S)

    async def _read(self, run_id: str, said: str) -> tuple[dict[str, Any] | None, str]:
        """The run as the API shows it, or None and why not (the stack may be recovering
        from a fault, or the run's workflow tasks failing)."""
        try:
            answer = await self.api.get(f"/v1/runs/{run_id}")
        except httpx.HTTPError:  # what it said last is still the best reason
            return None, said
        if answer.status_code != 200:
            return None, f"{answer.status_code} {answer.text[:300]}"
        run: dict[str, Any] = answer.json()
        return run, said

    async def _terminate(self, run_id: str, why: str) -> None:
        """End a run that cancelling did not end, in Temporal itself."""
        assert self.stack is not None
        client = await Client.connect(self.stack.temporal.address)
        with contextlib.suppress(RPCError):  # it ended meanwhile
            await client.get_workflow_handle(run_id).terminate(f"eval: stuck ({why})"[:1000])

    async def _retrying(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A request of the API (or stand-in), tried again while the stack recovers."""
        for _ in range(600):
            try:
                answer = await self.api.request(method, url, **kwargs)
            except httpx.HTTPError:
                await asyncio.sleep(1)
                continue
            if answer.status_code < 500 and answer.status_code != 429:
                return answer
            await asyncio.sleep(1)
        return answer

    # --- chaos --------------------------------------------------------------------------------

    async def _chaos(self) -> None:
        """One fault at a time at random moments until every attempt has ended."""
        kinds: list[str] = []
        while not self._done.is_set():
            gap = self.rng.uniform(*FAULT_GAP_S)
            try:
                await asyncio.wait_for(self._done.wait(), gap)
                return
            except TimeoutError:
                pass
            if not self.open:
                continue
            if not kinds:  # each kind once a round, in a seeded order
                kinds = self.rng.sample(FAULT_KINDS, len(FAULT_KINDS))
            kind = kinds.pop()
            fault = Fault(kind, round(time.monotonic() - self._start, 1), 0.0)
            before = await self._fingerprints()
            began = time.monotonic()
            await getattr(self, f"_{kind}_fault")()
            fault.down_s = round(time.monotonic() - began, 1)
            fault.recovery_s = await self._recovery(before)
            self.outcome.faults.append(fault)
            self._said(f"{kind} fault: down {fault.down_s} s, runs moved on {fault.recovery_s} s")

    async def _worker_fault(self) -> None:
        assert self.stack is not None
        live = self.stack.live_workers()
        if live:
            self.rng.choice(live).stop_with(signal.SIGKILL)
        if self.loops:  # a plain loop's process killed alike
            self.loops[self.rng.choice(sorted(self.loops))].cancel()
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await self.stack.start_worker()

    async def _temporal_fault(self) -> None:
        assert self.stack is not None
        await asyncio.to_thread(self.stack.temporal.stop)
        await asyncio.sleep(self.rng.uniform(3.0, 8.0))
        await self.stack.start_temporal()

    async def _model_fault(self) -> None:
        assert self.proxy is not None
        self.proxy.set_cut(True)
        await asyncio.sleep(self.rng.uniform(10.0, 30.0))
        self.proxy.set_cut(False)

    async def _fingerprints(self) -> dict[str, str]:
        """What each run in flight shows now, to see it move on."""
        found = {}
        for run_id in list(self.open):
            try:
                answer = await self.api.get(f"/v1/runs/{run_id}")
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                found[run_id] = _fingerprint(answer.json())
        return found

    async def _recovery(self, before: dict[str, str]) -> float | None:
        """Seconds from the fault's end until every run that was in flight has moved on
        (or ended, or waits on this eval's decision); None if one did not in time."""
        start = time.monotonic()
        waiting = set(before)
        while waiting and time.monotonic() - start < RECOVERY_LIMIT_S:
            now = await self._fingerprints()
            waiting = {r for r in waiting if r in self.open and now.get(r) == before[r]}
            if waiting:
                await asyncio.sleep(0.5)
        return None if waiting else round(time.monotonic() - start, 1)

    def _said(self, text: str) -> None:
        self.say(f"[{time.monotonic() - self._start:6.0f}s] {text}")


def _fingerprint(run: dict[str, Any]) -> str:
    usage = run["usage"]
    steps = [(s["id"], s["status"]) for s in run["steps"]]
    return json.dumps([run["status"], steps, usage["model_calls"], usage["tool_calls"]])


def run_suite(tasks: list[Task], options: Options, say: Callable[[str], None]) -> Outcome:
    """Run the suite on a stack of its own in a temporary directory; `say` hears progress."""

    async def stoppable() -> Outcome:
        # SIGTERM cancels the eval, which stops the stack's processes (their own sessions:
        # nothing else would) before it ends.
        main = asyncio.current_task()
        assert main is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
        return await Eval(tasks, options, Path(tmp), say).run()

    with tempfile.TemporaryDirectory(prefix="longrun-eval-") as tmp:
        return asyncio.run(stoppable())


def scores(outcome: Outcome, baseline: bool = False) -> dict[str, Any]:
    """pass^1, pass^k, cost per success, time p50/p95, model calls, recovery, side effects
    twice and completions without an effect: of longrun's attempts, or with `baseline` of
    the baseline's."""
    attempts = outcome.baseline if baseline else outcome.attempts
    by_task: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_task.setdefault(attempt.task, []).append(attempt)
    rates = [sum(a.passed for a in tries) / len(tries) for tries in by_task.values()]
    passes = sum(a.passed for a in attempts)
    times = sorted(a.duration_s for a in attempts if a.run_id)
    recoveries = [f.recovery_s for f in outcome.faults if f.recovery_s is not None]
    return {
        "tasks": len(by_task),
        "attempts": len(outcome.attempts),
        "passed": passes,
        "pass^1": round(statistics.fmean(rates), 3) if rates else None,
        "pass^k": round(sum(r == 1 for r in rates) / len(rates), 3) if rates else None,
        "cost_per_success_usd": round(sum(a.cost_usd for a in attempts) / passes, 6)
        if passes
        else None,
        "time_p50_s": _quantile(times, 0.5),
        "time_p95_s": _quantile(times, 0.95),
        "model_calls": sum(a.model_calls for a in attempts),
        "input_tokens_per_call": round(
            sum(a.input_tokens for a in attempts) / max(1, sum(a.model_calls for a in attempts))
        ),
        "faults": len(outcome.faults),
        "recovery_p50_s": _quantile(sorted(recoveries), 0.5),
        "recovery_max_s": max(recoveries) if recoveries else None,
        "runs_not_recovered": sum(f.recovery_s is None for f in outcome.faults),
        "waited_on_recovery_s": round(sum(a.recovering_s for a in attempts), 1),
        "applied_twice": outcome.fixture.get(
            "baseline_applied_twice" if baseline else "applied_twice", 0
        ),
        # What must stay 0: a run called done though nothing the goal asked for was done.
        "completed_without_effect": sum(a.without_effect for a in attempts),
        "per_task": {name: f"{sum(a.passed for a in t)}/{len(t)}" for name, t in by_task.items()},
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]
