"""The API under load: many concurrent clients submitting runs, reading them and deciding
their approvals, against the same clients doing the same with the Temporal client.

Each side gets its own headless Temporal dev server (a fresh SQLite file, so neither works
on the other's history), then N clients (200 in the full suite) run in a separate process
for a fixed time, each repeating one cycle with no pause between calls:

- longrun: the API as its own process (`uvicorn api.app:app`, one process, no API keys: a
  loopback caller is a local admin) with a longrun worker (`python -m worker`), over real
  HTTP (one httpx client, so one keep-alive connection, per simulated client): `POST
  /v1/runs` of a plan whose one step waits for approval; `GET /v1/runs/{id}` at least R
  times and until the run says `waiting_approval`; `POST /v1/runs/{id}/approvals/{approval}`
  to approve it (answered once the run has taken the decision);
- bare Temporal: the same cycle with the Temporal Python client (one connection shared by
  the clients, as the API shares one) against a workflow defined here that waits for a
  signal (served by a worker in the benchmark's own process): `start_workflow`, its `status`
  query at least R times, the `decide` signal and then its `status` query until the
  workflow has taken it (asked at once, then after waits doubling from 50 to 800 ms, as the
  API asks a run for a request's outcome): both sides' decisions are answered once taken.

Reports per operation (submit, read, decide) p50 and p99 of the calls started after the
warm-up, the reads also apart as the first (right after the submit: on both sides it waits
for the run's first workflow task, as a query is answered only once that has run) and the
later ones; the throughput (calls ended in the timed window, per second); the CPU each process
used; and every unexpected answer: any 5xx, any other status than the one the call should
get, any transport error (each kind counted, with a sample body). The goal is no 5xx at all;
the API answers 503 to a read no worker answered within its query wait (20 s), so a first
read that waits longer for the run's first workflow task is one. And where a decision
waits once signalled, from up to 40 decided runs' histories on each side: until a worker
picks up the task, the task itself, until the run closed (a longrun run that took a
decision ends in a task of its own, after a timer: `answered-before-the-end`).

The clients run in one process of their own (one event loop for all of them, its CPU
reported) so their CPU is not spent inside the API process, but
the machine the suite runs on has 2 cores: the client process, the API, the worker and the
Temporal server share them (the bare side: the client process, the benchmark's process and
the Temporal server), so every figure is a measure of the whole stack on those 2 cores, not
of the API alone. Speed is never a pass/fail here.

    .venv/bin/python bench/load.py [--clients 200] [--seconds 45] [--warmup 5] [--reads 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

_THIS = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_THIS))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow uses none of it.
    import httpx
    from figures import Figure
    from procs import cpu_s

    from api.reading import REQUEST_POLL_S
    from longrun.dev.stack import TemporalDevServer, free_port

SECTION = "load"
OPS = ("submit", "read", "decide")
# Reads apart in the detail: the first, right after the submit, waits for the run's first
# workflow task (a query is answered once it has run), on both sides; the later ones do not.
READS = ("first read", "later read")
# What each call should answer; anything else is counted as unexpected.
EXPECTED = {"submit": "202", "read": "200", "decide": "202"}
OK = "ok"  # a bare Temporal call that raised nothing
PLAN = {"steps": [{"id": "gate", "approval": {"message": "go on?"}}]}
SUBMIT = {"goal": "bench load", "plan": PLAN}
HTTP_TIMEOUT_S = 120.0
START_WAIT_S = 120.0
SAMPLE_CHARS = 300
# The model is never asked (the plan has no model step); a closed port stands in for it.
NO_MODEL = "http://127.0.0.1:9/v1"
T = TypeVar("T")


def _kind(op: str) -> str:
    """The operation a call counts as: a first or later read is a read."""
    return "read" if op in READS else op


@workflow.defn(name="bench.LoadApproval")
class LoadApproval:
    """Waits for a decision; its query answers whether it still waits."""

    def __init__(self) -> None:
        self.decision: str | None = None

    @workflow.signal(name="decide")
    def decide(self, decision: str) -> None:
        """Take the decision: the workflow ends."""
        self.decision = decision

    @workflow.query(name="status")
    def status(self) -> str:
        """`waiting_approval` until decided, then `completed`."""
        return "waiting_approval" if self.decision is None else "completed"

    @workflow.run
    async def run(self) -> str:
        """Wait for the decision."""
        await workflow.wait_condition(lambda: self.decision is not None)
        return self.decision or ""


# As the longrun worker runs its workflows: the module defining them imported once for
# the whole worker, not once per run.
_SHARED_SANDBOX = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(LoadApproval.__module__)
)


# --- the clients (their own process) ---------------------------------------------------


class Recorder:
    """Every call the clients made: its operation, start (seconds since the load began),
    milliseconds and outcome; a sample answer of each unexpected outcome."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.calls: list[tuple[str, float, float, str]] = []
        self.samples: dict[str, str] = {}
        self.cycles = 0
        self.abandoned: Counter[str] = Counter()  # cycles given up, by why

    def add(self, op: str, started: float, outcome: str, sample: str = "") -> None:
        """Record a call that started at `started` (perf_counter) and just ended."""
        ms = (time.perf_counter() - started) * 1000
        self.calls.append((op, started - self.began, ms, outcome))
        if outcome not in (EXPECTED[_kind(op)], OK):
            self.samples.setdefault(f"{op} {outcome}", sample[:SAMPLE_CHARS])

    async def http(self, op: str, call: Awaitable[httpx.Response]) -> httpx.Response | None:
        """Time one HTTP call (awaited at once); None when it got no answer."""
        started = time.perf_counter()
        try:
            response = await call
        except httpx.HTTPError as exc:
            self.add(op, started, type(exc).__name__, repr(exc))
            return None
        self.add(op, started, str(response.status_code), response.text)
        return response

    async def temporal(self, op: str, call: Awaitable[T]) -> tuple[bool, T | None]:
        """Time one Temporal client call (awaited at once): whether it raised nothing, and
        its answer."""
        started = time.perf_counter()
        try:
            answer = await call
        except Exception as exc:  # every failure is an outcome to count, not to stop on
            status = getattr(exc, "status", None)
            name = type(exc).__name__ + (f"({status.name})" if status is not None else "")
            self.add(op, started, name, repr(exc))
            return False, None
        self.add(op, started, OK)
        return True, answer


