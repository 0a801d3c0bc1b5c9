"""Chaos: runs under crashes and outages, from submission to their end.

The whole stack runs as separate processes in a temporary directory: a Temporal dev server
on a SQLite file (so it can be stopped and started again on the same database and ports),
the model stand-in (`python -m longrun.dev.standin`), `--workers` workers (two by default,
`python -m worker`) and the API (`uvicorn api.app:app`), on free ports. A receiver in this
process records every request `http_request` sends it: arrival time, `Idempotency-Key`
header and body.

Runs. Through the REST API (`POST /v1/runs`, each with its own `Idempotency-Key`, so a
submission retried after an API crash starts no second run), `--concurrency` runs are
kept in flight for the whole window, drawn (seeded) from four shapes:

- effects: POST to the receiver, a model step, a slow model step (the stand-in takes 2 s),
  `write_file`, a `wait` timer, a POST gated by `requires_approval: true`, and a POST
  with `retry_if_sent`; one after another.
- parallel: two POSTs at once, a model step after both, an approval step, a slow model
  step, a last POST.
- agent: a goal-only run scripted on the stand-in: it plans two steps, writes notes.txt,
  then POSTs to the receiver (an irreversible call, so it waits for approval); a
  `read_file` check is its acceptance criterion.
- fanout: a `for_each` of three child runs, two at a time, each POSTing, asking its model
  and waiting for an approval (decided on the child, as the parent lists it), then a POST
  of the parent's own. A child's POST carries its child run's idempotency key.

Every POST body names the run's tag and the step, which is the logical step the report
groups arrivals by; every model prompt names them too (`[<tag>:<step>]`, or `[<tag>]` in
an agent's goal), which is how the stand-in's `/_standin/calls` are counted per run. This
script approves every approval a run asks for, through the API, as soon as it sees it
(runs are polled every few seconds with `GET /v1/runs/{id}`).

Faults. After a fault-free warm-up (one run of each shape, which also measures how many
model calls an agent run needs), faults follow one another at seeded random moments for
`--duration` seconds, one at a time, each recovered from before the next:

- worker: SIGKILL one of the workers; a new one starts 0.5-5 s later.
- temporal: stop Temporal (SIGTERM or SIGKILL), start it again on the same database and
  ports 5-20 s later.
- api: SIGKILL the API; start it again 2-10 s later.
- model: the stand-in answers 503 (with Retry-After), 500 or 429 for 10-40 s: a rule
  with `times` is appended, then used up by calls of this script once the time is over
  (the stand-in cannot remove one rule). Rules are tried in order, so an outage reaches
  the model calls no earlier rule answers: plain model steps, agents' judges, and agent
  runs submitted during it; not the slow steps nor agent runs scripted before it.

After the window no fault is injected and no run submitted; runs have `--grace` seconds
to end, then the report is printed and every process stopped.

How to read the report.

- runs completed / submitted: every run should complete. Whether a run ended is what
  Temporal says of it at the end (describe); runs not ended after the grace period are
  listed with the API's last status, a failing workflow task's attempt and the calls
  Temporal has pending for them; failed runs with their error. "API status is not
  Temporal's" counts runs whose last `GET /v1/runs/{id}` disagrees with Temporal (a run
  the API calls completed that Temporal still runs, or one it can no longer read).
- side effects: arrivals at the receiver per logical step (run tag + step). "same key
  more than once" is at-least-once delivery: a POST whose worker died (or whose
  completion Temporal never heard of) is sent again under the same key, which a server
  honouring Idempotency-Key applies once. It is "after a crash" when a worker crash or a
  Temporal outage (from the kill or stop until the new worker polled or Temporal answered
  again) overlaps the time between the two arrivals, "unexplained" otherwise. "two keys for
  one logical step" must be 0: then no server can tell the copies apart. A completed
  POST step the receiver never saw, or a key other than `<run_id>:<step_id>` for a
  plan step, is a bug too.
- model calls: per plan model step one answered call is needed; per agent run as many
  as the warm-up agent run made. "repeated" counts answered calls beyond that; refused
  calls (the outage's 5xx/429) are counted apart. A repeat is "after a crash" when a
  worker crash or a Temporal outage overlaps the time between the step's earlier call
  and it (for agent runs: the time the run was open).
- stalls: just before a worker is killed, the calls it runs (Temporal's pending
  activities whose last worker was it) are noted; a call's stall is the time from the
  kill until Temporal no longer lists it as pending (it completed on another worker, or
  failed for good). Tool calls heartbeat with a 10 s timeout, model calls 20 s, so a
  worker crash should cost at most about 30 s. For a Temporal restart the same is
  measured for every call in flight when it stopped, from the stop (downtime included)
  and from the moment it answered again. The next fault waits until every call a fault
  caught has moved on, so each stall is the cost of one fault.
- process logs: lines worth knowing in the logs of every process: workflow tasks and
  queries that failed with a nondeterminism error (with the run they hit), other failed
  workflow tasks, the API's 500s and tracebacks. A completion of an activity that had
  timed out is expected after a crash (the call was already given to another worker).
- fault log: each fault, its moment, and the stalls of the calls it caught in flight.

Targets: every run completes; nothing arrives under two keys; a worker crash stalls a
call for at most 30 s. The script prints and exits 0; only a broken harness exits 1.
Temporary files (logs of every process) are removed unless `--keep`.

    .venv/bin/python bench/chaos.py [--duration 600] [--concurrency 12] [--runs N]
        [--workers 2] [--grace 180] [--seed 0] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.runtime import Runtime, TelemetryConfig

# `python bench/chaos.py` puts bench/ on sys.path, not the repo root holding the packages.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from longrun.dev.processes import Stack  # noqa: E402
from longrun.dev.stack import ServerThread  # noqa: E402
from longrun.dev.standin import STANDIN_MODEL  # noqa: E402

FINAL = frozenset({"completed", "failed", "cancelled"})
# Temporal's execution statuses that end a run, as the API names them.
TEMPORAL_ENDS = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "TERMINATED": "failed",
    "TIMED_OUT": "failed",
    "CANCELED": "cancelled",
}
POLL_S = 3.0  # how often each open run is read through the API
STALL_POLL_S = 0.5  # how often a call in flight at a fault is looked for
STALL_LIMIT_S = 300.0  # a call still pending this long after its fault "made no progress"
SUBMIT_PATIENCE_S = 300.0
SLOW_MARK = "[chaos-slow]"
SLOW_DELAY_S = 2.0
DRAIN_MARK = "chaos-drain"
OUTAGE_TIMES = 300  # calls an outage rule may refuse; the rest are used up when it ends
WORKER_CRASH_TARGET_S = 30.0
PLAN_MARK = re.compile(r"\[(c[0-9a-f]{10}):([a-z0-9_-]+)\]")
AGENT_MARK = re.compile(r"\[(c[0-9a-f]{10})\]")
STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED


def say(start: float, text: str) -> None:
    """A progress line, stamped with seconds since `start`."""
    print(f"[{time.time() - start:6.0f}s] {text}", flush=True)


# --- the receiver of side effects -----------------------------------------------------------


@dataclass
class Arrival:
    """One request the receiver got."""

    at: float
    key: str | None
    tag: str | None
    step: str | None


class Receiver:
    """Records every POST /effects (time, Idempotency-Key, the body's tag and step) and
    answers after a seeded delay of up to `max_delay_s`, so crashes fall on requests in
    flight too."""

    def __init__(self, seed: int, max_delay_s: float = 1.5) -> None:
        self.arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        self._random = random.Random(f"receiver:{seed}")
        self._max_delay_s = max_delay_s
        self.server = ServerThread(
            Starlette(routes=[Route("/effects", self.effect, methods=["POST"])])
        )
        self.url = f"{self.server.url}/effects"

    async def effect(self, request: Request) -> Response:
        """Record the request, wait a little, answer 200."""
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        with self._lock:
            self.arrivals.append(
                Arrival(
                    at=time.time(),
                    key=request.headers.get("idempotency-key"),
                    tag=body.get("tag"),
                    step=body.get("step"),
                )
            )
            delay = self._random.uniform(0, self._max_delay_s)
        await asyncio.sleep(delay)
        return JSONResponse({"received": True})

    def snapshot(self) -> list[Arrival]:
        """The arrivals so far."""
        with self._lock:
            return list(self.arrivals)


# --- runs -----------------------------------------------------------------------------------


@dataclass
class Run:
    """One submitted run and what became of it."""

    tag: str
    shape: str
    body: dict[str, Any]
    posts: list[str]  # logical POST steps: plan step ids, or "agent-post"
    models: list[str]  # plan model steps
    warmup: bool = False
    run_id: str | None = None
    submitted_at: float | None = None
    ended_at: float | None = None
    status: str = "unsubmitted"
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    submit_tries: int = 0
    approved: set[str] = field(default_factory=set)
    approve_errors: int = 0
    temporal_status: str = "?"  # what Temporal says of the execution at the end
    api_error: str | None = None  # the last failed read through the API, if the last failed
    task_attempts: int = 0  # of its pending workflow task, if one is failing


def _post_step(step: str, tag: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": step,
        "tool": "http_request",
        "args": {"method": "POST", "url": url, "body": {"tag": tag, "step": step}},
        "requires_approval": False,
        **extra,
    }


def _model_step(step: str, tag: str, *, slow: bool = False) -> dict[str, Any]:
    slow_mark = f" {SLOW_MARK}" if slow else ""
    return {
        "id": step,
        "model": {"prompt": f"[{tag}:{step}]{slow_mark} Say one sentence about patience."},
    }


def effects_run(tag: str, url: str, rng: random.Random) -> Run:
    """POST, model, slow model, write_file, wait, gated POST, POST with retry_if_sent."""
    gate = _post_step("gate", tag, url)
    gate["requires_approval"] = True
    last = _post_step("post-b", tag, url)
    last["args"]["retry_if_sent"] = True
    steps = [
        _post_step("post-a", tag, url),
        _model_step("think", tag),
        _model_step("slow", tag, slow=True),
        {"id": "note", "tool": "write_file", "args": {"path": "note.txt", "content": tag}},
        {"id": "nap", "wait": {"seconds": round(rng.uniform(3, 12), 1)}},
        gate,
        last,
    ]
    return Run(
        tag,
        "effects",
        _plan_body(tag, "effects", steps),
        ["post-a", "gate", "post-b"],
        ["think", "slow"],
    )


def parallel_run(tag: str, url: str, rng: random.Random) -> Run:
    """Two POSTs at once, a model step after both, an approval, a slow model step, a POST."""
    steps = [
        _post_step("post-x", tag, url, depends_on=[]),
        _post_step("post-y", tag, url, depends_on=[]),
        {**_model_step("think", tag), "depends_on": ["post-x", "post-y"]},
        {"id": "approve", "approval": {"message": f"go on with {tag}?"}},
        _model_step("slow", tag, slow=True),
        _post_step("post-z", tag, url),
    ]
    return Run(
        tag,
        "parallel",
        _plan_body(tag, "parallel", steps),
        ["post-x", "post-y", "post-z"],
        ["think", "slow"],
    )


FAN_ITEMS = ["a", "b", "c"]


def fanout_run(tag: str, url: str) -> Run:
    """A for_each of three child runs, two at a time (each POSTs, asks its model and waits
    for an approval decided through the parent), then a POST of the parent's own."""
    child = [
        {
            "id": "post",
            "tool": "http_request",
            "args": {"method": "POST", "url": url, "body": {"tag": tag, "step": "post-{{item}}"}},
            "requires_approval": False,
        },
        {
            "id": "think",
            "model": {"prompt": f"[{tag}:think-{{{{item}}}}] Say one sentence about patience."},
        },
        {"id": "gate", "approval": {"message": "go on with {{item}}?"}},
    ]
    spec = {"goal": f"chaos child of {tag}: {{{{item}}}}", "plan": {"steps": child}}
    fan = {"id": "each", "for_each": {"items": FAN_ITEMS, "max_parallel": 2, "run": spec}}
    return Run(
        tag,
        "fanout",
        _plan_body(tag, "fanout", [fan, _post_step("post-z", tag, url)]),
        [*(f"post-{i}" for i in FAN_ITEMS), "post-z"],
        [f"think-{i}" for i in FAN_ITEMS],
    )


def _done(run: Run) -> set[str]:
    """The run's logical steps that completed: its own completed steps and, in a fan-out,
    the POST and model step of each child that completed."""
    done = {s["id"] for s in run.detail.get("steps", []) if s.get("status") == "completed"}
    for child in run.detail.get("children", []):
        if child.get("status") == "completed" and child.get("item") is not None:
            item = FAN_ITEMS[int(child["item"])]
            done |= {f"post-{item}", f"think-{item}"}
    return done


def _idempotency_key(run: Run, step: str) -> str:
    """The key a plan run's POST step sends: a fan-out child's is its child run's."""
    if run.shape == "fanout" and step != "post-z":
        return f"{run.run_id}:each:{FAN_ITEMS.index(step.removeprefix('post-'))}:post"
    return f"{run.run_id}:{step}"


def _plan_body(tag: str, shape: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "goal": f"chaos {shape} run {tag}",
        "plan": {"steps": steps},
        "labels": {"suite": "chaos", "shape": shape},
    }


def agent_run(tag: str, url: str) -> tuple[Run, list[dict[str, Any]]]:
    """A goal-only run and the stand-in rules that script it: plan two steps, write
    notes.txt, POST the record (approved by this script), prove notes.txt holds the tag."""
    plan = {
        "steps": [
            {"id": "write", "intent": "write notes.txt", "expected_evidence": "notes.txt exists"},
            {
                "id": "post",
                "intent": "POST the record to the receiver",
                "expected_evidence": "the receiver answered 200",
            },
        ]
    }
    post = {"method": "POST", "url": url, "body": {"tag": tag, "step": "agent-post"}}
    write = {"path": "notes.txt", "content": f"notes of {tag}\n"}
    mark = f"[{tag}]"
    rules: list[dict[str, Any]] = [
        {"match": mark, "role": "plan", "json": plan},
        # Matched on what the step's turns hold, not consumed in order: an answer asked
        # again after a crash is the same answer.
        {"match": [mark, "Your step now: write", "sha256"], "role": "act", "reply": "Wrote it."},
        {
            "match": [mark, "Your step now: write"],
            "role": "act",
            "tool_calls": [{"name": "write_file", "arguments": write}],
        },
        {
            "match": [mark, "Your step now: POST the record", '"status": 200'],
            "role": "act",
            "reply": "Posted it.",
        },
        {
            "match": [mark, "Your step now: POST the record"],
            "role": "act",
            "tool_calls": [{"name": "http_request", "arguments": post}],
        },
    ]
    body = {
        "goal": f"{mark} write notes.txt, then POST a record to {url}",
        "strategy": "plan",  # its two scripted steps, though the goal is one sentence
        "tools": ["write_file", "http_request"],
        "max_steps": 20,
        "acceptance": [
            {
                "id": "notes",
                "check": {
                    "tool": "read_file",
                    "args": {"path": "notes.txt"},
                    "expect": {"contains": tag},
                },
            }
        ],
        "labels": {"suite": "chaos", "shape": "agent"},
    }
    return Run(tag, "agent", body, ["agent-post"], []), rules


# --- faults ---------------------------------------------------------------------------------


@dataclass
class Stall:
    """A call in flight when a fault struck, and when it was no longer pending."""

    run_id: str
    activity: str
    since: float
    progressed_at: float | None = None

    @property
    def seconds(self) -> float | None:
        """From the fault to progress; None if none came within STALL_LIMIT_S."""
        return None if self.progressed_at is None else self.progressed_at - self.since


@dataclass
class Fault:
    """One injected fault."""

    kind: str  # worker, temporal, api, model
    at: float
    until: float = 0.0
    detail: str = ""
    back_at: float = 0.0  # when the service answered again (temporal, api)
    refused: int = 0  # model: calls the outage refused
    status: int = 0  # model: the status it answered
    stalls: list[Stall] = field(default_factory=list)
    trackers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def crash(self) -> bool:
        """Whether work in flight may have been lost (and retried)."""
        return self.kind in ("worker", "temporal")


# --- the chaos ------------------------------------------------------------------------------


class Chaos:
    """The stack, the receiver, the runs and the faults of one session."""

    def __init__(self, args: argparse.Namespace, stack: Stack, receiver: Receiver) -> None:
        self.args = args
        self.stack = stack
        self.receiver = receiver
        # Two streams, so the faults drawn for a seed do not depend on how many runs came
        # before them (which depends on the machine's speed).
        self.rng = random.Random(f"runs:{args.seed}")
        self.fault_rng = random.Random(f"faults:{args.seed}")
        self.runs: list[Run] = []
        self.faults: list[Fault] = []
        self.start = time.time()
        self.window: tuple[float, float] = (0.0, 0.0)
        self.grace_end = 0.0
        self.agent_baseline: int | None = None
        self.client: Client | None = None
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(35.0, connect=3.0))
        self.tasks: set[asyncio.Task[None]] = set()
        self.stop_polling = asyncio.Event()
        self.ended = asyncio.Event()  # set whenever a run is seen to end
        self.api_errors = 0
        self.broken: list[str] = []  # exceptions of this script's own background tasks
        self.standin_calls: list[dict[str, Any]] = []
        self.temporal_knows: int | None = None

    def log(self, text: str) -> None:
        """A progress line."""
        say(self.start, text)

    def spawn(self, coro: Any) -> None:
        """Run a coroutine in the background, keeping a reference to its task; an
        exception it ends with is the harness's own trouble, kept for the end."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                self.broken.append(repr(task.exception()))

        task.add_done_callback(done)

    # -- runs ----------------------------------------------------------------------------------

    def new_run(self, shape: str | None = None, warmup: bool = False) -> Run:
        """A fresh run of a shape (drawn if not given), with its stand-in rules registered."""
        if shape is None:
            shapes = ["effects", "parallel", "agent", "fanout"]
            shape = self.rng.choices(shapes, [0.35, 0.25, 0.2, 0.2])[0]
        tag = f"c{self.rng.getrandbits(40):010x}"
        url = self.receiver.url
        if shape == "agent":
            run, rules = agent_run(tag, url)
            run.body["_rules"] = rules
        elif shape == "parallel":
            run = parallel_run(tag, url, self.rng)
        elif shape == "fanout":
            run = fanout_run(tag, url)
        else:
            run = effects_run(tag, url, self.rng)
        run.warmup = warmup
        self.runs.append(run)
        return run

    async def drive(self, run: Run) -> None:
        """Submit the run (retrying through API crashes), then poll it and approve what it
        asks until it ends or polling stops."""
        rules = run.body.pop("_rules", None)
        if rules:
            response = await self.http.post(f"{self.stack.standin_url}/_standin/rules", json=rules)
            response.raise_for_status()
        await self.submit(run)
        while run.run_id is not None and run.status not in FINAL and not self.stop_polling.is_set():
            await self.poll(run)
            if run.status in FINAL:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_polling.wait(), POLL_S)

    async def submit(self, run: Run) -> None:
        """POST /v1/runs with the run's tag as Idempotency-Key, until it is accepted."""
        first = time.time()
        while time.time() - first < SUBMIT_PATIENCE_S:
            run.submit_tries += 1
            try:
                response = await self.http.post(
                    f"{self.stack.api_url}/v1/runs",
                    json=run.body,
                    headers={"Idempotency-Key": run.tag},
                )
            except httpx.HTTPError:
                await asyncio.sleep(2)
                continue
            if response.status_code == 202:
                run.run_id = response.json()["run_id"]
                run.submitted_at = first
                run.status = "running"
                return
            if response.status_code == 422:  # this script wrote a request the API refuses
                raise RuntimeError(f"the API refused a run: {response.text}")
            if response.status_code == 409:  # the same request under its own key: a bug
                run.status = "not submitted"
                run.error = f"409 for a repeated submission: {response.text[:300]}"
                return
            await asyncio.sleep(2)  # 5xx: Temporal or the API restarting
        run.status = "not submitted"
        run.error = f"not accepted within {SUBMIT_PATIENCE_S:g} s"

    async def poll(self, run: Run) -> None:
        """Read the run once; approve what waits for approval."""
        try:
            response = await self.http.get(f"{self.stack.api_url}/v1/runs/{run.run_id}")
        except httpx.HTTPError as exc:
            self.api_errors += 1
            run.api_error = type(exc).__name__
            return
        if response.status_code != 200:
            self.api_errors += 1
            run.api_error = f"{response.status_code} {response.text[:200]}"
            return
        run.api_error = None
        detail: dict[str, Any] = response.json()
        run.detail = detail
        run.status = str(detail.get("status"))
        run.error = detail.get("error")
        if run.status in FINAL:
            run.ended_at = time.time()
            self.ended.set()
            return
        for pending in detail.get("pending_approvals") or []:
            # A child run's approval is decided on the child (its id is the child's own).
            asking = str(pending.get("run_id") or run.run_id)
            approval_id = str(pending["approval_id"])
            if f"{asking}/{approval_id}" in run.approved:
                continue
            try:
                decided = await self.http.post(
                    f"{self.stack.api_url}/v1/runs/{asking}/approvals/{approval_id}",
                    json={"decision": "approve", "comment": "chaos approves"},
                )
            except httpx.HTTPError:
                run.approve_errors += 1
                continue
            if decided.status_code in (202, 409):  # 409: an earlier try was taken
                run.approved.add(f"{asking}/{approval_id}")
            else:
                run.approve_errors += 1

    def open_runs(self) -> list[Run]:
        """Runs submitted (or being submitted) that have not ended."""
        return [r for r in self.runs if r.status not in FINAL and r.status != "not submitted"]

    async def keep_submitting(self, until: float) -> None:
        """Keep `--concurrency` runs in flight until `until` (or `--runs` are submitted)."""
        while time.time() < until:
            chaos_runs = [r for r in self.runs if not r.warmup]
            if self.args.runs and len(chaos_runs) >= self.args.runs:
                return
            if len(self.open_runs()) < self.args.concurrency:
                self.spawn(self.drive(self.new_run()))
                await asyncio.sleep(0.5)
            else:
                await asyncio.sleep(1.0)

    # -- faults --------------------------------------------------------------------------------

    async def inject_faults(self, until: float) -> None:
        """Faults one after another at random moments until `until`: rounds of five in a
        seeded order, each kind once and worker crashes twice."""
        kinds: list[str] = []
        while True:
            await asyncio.sleep(self.fault_rng.uniform(8, 25))
            if time.time() >= until:
                return
            if not kinds:
                kinds = ["worker", "temporal", "api", "model"]
                self.fault_rng.shuffle(kinds)
                # Worker crashes are the case the heartbeat timeouts are about: twice a round.
                kinds.insert(self.fault_rng.randrange(len(kinds) + 1), "worker")
            kind = kinds.pop()
            fault = Fault(kind, at=time.time())
            self.faults.append(fault)
            if kind == "worker":
                await self.kill_worker(fault)
            elif kind == "temporal":
                await self.restart_temporal(fault)
            elif kind == "api":
                await self.restart_api(fault)
            else:
                await self.model_outage(
                    fault, min(until, time.time() + self.fault_rng.uniform(10, 40))
                )
            fault.until = time.time()
            # The next fault waits until the calls this one stalled have moved on, so each
            # stall is the cost of one fault.
            if fault.trackers:
                await asyncio.wait(fault.trackers, timeout=STALL_LIMIT_S + 10)

    async def in_flight(self, worker_pid: int | None) -> list[tuple[str, str]]:
        """(run id, activity id) of the calls running now, on one worker or any."""
        client = self.client
        assert client is not None
        found: list[tuple[str, str]] = []
        open_ids = [r.run_id for r in self.open_runs() if r.run_id is not None]

        async def one(run_id: str) -> None:
            try:
                desc = await client.get_workflow_handle(run_id).describe()
            except Exception:
                return
            for pending in desc.raw_description.pending_activities:
                if pending.state != STARTED:
                    continue
                if worker_pid is None or pending.last_worker_identity.startswith(f"{worker_pid}@"):
                    found.append((run_id, pending.activity_id))

        await asyncio.gather(*(one(run_id) for run_id in open_ids))
        return found

    async def track(self, stall: Stall) -> None:
        """Wait until the call is no longer pending (or the run ended)."""
        assert self.client is not None
        handle = self.client.get_workflow_handle(stall.run_id)
        while time.time() - stall.since < STALL_LIMIT_S:
            try:
                desc = await handle.describe()
            except Exception:
                await asyncio.sleep(STALL_POLL_S)
                continue
            ids = {p.activity_id for p in desc.raw_description.pending_activities}
            if stall.activity not in ids or desc.status != WorkflowExecutionStatus.RUNNING:
                stall.progressed_at = time.time()
                return
            await asyncio.sleep(STALL_POLL_S)

    async def kill_worker(self, fault: Fault) -> None:
        """SIGKILL one worker; start a new one a little later."""
        victim = self.fault_rng.choice(self.stack.live_workers())
        calls = await self.in_flight(victim.pid)
        victim.stop_with(signal.SIGKILL)
        fault.at = time.time()
        fault.stalls = [Stall(run_id, activity, fault.at) for run_id, activity in calls]
        fault.trackers = [asyncio.ensure_future(self.track(stall)) for stall in fault.stalls]
        pause = self.fault_rng.uniform(0.5, 5)
        await asyncio.sleep(pause)
        fresh = await self.stack.start_worker()
        fault.back_at = time.time()
        fault.detail = f"{victim.name} (pid {victim.pid}); {fresh.name} after {pause:.1f} s"
        self.log(
            f"fault: SIGKILL {victim.name} with {len(calls)} call(s) in flight on it; "
            f"{fresh.name} polls {fault.back_at - fault.at:.1f} s later"
        )

    async def restart_temporal(self, fault: Fault) -> None:
        """Stop Temporal (SIGTERM or SIGKILL), start it again on the same database."""
        calls = await self.in_flight(None)
        sig = self.fault_rng.choice([signal.SIGTERM, signal.SIGKILL])
        process = self.stack.temporal.process
        assert process is not None
        process.send_signal(sig)
        fault.at = time.time()
        await asyncio.to_thread(process.wait)
        fault.stalls = [Stall(run_id, activity, fault.at) for run_id, activity in calls]
        fault.trackers = [asyncio.ensure_future(self.track(stall)) for stall in fault.stalls]
        down = self.fault_rng.uniform(5, 20)
        await asyncio.sleep(down)
        await self.stack.start_temporal()
        fault.back_at = time.time()
        fault.detail = f"{signal.Signals(sig).name}, down {fault.back_at - fault.at:.1f} s"
        self.log(
            f"fault: Temporal {signal.Signals(sig).name} with {len(calls)} call(s) in flight; "
            f"answers again {fault.back_at - fault.at:.1f} s later"
        )

    async def restart_api(self, fault: Fault) -> None:
        """SIGKILL the API; start it again a few seconds later."""
        self.stack.api.stop_with(signal.SIGKILL)
        fault.at = time.time()
        await asyncio.sleep(self.fault_rng.uniform(2, 10))
        await self.stack.start_api()
        fault.back_at = time.time()
        fault.detail = f"down {fault.back_at - fault.at:.1f} s"
        self.log(f"fault: SIGKILL the API; it answers again {fault.back_at - fault.at:.1f} s later")

    async def model_outage(self, fault: Fault, until: float) -> None:
        """Every model call no earlier rule answers fails with one status until `until`."""
        status = self.fault_rng.choice([503, 500, 429])
        rule: dict[str, Any] = {
            "status": status,
            "times": OUTAGE_TIMES,
            "message": "chaos: the model server is having an outage",
        }
        if status != 500:
            rule["retry_after"] = 2
        url = self.stack.standin_url
        (await self.http.post(f"{url}/_standin/rules", json=rule)).raise_for_status()
        fault.at = time.time()
        fault.status = status
        await asyncio.sleep(max(0.0, until - time.time()))
        drained = await self.drain(status)
        fault.back_at = time.time()
        fault.detail = f"{status} for {fault.back_at - fault.at:.1f} s"
        self.log(
            f"fault: model outage, {status} for {fault.back_at - fault.at:.1f} s "
            f"({drained} calls used up the rule)"
        )

    async def drain(self, status: int) -> int:
        """Use up the outage rule with calls of this script; how many it took."""
        url = f"{self.stack.standin_url}/v1/chat/completions"
        body = {"model": STANDIN_MODEL, "messages": [{"role": "user", "content": DRAIN_MARK}]}
        for n in range(OUTAGE_TIMES + 1):
            response = await self.http.post(url, json=body)
            if response.status_code != status:
                return n
        return OUTAGE_TIMES

    # -- the session ---------------------------------------------------------------------------

    async def warm_up(self) -> None:
        """One run of each shape without faults; the agent run's calls are the baseline."""
        shapes = ("effects", "parallel", "agent", "fanout")
        runs = [self.new_run(shape, warmup=True) for shape in shapes]
        deadline = time.time() + 180
        tasks = [asyncio.ensure_future(self.drive(run)) for run in runs]
        done, pending = await asyncio.wait(tasks, timeout=max(1.0, deadline - time.time()))
        for task in pending:
            task.cancel()
        for task in done:
            task.result()  # a harness error surfaces here
        ended = [
            f"{r.shape} {r.status} in {(r.ended_at or time.time()) - (r.submitted_at or 0):.0f} s"
            for r in runs
        ]
        self.log("warm-up: " + "; ".join(ended))
        agent = runs[2]
        if agent.status == "completed" and agent.run_id is not None:
            calls = await self.calls_of(f"[{agent.tag}]")
            self.agent_baseline = sum(c["outcome"] == "ok" for c in calls)

    async def calls_of(self, match: str | None = None) -> list[dict[str, Any]]:
        """The stand-in's recorded calls (containing `match`, if given)."""
        params = {"match": match} if match else {}
        response = await self.http.get(
            f"{self.stack.standin_url}/_standin/calls", params=params, timeout=120
        )
        response.raise_for_status()
        calls: list[dict[str, Any]] = response.json()
        return calls

    async def session(self) -> None:
        """Start, warm up, inject faults while runs keep coming, let them end, collect."""
        self.log(f"starting the stack in {self.stack.tmp}")
        await self.stack.start()
        # Without the SDK's own log: its retries while Temporal is down are expected here.
        quiet = Runtime(telemetry=TelemetryConfig(logging=None))
        self.client = await Client.connect(self.stack.temporal.address, runtime=quiet)
        self.http.headers["user-agent"] = "longrun-chaos"
        (
            await self.http.post(
                f"{self.stack.standin_url}/_standin/rules",
                json={"match": SLOW_MARK, "delay_s": SLOW_DELAY_S, "reply": "Slowly: patience."},
            )
        ).raise_for_status()
        self.log(
            f"stack up: Temporal {self.stack.temporal.address}, API {self.stack.api_url}, "
            f"stand-in {self.stack.standin_url}, {len(self.stack.workers)} workers, "
            f"receiver {self.receiver.url}"
        )
        await self.warm_up()

        start = time.time()
        end = start + self.args.duration
        self.window = (start, end)
        self.log(f"chaos window: {self.args.duration:g} s, {self.args.concurrency} runs in flight")
        reporter = asyncio.ensure_future(self.report_progress(end))
        await asyncio.gather(self.keep_submitting(end), self.inject_faults(end))
        reporter.cancel()
        self.log("chaos over: no more faults or runs; waiting for the runs to end")
        # Nothing is left broken: each fault recovered before the next.
        self.grace_end = time.time() + self.args.grace
        while time.time() < self.grace_end:
            # A run the API can no longer read may have ended all the same: Temporal says.
            await asyncio.gather(*(self.ask_temporal(r) for r in self.open_runs() if r.run_id))
            waiting = [r for r in self.open_runs() if r.temporal_status not in TEMPORAL_ENDS]
            if not waiting:
                break
            self.ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ended.wait(), min(5.0, self.grace_end - time.time()))
        self.stop_polling.set()
        # Stall trackers of the last faults get their time, within their own limit.
        trackers = [t for f in self.faults for t in f.trackers if not t.done()]
        if trackers:
            await asyncio.wait(trackers, timeout=30)
        open_left = self.open_runs()
        self.log(f"{len(open_left)} run(s) not seen to end through the API; collecting")
        for run in open_left:
            await self.poll(run)
        await asyncio.gather(*(self.ask_temporal(run) for run in self.runs if run.run_id))
        self.standin_calls = await self.calls_of()
        with contextlib.suppress(Exception):
            count = await self.client.count_workflows("WorkflowType = 'longrun.Run'")
            self.temporal_knows = count.count

    async def ask_temporal(self, run: Run) -> None:
        """Note Temporal's own status of the run, which the API's answer is checked against."""
        assert self.client is not None and run.run_id is not None
        try:
            desc = await self.client.get_workflow_handle(run.run_id).describe()
        except Exception as exc:
            run.temporal_status = f"describe failed: {exc}"
            return
        run.temporal_status = desc.status.name if desc.status else "?"
        if desc.raw_description.HasField("pending_workflow_task"):
            run.task_attempts = desc.raw_description.pending_workflow_task.attempt

    async def report_progress(self, end: float) -> None:
        """A line every 30 s while the window lasts."""
        while time.time() < end:
            await asyncio.sleep(30)
            chaos_runs = [r for r in self.runs if not r.warmup]
            done = sum(r.status == "completed" for r in chaos_runs)
            self.log(
                f"{len(chaos_runs)} runs submitted, {done} completed, "
                f"{len(self.open_runs())} open, {len(self.faults)} faults so far"
            )

    async def pending_of(self, run_id: str) -> str:
        """What Temporal has pending for a run: its calls with attempt and last error."""
        if self.client is None:
            return "?"
        try:
            desc = await self.client.get_workflow_handle(run_id).describe()
        except Exception as exc:
            return f"describe failed: {exc}"
        parts = []
        for p in desc.raw_description.pending_activities:
            state = PendingActivityState.Name(p.state).removeprefix("PENDING_ACTIVITY_STATE_")
            error = p.last_failure.message[:160] if p.HasField("last_failure") else ""
            parts.append(
                f"{p.activity_id} [{state.lower()}, attempt {p.attempt}, "
                f"worker {p.last_worker_identity or '-'}]"
                + (f" last error: {error}" if error else "")
            )
        status = desc.status.name if desc.status else "?"
        return f"Temporal {status}; " + ("; ".join(parts) if parts else "no calls pending")