async def _api_client(url: str, deadline: float, reads: int, rec: Recorder) -> None:
    """One client of the API: submit, read until waiting (at least `reads` times), approve."""
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_S) as http:
        while time.perf_counter() < deadline:
            created = await rec.http("submit", http.post("/v1/runs", json=SUBMIT))
            if created is None or created.status_code != 202:
                continue
            run_id = created.json()["run_id"]
            approval: str | None = None
            n = 0
            while time.perf_counter() < deadline:
                read = await rec.http(READS[n > 0], http.get(f"/v1/runs/{run_id}"))
                n += 1
                run = read.json() if read is not None and read.status_code == 200 else {}
                status = run.get("status")
                if status in ("completed", "failed", "cancelled"):
                    rec.abandoned[f"run {status} before its approval"] += 1
                    break
                if status == "waiting_approval" and n >= reads:
                    approval = run["pending_approvals"][0]["approval_id"]
                    break
            if approval is None:
                continue
            decided = await rec.http(
                "decide",
                http.post(f"/v1/runs/{run_id}/approvals/{approval}", json={"decision": "approve"}),
            )
            if decided is not None and decided.status_code == 202:
                rec.cycles += 1


async def _bare_client(
    client: Client, queue: str, deadline: float, reads: int, rec: Recorder
) -> None:
    """One client of bare Temporal: start, query until waiting (at least `reads` times),
    signal the decision."""
    while time.perf_counter() < deadline:
        started, handle = await rec.temporal(
            "submit",
            client.start_workflow(
                LoadApproval.run, id=f"bench-load-{uuid.uuid4().hex}", task_queue=queue
            ),
        )
        if not started or handle is None:
            continue
        waiting = False
        n = 0
        while time.perf_counter() < deadline:
            _, status = await rec.temporal(READS[n > 0], handle.query(LoadApproval.status))
            n += 1
            if status == "completed":
                rec.abandoned["workflow completed before its decision"] += 1
                break
            if status == "waiting_approval" and n >= reads:
                waiting = True
                break
        if not waiting:
            continue
        decided, _ = await rec.temporal("decide", _decided(handle))
        if decided:
            rec.cycles += 1


async def _decided(handle: WorkflowHandle[Any, Any]) -> None:
    """Signal the decision, then ask until the workflow has taken it."""
    await handle.signal(LoadApproval.decide, "ok")
    pause, longest = REQUEST_POLL_S
    while await handle.query(LoadApproval.status) != "completed":
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)


async def run_clients(
    side: str, target: str, clients: int, seconds: float, reads: int, queue: str
) -> dict[str, Any]:
    """Run `clients` concurrent clients of one side for `seconds`; what they recorded."""
    cpu_before = _own_cpu_s()  # the imports before this are not the load's
    rec = Recorder()
    deadline = rec.began + seconds
    if side == "longrun":
        await asyncio.gather(*(_api_client(target, deadline, reads, rec) for _ in range(clients)))
    else:
        client = await Client.connect(target)
        await asyncio.gather(
            *(_bare_client(client, queue, deadline, reads, rec) for _ in range(clients))
        )
    return {
        "calls": rec.calls,
        "samples": rec.samples,
        "cycles": rec.cycles,
        "abandoned": dict(rec.abandoned),
        "cpu_s": _own_cpu_s() - cpu_before,
    }


# --- the stack and the measure -----------------------------------------------------------


@dataclass
class Side:
    """What one side's clients saw, and what its processes spent."""

    name: str
    clients: int
    seconds: float
    warmup: float
    ms: dict[str, list[float]]  # milliseconds of each operation started after the warm-up
    outcomes: dict[str, dict[str, int]]  # every call's outcome, by operation (reads apart)
    ended_in_window: int  # calls that ended between the warm-up and the end
    cycles: int  # submit, reads and decision all answered as expected
    abandoned: dict[str, int]
    samples: dict[str, str]  # an answer of each unexpected outcome
    cpu_s: dict[str, float]  # CPU seconds each process used during the load
    log_errors: list[str] = field(default_factory=list)  # error lines the API or worker logged
    # Median ms of a decision's way through Temporal, from decided runs' histories.
    phases: dict[str, float] = field(default_factory=dict)

    def quantile(self, op: str, q: int) -> float:
        """The q-th percentile of an operation's milliseconds (NaN if none)."""
        times = self.ms.get(op, [])
        if not times:
            return float("nan")
        if len(times) < 2:
            return times[0]
        return statistics.quantiles(times, n=100, method="inclusive")[q - 1]

    @property
    def throughput(self) -> float:
        """Calls of every kind ended per second in the timed window."""
        return self.ended_in_window / (self.seconds - self.warmup)

    def unexpected(self) -> dict[str, int]:
        """Calls whose outcome was not the expected one, by 'operation outcome'."""
        return {
            f"{op} {outcome}": n
            for op, counts in self.outcomes.items()
            for outcome, n in counts.items()
            if outcome not in (EXPECTED[_kind(op)], OK)
        }

    def server_errors(self) -> int:
        """5xx answers (bare side: calls that raised)."""
        if self.name == "longrun":
            return sum(
                n
                for counts in self.outcomes.values()
                for outcome, n in counts.items()
                if outcome.startswith("5")
            )
        return sum(self.unexpected().values())


@dataclass
class Result:
    """Both sides of one run."""

    reads: int
    longrun: Side
    bare: Side


def _side(
    name: str, clients: int, seconds: float, warmup: float, out: dict[str, Any]
) -> tuple[Side, float]:
    ms: dict[str, list[float]] = {op: [] for op in (*OPS, *READS)}
    outcomes: dict[str, Counter[str]] = {op: Counter() for op in ("submit", *READS, "decide")}
    ended = 0
    for op, start, took, outcome in out["calls"]:
        kind = _kind(op)
        outcomes[op][outcome] += 1
        if start >= warmup and outcome in (EXPECTED[kind], OK):
            ms[op].append(took)
            if kind != op:
                ms[kind].append(took)
        if warmup <= start + took / 1000 <= seconds:
            ended += 1
    side = Side(
        name=name,
        clients=clients,
        seconds=seconds,
        warmup=warmup,
        ms=ms,
        outcomes={op: dict(c) for op, c in outcomes.items()},
        ended_in_window=ended,
        cycles=out["cycles"],
        abandoned=out["abandoned"],
        samples=out["samples"],
        cpu_s={},
    )
    return side, float(out["cpu_s"])


async def _clients_process(
    side: str, target: str, clients: int, seconds: float, reads: int, queue: str = ""
) -> dict[str, Any]:
    """Run the clients in a process of their own; what they recorded."""
    argv = [sys.executable, _THIS, "--clients-of", side, "--target", target]
    argv += ["--clients", str(clients), "--seconds", str(seconds), "--reads", str(reads)]
    argv += ["--queue", queue]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the clients' process exited with {proc.returncode}: {stderr!r}")
    answer: dict[str, Any] = json.loads(stdout)
    return answer


PHASES_SAMPLED = 40
# A decision's way through Temporal, between the events of its run's history.
PHASES = {
    "signal -> task picked up": ("signaled", "task started"),
    "task run by the worker": ("task started", "task completed"),
    "signal -> run closed": ("signaled", "closed"),
}