# --- the report -----------------------------------------------------------------------------


def _crash_between(faults: list[Fault], a: float, b: float) -> bool:
    """Whether a worker crash or a Temporal outage (from the kill or stop until the new
    worker polled or Temporal answered) overlaps the time from `a` to `b`."""
    return any(f.crash and f.at <= b and max(f.back_at, f.at) >= a for f in faults)


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.1f} s, max {max(values):.1f} s"


@dataclass
class Row:
    """One line of the table."""

    what: str
    value: str
    target: str = ""


def _table(rows: list[Row]) -> Iterator[str]:
    width = max(len(r.what) for r in rows) + 2
    value_width = max(len(r.value) for r in rows) + 2
    for row in rows:
        yield f"  {row.what:<{width}}{row.value:<{value_width}}{row.target}".rstrip()


async def report(chaos: Chaos) -> None:
    """Print the figures and the details behind every figure that missed its target."""
    runs = [r for r in chaos.runs if not r.warmup]
    faults = chaos.faults
    by_tag = {r.tag: r for r in chaos.runs}
    print()
    print(
        f"chaos: {chaos.args.duration:g} s window, seed {chaos.args.seed}, "
        f"{chaos.args.workers} workers, {chaos.args.concurrency} runs in flight; "
        f"grace {chaos.args.grace:g} s; total {time.time() - chaos.start:.0f} s"
    )
    if chaos.agent_baseline is None:
        print("warm-up: the agent run did not complete, so agent model calls have no baseline")
    else:
        print(f"warm-up (no faults): an agent run made {chaos.agent_baseline} answered model calls")

    # Faults by kind.
    print("\nfaults injected")
    kinds = {
        "worker": "worker SIGKILL, new worker started",
        "temporal": "Temporal stopped and restarted",
        "api": "API SIGKILL and restarted",
        "model": "model outage (stand-in rule)",
    }
    outage_refused = _refused_by_outages(chaos)
    fault_rows = []
    for kind, label in kinds.items():
        mine = [f for f in faults if f.kind == kind]
        downs = [f.back_at - f.at for f in mine]
        span = f"{min(downs):.0f}-{max(downs):.0f} s" if downs else "-"
        in_flight = sum(len(f.stalls) for f in mine)
        if kind == "worker":
            note = (
                f"new worker polling {span} after the kill; {in_flight} call(s) in flight on them"
            )
        elif kind == "temporal":
            sigs = Counter(f.detail.split(",")[0] for f in mine)
            how = ", ".join(f"{n}x {s}" for s, n in sorted(sigs.items()))
            note = f"answering again {span} after the stop ({how}); {in_flight} call(s) in flight"
        elif kind == "api":
            note = f"answering again {span} after the kill"
        else:
            statuses = Counter(str(f.status) for f in mine)
            how = ", ".join(f"{n}x {s}" for s, n in sorted(statuses.items()))
            note = f"lasting {span} ({how}); {outage_refused} calls of runs refused"
        fault_rows.append(Row(label, str(len(mine)), note if mine else ""))
    for line in _table(fault_rows):
        print(line)

    # Runs.
    # Temporal has the last word on whether a run ended; the API's answer is checked against it.
    completed = [r for r in runs if r.temporal_status == "COMPLETED"]
    failed = [r for r in runs if r.temporal_status in TEMPORAL_ENDS and r not in completed]
    unended = [r for r in runs if r.temporal_status not in TEMPORAL_ENDS]
    disagree = [r for r in runs if TEMPORAL_ENDS.get(r.temporal_status, "running") != r.status]
    shapes = Counter(r.shape for r in runs)
    shapes_done = Counter(r.shape for r in completed)
    per_shape = ", ".join(f"{s} {shapes_done[s]}/{n}" for s, n in sorted(shapes.items()))

    # Side effects.
    arrivals = chaos.receiver.snapshot()
    effects = _effects(chaos, arrivals, by_tag)
    # Model calls.
    calls = _model_calls(chaos, by_tag)

    stalls_worker = [s for f in faults if f.kind == "worker" for s in f.stalls]
    stalls_temporal = [(f, s) for f in faults if f.kind == "temporal" for s in f.stalls]
    worker_s = [s.seconds for s in stalls_worker if s.seconds is not None]
    temporal_s = [s.seconds for _, s in stalls_temporal if s.seconds is not None]
    after_restart = [
        s.progressed_at - f.back_at for f, s in stalls_temporal if s.progressed_at is not None
    ]
    stuck = [s for s in stalls_worker if s.seconds is None] + [
        s for _, s in stalls_temporal if s.seconds is None
    ]
    over = [s for s in worker_s if s > WORKER_CRASH_TARGET_S]

    print("\noutcome")
    rows = [
        Row("runs completed / submitted", f"{len(completed)}/{len(runs)}", f"all  ({per_shape})"),
        Row("runs not ended after the grace period", str(len(unended)), "0"),
        Row("runs failed or cancelled", str(len(failed)), "0"),
        Row("runs whose API status is not Temporal's", str(len(disagree)), "0"),
        Row(
            "side effects: logical POST steps / arrivals",
            f"{effects['logical']}/{effects['arrivals']}",
            f"{effects['expected']} POST steps of ended runs completed",
        ),
        Row(
            "  same key received more than once",
            f"{effects['dup_steps']} steps",
            f"+{effects['dup_extra']} arrivals: {effects['dup_crash']} after a crash, "
            f"{effects['dup_unexplained']} unexplained (at-least-once; dedupe by key)",
        ),
        Row("  two different keys for one logical step", str(effects["two_keys"]), "0"),
        Row("  completed POST step never received", str(effects["missing"]), "0"),
        Row("  key other than <run_id>:<step_id>", str(effects["wrong_key"]), "0"),
        Row(
            "model calls: needed / answered / refused",
            f"{calls['needed']}/{calls['ok']}/{calls['refused']}",
            "refused = the outages' errors, retried",
        ),
        Row(
            "  answered calls repeated",
            str(calls["repeated"]),
            f"{calls['repeated_crash']} after a crash, {calls['repeated_unexplained']} unexplained",
        ),
        Row(
            "stall of a call on a killed worker",
            _stats(worker_s),
            f"<= {WORKER_CRASH_TARGET_S:g} s ({len(worker_s)} call(s), {len(over)} over)",
        ),
        Row(
            "stall of a call across a Temporal restart",
            _stats(temporal_s),
            f"from the stop ({len(temporal_s)} calls); after it answered again: "
            + (_stats(after_restart) if after_restart else "-"),
        ),
        Row("calls with no progress within 300 s of a fault", str(len(stuck)), "0"),
        Row(
            "API requests that failed (retried)",
            str(chaos.api_errors),
            "while the API or Temporal was down",
        ),
        Row(
            "submissions retried / runs Temporal knows",
            f"{sum(r.submit_tries - 1 for r in chaos.runs)}/{chaos.temporal_knows}",
            f"{len(chaos.runs)} submitted incl. warm-up; more would be duplicate starts",
        ),
    ]
    for line in _table(rows):
        print(line)

    # Details.
    if unended:
        print("\nruns not ended after the grace period")
        for r in unended:
            pending = (
                await chaos.pending_of(r.run_id) if r.run_id else f"never submitted: {r.error}"
            )
            running = [s["id"] for s in r.detail.get("steps", []) if s.get("status") == "running"]
            waiting = [a["approval_id"] for a in r.detail.get("pending_approvals", [])]
            failing = f"; workflow task attempt {r.task_attempts}" if r.task_attempts > 1 else ""
            print(
                f"  {r.run_id} ({r.shape}, tag {r.tag}): API says {r.status}{failing}; "
                f"running steps {running}; waiting approvals {waiting}; {pending}"
            )
    if disagree:
        print("\nruns whose API status is not Temporal's (at the end)")
        for r in disagree:
            last = f"; the API's last answer: {r.api_error}" if r.api_error else ""
            print(f"  {r.run_id} ({r.shape}): API {r.status}, Temporal {r.temporal_status}{last}")
    if failed:
        print("\nruns failed")
        for r in failed:
            error = (r.error or "?")[:300]
            print(f"  {r.run_id} ({r.shape}, tag {r.tag}): {r.temporal_status}: {error}")
    for title, items in (
        ("side effects under two keys", effects["two_keys_list"]),
        ("completed POST steps never received", effects["missing_list"]),
        ("keys other than <run_id>:<step_id>", effects["wrong_key_list"]),
        ("repeated arrivals under one key with no crash in between", effects["unexplained_list"]),
        ("answered model calls repeated with no crash in between", calls["unexplained_list"]),
    ):
        if items:
            print(f"\n{title}")
            for item in items[:20]:
                print(f"  {item}")
            if len(items) > 20:
                print(f"  ... and {len(items) - 20} more")
    if over or stuck:
        print("\nlong stalls (over the target, or no progress)")
        for f in faults:
            for s in f.stalls:
                if s.seconds is None or (f.kind == "worker" and s.seconds > WORKER_CRASH_TARGET_S):
                    took = "no progress" if s.seconds is None else f"{s.seconds:.1f} s"
                    print(
                        f"  {f.kind} fault at +{f.at - chaos.start:.0f}s: {s.run_id} "
                        f"'{s.activity}': {took}"
                    )
    await print_log_findings(chaos)
    print("\nfault log")
    for f in faults:
        seconds = [s.seconds for s in f.stalls if s.seconds is not None]
        stall = f"; stalls {', '.join(f'{t:.1f}' for t in seconds)} s" if seconds else ""
        print(f"  +{f.at - chaos.start:5.0f}s {f.kind:<8} {f.detail}{stall}")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