async def _phases(address: str) -> dict[str, float]:
    """The median milliseconds of each of PHASES in the histories of up to PHASES_SAMPLED
    runs that ended: where a decision waits once signalled."""
    client = await Client.connect(address)
    found: dict[str, list[float]] = {name: [] for name in PHASES}
    listed = client.list_workflows("ExecutionStatus = 'Completed'", limit=PHASES_SAMPLED)
    async for execution in listed:
        at: dict[str, float] = {}
        async for event in client.get_workflow_handle(execution.id).fetch_history_events():
            kind, when = event.event_type, event.event_time.ToDatetime().timestamp()
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                at.setdefault("signaled", when)
            elif "signaled" not in at:
                continue
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                at.setdefault("task started", when)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                at.setdefault("task completed", when)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                at["closed"] = when
        for name, (start, end) in PHASES.items():
            if start in at and end in at:
                found[name].append((at[end] - at[start]) * 1000)
    return {name: statistics.median(ms) for name, ms in found.items() if ms}


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _env(address: str, tmp: Path) -> dict[str, str]:
    """The environment of the API and the worker, configured like a deployment."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "PYTHONPATH": _ROOT,
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
        "OPENAI_BASE_URL": NO_MODEL,
        "OPENAI_API_KEY": "x",
        "LONGRUN_DATA_DIR": str(tmp / "data"),
    }


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _until_ready(
    proc: subprocess.Popen[bytes], ready: Callable[[], Awaitable[bool]], what: str, log: Path
) -> None:
    deadline = time.monotonic() + START_WAIT_S
    while not await ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {_read(log)[-2000:]}")
        await asyncio.sleep(0.2)


def _read(log: Path) -> str:
    return log.read_text(errors="replace")


def _error_lines(*logs: Path) -> list[str]:
    """The lines of the logs that report an error or a traceback, with their file's name."""
    found = []
    for log in logs:
        for line in _read(log).splitlines():
            if any(word in line for word in ("ERROR", "Traceback", "Exception")):
                found.append(f"{log.stem}: {line[:SAMPLE_CHARS]}")
    return found


async def _longrun(clients: int, seconds: float, warmup: float, reads: int) -> Side:
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as name:
        tmp = Path(name)
        async with TemporalDevServer(tmp / "temporal.db", port=free_port()) as server:
            assert server.process is not None
            env = _env(server.address, tmp)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            worker_log, api_log = tmp / "worker.log", tmp / "api.log"
            uvicorn = ["-m", "uvicorn", "api.app:app", "--host", "127.0.0.1"]
            uvicorn += ["--port", str(port), "--log-level", "warning"]
            worker = _start(["-m", "worker"], env, worker_log)
            api = _start(uvicorn, env, api_log)
            try:

                async def polling() -> bool:
                    return "worker polling" in _read(worker_log)

                async def healthy() -> bool:
                    try:
                        async with httpx.AsyncClient(timeout=2) as http:
                            return (await http.get(f"{url}/healthz")).status_code == 200
                    except httpx.HTTPError:
                        return False

                await _until_ready(worker, polling, "the worker", worker_log)
                await _until_ready(api, healthy, "the API", api_log)
                pids = {"API": api.pid, "worker": worker.pid, "Temporal": server.process.pid}
                before = {name: cpu_s(pid) for name, pid in pids.items()}
                out = await _clients_process("longrun", url, clients, seconds, reads)
                cpu = {name: cpu_s(pid) - before[name] for name, pid in pids.items()}
            finally:
                _stop(api, worker)
            side, client_cpu = _side("longrun", clients, seconds, warmup, out)
            side.cpu_s = {"clients": client_cpu, **cpu}
            side.log_errors = _error_lines(api_log, worker_log)
            side.phases = await _phases(server.address)
            return side


async def _bare(clients: int, seconds: float, warmup: float, reads: int) -> Side:
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as name:
        tmp = Path(name)
        async with TemporalDevServer(tmp / "temporal.db", port=free_port()) as server:
            assert server.process is not None
            client = await Client.connect(server.address)
            queue = f"bench-load-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client,
                task_queue=queue,
                workflows=[LoadApproval],
                workflow_runner=_SHARED_SANDBOX,
            ):
                temporal, own = cpu_s(server.process.pid), _own_cpu_s()
                out = await _clients_process("bare", server.address, clients, seconds, reads, queue)
                cpu = {
                    "bare worker": _own_cpu_s() - own,
                    "Temporal": cpu_s(server.process.pid) - temporal,
                }
            side, client_cpu = _side("bare Temporal", clients, seconds, warmup, out)
            side.cpu_s = {"clients": client_cpu, **cpu}
            side.phases = await _phases(server.address)
            return side


async def measure(
    clients: int = 200, seconds: float = 45.0, warmup: float = 5.0, reads: int = 3
) -> Result:
    """Load the API, then bare Temporal, with the same clients; see the module's docstring."""
    longrun = await _longrun(clients, seconds, warmup, reads)
    bare = await _bare(clients, seconds, warmup, reads)
    return Result(reads, longrun, bare)


# --- the report ------------------------------------------------------------------------


def report(result: Result) -> None:
    """Print each side's latencies, throughput, CPU and unexpected answers."""
    lr = result.longrun
    print(
        f"{lr.clients} clients for {lr.seconds:g} s (first {lr.warmup:g} s untimed), each "
        f"cycle: submit, >= {result.reads} reads until waiting, decide"
    )
    print(f"{'side':<14} {'op':<10} {'calls':>7} {'p50 ms':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for side in (result.longrun, result.bare):
        for op in ("submit", "read", *READS, "decide"):
            times = side.ms[op]
            top = max(times) if times else float("nan")
            p50, p90, p99 = (side.quantile(op, q) for q in (50, 90, 99))
            print(
                f"{side.name:<14} {op:<10} {len(times):>7} {p50:>8.1f} {p90:>8.1f} {p99:>8.1f}"
                f" {top:>8.1f}"
            )
    for side in (result.longrun, result.bare):
        cpu = ", ".join(f"{name} {s:.1f}" for name, s in side.cpu_s.items())
        print(
            f"{side.name}: {side.throughput:.1f} calls/s, {side.cycles} cycles decided; "
            f"CPU seconds: {cpu}"
        )
        if side.abandoned:
            print(f"  cycles given up: {side.abandoned}")
        unexpected = side.unexpected()
        print(f"  unexpected answers: {unexpected or 'none'}")
        for key, sample in side.samples.items():
            print(f"    {key}: {sample}")
        for line in side.log_errors[:20]:
            print(f"  logged: {line}")
        phases = ", ".join(f"{name} {ms:.0f}" for name, ms in side.phases.items())
        print(f"  a decision's way, median ms: {phases or 'no decided run sampled'}")
    ratios = ", ".join(
        f"{op} p50 {lr.quantile(op, 50) / result.bare.quantile(op, 50):.2f}" for op in OPS
    )
    print(f"longrun / bare Temporal: {ratios}")
    print(f"API 5xx answers: {lr.server_errors()} (the goal: none)")


def figures(result: Result) -> list[Figure]:
    """The suite's figures of this benchmark."""
    lr, bare = result.longrun, result.bare
    n = lr.clients
    names = {
        "submit": "POST /v1/runs vs start_workflow",
        "read": "GET /v1/runs/{id} vs status query",
        "decide": "POST approval vs signal, until taken",
    }
    out = [
        Figure(
            SECTION,
            f"{names[op]}, {n} clients, p{q}",
            "ms",
            lr.quantile(op, q),
            bare.quantile(op, q),
        )
        for op in OPS
        for q in (50, 99)
    ]
    out.append(
        Figure(SECTION, f"calls per second, {n} clients", "1/s", lr.throughput, bare.throughput)
    )
    out.append(
        Figure(
            SECTION,
            f"5xx answers (bare: failed calls), {n} clients",
            "calls",
            lr.server_errors(),
            bare.server_errors(),
            target="0",
        )
    )
    return out


def main() -> None:
    """Parse arguments and run (or, with --clients-of, be the clients' process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=45.0, help="how long the load lasts")
    parser.add_argument("--warmup", type=float, default=5.0, help="first seconds not timed")
    parser.add_argument("--reads", type=int, default=3, help="least reads of a run per cycle")
    parser.add_argument("--clients-of", choices=("longrun", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--queue", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clients_of is not None:
        out = asyncio.run(
            run_clients(
                args.clients_of, args.target, args.clients, args.seconds, args.reads, args.queue
            )
        )
        json.dump(out, sys.stdout)
        sys.stdout.flush()
        # The Temporal client's core runtime keeps native threads that may still
        # release the GIL while the interpreter finalizes, which aborts the
        # process after the answer is written: end without finalizing.
        os._exit(0)
    result = asyncio.run(measure(args.clients, args.seconds, args.warmup, args.reads))
    report(result)


if __name__ == "__main__":
    main()