TEMPORAL_RUN_ID = re.compile(r"run_id=([0-9a-f-]{36})")
EXECUTION = re.compile(r"execution ([0-9a-f-]{36})")
# What the processes' logs say that a reader of the figures should know about.
NONDETERMINISM = "Nondeterminism"
LOG_PATTERNS: dict[str, Callable[[str], bool]] = {
    "workflow task failed: nondeterminism": lambda line: (
        "Failing workflow task" in line and NONDETERMINISM in line
    ),
    "query failed: nondeterminism": lambda line: (
        "Failing legacy query" in line and NONDETERMINISM in line
    ),
    "other failed workflow task": lambda line: (
        "Failing workflow task" in line and NONDETERMINISM not in line
    ),
    "API answered 500 (exception in a route)": lambda line: "Exception in ASGI application" in line,
    "Python traceback": lambda line: line.startswith("Traceback (most recent call last)"),
    "completion of an activity that had timed out": lambda line: (
        "Activity not found on completion" in line
    ),
}
CHAINED = ("The above exception", "During handling of the above", "Traceback")


def _exception_of(lines: list[str], start: int) -> str:
    """The exception a traceback starting at `start` ends with (the last of a chain)."""
    last = "(end of log)"
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if not line.strip() or line[0].isspace() or line.startswith(CHAINED):
            continue
        last = line
        following = next((x for x in lines[j + 1 :] if x.strip()), "")
        if not following.startswith(CHAINED[:2]):
            break
    return last


def scan_logs(log_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Lines of the processes' logs matching LOG_PATTERNS: (log name, gist) per pattern.
    A traceback's gist is the exception it ends with (once per chain); a failed workflow
    task's, its failure message and execution."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for log in sorted(log_dir.glob("*.log")):
        lines = [ANSI.sub("", raw) for raw in log.read_text(errors="replace").splitlines()]
        for i, line in enumerate(lines):
            for what, matches in LOG_PATTERNS.items():
                if not matches(line):
                    continue
                gist = re.sub(r"^\S+\s+", "", line)
                message = re.search(r'message: "([^"]+)"', line)
                execution = TEMPORAL_RUN_ID.search(line)
                if message:
                    gist = message[1] + (f" (execution {execution[1]})" if execution else "")
                if what == "Python traceback":
                    before = next((x for x in reversed(lines[:i]) if x.strip()), "")
                    if before.startswith(CHAINED[:2]):
                        continue  # part of a chain counted at its first traceback
                    gist = f"ends with {_exception_of(lines, i)}"
                elif what.startswith("API answered 500"):
                    gist = f"ends with {_exception_of(lines, i)}"
                found[what].append((log.stem, gist[:240]))
    return found


async def print_log_findings(chaos: Chaos) -> None:
    """Counts of what the logs hold, with the runs nondeterminism errors hit."""
    found = await asyncio.to_thread(scan_logs, chaos.stack.tmp / "logs")
    print("\nprocess logs")
    if not found:
        print("  nothing of note")
        return
    names: dict[str, str] = {}
    if chaos.client is not None and any(
        EXECUTION.search(gist) for hits in found.values() for _, gist in hits
    ):
        for run in chaos.runs:
            if run.run_id is None:
                continue
            with contextlib.suppress(Exception):
                desc = await chaos.client.get_workflow_handle(run.run_id).describe()
                names[desc.run_id] = run.run_id
    for what in LOG_PATTERNS:
        hits = found.get(what, [])
        if not hits:
            continue
        where = Counter(log for log, _ in hits)
        logs = ", ".join(f"{log} {n}" for log, n in sorted(where.items()))
        print(f"  {what}: {len(hits)} ({logs})")
        shown: set[str] = set()
        for log, gist in hits:
            execution = EXECUTION.search(gist)
            workflow_id = names.get(execution[1], "") if execution else ""
            if gist in shown or len(shown) >= 3:
                continue
            shown.add(gist)
            print(f"    {log}: {gist}" + (f" [{workflow_id}]" if workflow_id else ""))


def _refused_by_outages(chaos: Chaos) -> int:
    refused = 0
    for call in chaos.standin_calls:
        if call["outcome"] in ("429", "500", "503") and not _is_drain(call):
            refused += 1
    return refused


def _is_drain(call: dict[str, Any]) -> bool:
    return any(m.get("content") == DRAIN_MARK for m in call.get("messages", []))


def _text(call: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in call.get("messages", []))


def _effects(chaos: Chaos, arrivals: list[Arrival], by_tag: dict[str, Run]) -> dict[str, Any]:
    """Arrivals at the receiver, per logical step, against what the runs did."""
    faults = chaos.faults
    per_step: dict[tuple[str, str], list[Arrival]] = defaultdict(list)
    for a in arrivals:
        per_step[(a.tag or "?", a.step or "?")].append(a)
    out: dict[str, Any] = {
        "arrivals": len(arrivals),
        "logical": len(per_step),
        "dup_steps": 0,
        "dup_extra": 0,
        "dup_crash": 0,
        "dup_unexplained": 0,
        "two_keys": 0,
        "two_keys_list": [],
        "unexplained_list": [],
        "wrong_key_list": [],
    }
    for (tag, step), got in sorted(per_step.items()):
        keys = Counter(a.key for a in got)
        run = by_tag.get(tag)
        if len(keys) > 1:
            out["two_keys"] += 1
            out["two_keys_list"].append(
                f"{run.run_id if run else '?'} step {step}: keys {dict(keys)}"
            )
        if any(n > 1 for n in keys.values()):
            out["dup_steps"] += 1
        for key in keys:
            times = sorted(a.at for a in got if a.key == key)
            for earlier, later in itertools.pairwise(times):
                out["dup_extra"] += 1
                if _crash_between(faults, earlier, later):
                    out["dup_crash"] += 1
                else:
                    out["dup_unexplained"] += 1
                    out["unexplained_list"].append(
                        f"{run.run_id if run else '?'} step {step}: key {key} again after "
                        f"{later - earlier:.1f} s"
                    )
        if run is not None and run.run_id:
            for key in keys:
                # An agent's tool call is a step of its own: <run_id>:<plan step>-t<n>.
                right = (
                    (key or "").startswith(f"{run.run_id}:post-t")
                    if run.shape == "agent"
                    else key == _idempotency_key(run, step)
                )
                if not right:
                    out["wrong_key_list"].append(f"{run.run_id} step {step}: key {key}")
    out["wrong_key"] = len(out["wrong_key_list"])
    expected = 0
    missing = []
    for run in chaos.runs:
        if run.status not in FINAL:
            continue
        done = _done(run)
        for step in run.posts:
            made = step in done if run.shape != "agent" else run.status == "completed"
            if made:
                expected += 1
                if (run.tag, step) not in per_step:
                    missing.append(f"{run.run_id} step {step}")
    out["expected"] = expected
    out["missing"] = len(missing)
    out["missing_list"] = missing
    return out


def _model_calls(chaos: Chaos, by_tag: dict[str, Run]) -> dict[str, Any]:
    """The stand-in's calls per plan model step and per agent run, against what was needed."""
    faults = chaos.faults
    plan_calls: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    agent_calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in chaos.standin_calls:
        if _is_drain(call):
            continue
        text = _text(call)
        plan_mark = PLAN_MARK.search(text)
        if plan_mark:
            plan_calls[(plan_mark[1], plan_mark[2])].append(call)
            continue
        agent_mark = AGENT_MARK.search(text)
        if agent_mark:
            agent_calls[agent_mark[1]].append(call)
    out: dict[str, Any] = {
        "needed": 0,
        "ok": 0,
        "refused": 0,
        "repeated": 0,
        "repeated_crash": 0,
        "repeated_unexplained": 0,
        "unexplained_list": [],
    }
    for run in chaos.runs:
        if run.warmup:
            continue
        if run.shape == "agent":
            got = agent_calls.get(run.tag, [])
            ok = [c for c in got if c["outcome"] == "ok"]
            out["ok"] += len(ok)
            out["refused"] += len(got) - len(ok)
            if run.status == "completed" and chaos.agent_baseline is not None:
                out["needed"] += chaos.agent_baseline
                extra = len(ok) - chaos.agent_baseline
                if extra > 0:
                    out["repeated"] += extra
                    end = run.ended_at or time.time()
                    if _crash_between(faults, run.submitted_at or 0, end):
                        out["repeated_crash"] += extra
                    else:
                        out["repeated_unexplained"] += extra
                        out["unexplained_list"].append(
                            f"{run.run_id} (agent): {len(ok)} answered calls, "
                            f"{chaos.agent_baseline} needed"
                        )
            continue
        done = _done(run)
        for step in run.models:
            got = sorted(plan_calls.get((run.tag, step), []), key=lambda c: float(c["at"]))
            ok = [c for c in got if c["outcome"] == "ok"]
            out["ok"] += len(ok)
            out["refused"] += len(got) - len(ok)
            if step in done:
                out["needed"] += 1
            for earlier, later in itertools.pairwise(ok):
                out["repeated"] += 1
                if _crash_between(faults, float(earlier["at"]), float(later["at"])):
                    out["repeated_crash"] += 1
                else:
                    out["repeated_unexplained"] += 1
                    out["unexplained_list"].append(
                        f"{run.run_id} step {step}: asked again after "
                        f"{float(later['at']) - float(earlier['at']):.1f} s"
                    )
    return out


# --- entry point ----------------------------------------------------------------------------


async def main_async(args: argparse.Namespace, stack: Stack, receiver: Receiver) -> None:
    """The session and its report; background work stopped at the end, whatever happens."""
    chaos = Chaos(args, stack, receiver)
    try:
        await chaos.session()
        await report(chaos)
        if chaos.broken:
            raise RuntimeError(f"background tasks of the harness failed: {chaos.broken[:5]}")
    finally:
        chaos.stop_polling.set()
        tasks = [*chaos.tasks, *(t for f in chaos.faults for t in f.trackers)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await chaos.http.aclose()


def main() -> None:
    """Parse the arguments, run the session, clean up; exit 1 only if the harness broke."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=600, help="seconds of faults")
    parser.add_argument("--concurrency", type=int, default=12, help="runs kept in flight")
    parser.add_argument("--runs", type=int, default=0, help="stop submitting after N (0: no cap)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--grace", type=float, default=180, help="seconds for runs to end")
    parser.add_argument("--seed", type=int, default=0, help="seed of runs and faults")
    parser.add_argument("--keep", action="store_true", help="keep the logs and databases")
    args = parser.parse_args()
    if args.duration < 0 or args.concurrency < 1 or args.workers < 1 or args.grace < 0:
        parser.error("--duration and --grace must be >= 0, --concurrency and --workers >= 1")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    tmp = Path(tempfile.mkdtemp(prefix="longrun-chaos-"))
    receiver = Receiver(args.seed)
    stack = Stack(tmp, args.workers, allow=(urlsplit(receiver.url).netloc,))
    code = 0
    try:
        with receiver.server:
            asyncio.run(main_async(args, stack, receiver))
    except KeyboardInterrupt:
        print("\ninterrupted")
    except Exception:
        traceback.print_exc()
        print("the chaos harness broke; see the traceback above")
        code = 1
    finally:
        stack.stop()  # every process this script started, also after Ctrl-C
        if args.keep or code:
            print(f"logs and databases kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
