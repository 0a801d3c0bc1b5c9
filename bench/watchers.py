"""Many clients watching live runs' events through one API process, against plain SSE.

What longrun's event stream (`GET /v1/runs/{id}/events`) costs beside a plain SSE app's.

Starts a headless Temporal dev server, a longrun worker (in this process) and the API as
its own process (`uvicorn api.app:app`, as deployed), and submits R runs whose plans are
chains of `wait` steps of PAUSE seconds: every PAUSE seconds each run says `step.completed`
and `step.started` (durable timers, nothing else running), a steady stream of events. Then
W SSE clients connect over real HTTP, W / R to each run, from C client processes of their
own (httpx2's SSE reader; C = 2 at full size), so that the clients' CPU is neither the
API's nor this process's. A few seconds after the last one connected, a window of WINDOW
seconds opens, and it measures:

- the API process's memory per watcher: its resident memory (VmRSS) once every client is
  connected, less what it was before they connected (after a few warm-up streams), over W;
- each event's delay, from when the workflow recorded it (`RunEvent.at`, the workflow's
  time) to when a client read it, p50 and p99, over the events recorded in the window;
- the `events` queries the API sent to Temporal per second in the window (its
  `longrun_event_queries` counter on /metrics), against the ideal of one per run per poll
  interval, R / POLL_S; one per watcher would be W / POLL_S;
- the API process's CPU in the window.

Besides, it prints the CPU the clients, the worker and Temporal took in the window, and how
many events a run recorded a second: the worker and Temporal answer every query, and on a
small machine they may slow the runs themselves.

The baseline, in the same run: a plain FastAPI + sse-starlette app defined here, in a
uvicorn process of its own, that keeps R logs in memory growing at the same pace (two
events every PAUSE seconds, shaped like longrun's) and streams them the same way to W
clients connected the same way; it sends each event as soon as it is recorded (no polling,
no Temporal). For queries the baseline is the ideal, R / POLL_S.

Prints the figures and their ratios (longrun / baseline); nothing here is a pass/fail.

    .venv/bin/python bench/watchers.py [--watchers 1000] [--runs 100] [--window 20]
                                       [--pause 1] [--clients 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from asyncio.subprocess import PIPE
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from figures import Figure  # noqa: E402
from procs import cpu_s, rss_kb  # noqa: E402

SIDES = ("baseline", "longrun")
OPENING = 50  # streams a client process opens at once
WARMUP_STREAMS = 5  # opened and closed before the server's memory is first read
# From the last client connected to the memory read and the window; and after the window,
# for the events recorded in it to arrive. A short window (the smoke suite's) waits less.
SETTLE_S = 3.0
GRACE_S = 5.0
START_WAIT_S = 120.0  # for a server process to answer
CONNECT_WAIT_S = 600.0  # for every client to connect
RUN_SPARE_S = 300.0  # how much longer than the window a run lasts (submits, connects)
BASELINE_KEPT = 100  # events each of the baseline's logs keeps (and starts with)
API_QUEUE = "bench-watchers"


@dataclass
class Side:
    """What W watchers cost one side's server process, and what they saw."""

    rss_kb_before: int
    rss_kb_connected: int
    rss_kb_end: int  # at the end of the window: more than when connected is a leak
    connect_s: float  # from the first client process started to the last stream answered
    window_s: float
    cpu_s: float  # the server process's, in the window
    client_cpu_s: float  # the client processes', in the window
    delays_ms: list[float]  # of every event recorded in the window, as each watcher read it
    events: int  # events read in all, window or not
    gaps: int  # events a watcher missed or read twice (ids not one after the other)
    failed: int  # streams that could not connect or ended before the window closed
    others_cpu_s: dict[str, float]  # other processes' CPU in the window, by name
    queries: float | None = None  # `events` queries sent in the window (longrun only)
    pages: float | None = None  # pages served to watchers in the window (longrun only)


@dataclass
class Result:
    """Both sides, watched the same way."""

    watchers: int
    runs: int
    pause_s: float
    poll_s: float
    sides: dict[str, Side]

    def memory_kb(self, side: str) -> float:
        """Server memory per watcher."""
        s = self.sides[side]
        return (s.rss_kb_connected - s.rss_kb_before) / self.watchers

    def delay_ms(self, side: str, q: int) -> float:
        """The q-th percentile of the events' delays."""
        delays = self.sides[side].delays_ms
        if len(delays) < 2:
            return delays[0] if delays else math.nan
        return statistics.quantiles(delays, n=100, method="inclusive")[q - 1]

    def cpu_percent(self, side: str) -> float:
        """The server process's CPU in the window, in percent of one core."""
        s = self.sides[side]
        return 100 * s.cpu_s / s.window_s

    @property
    def queries_per_s(self) -> float:
        """`events` queries longrun's API sent to Temporal per second."""
        s = self.sides["longrun"]
        return (s.queries or 0.0) / s.window_s

    @property
    def ideal_queries_per_s(self) -> float:
        """One query per run per poll interval."""
        return self.runs / self.poll_s


# --- the baseline: plain SSE from memory ---------------------------------------------------


class _Event(BaseModel):
    """An event shaped like longrun's RunEvent."""

    id: int
    at: datetime
    type: str
    step: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class _Log:
    """One run's latest events, in memory; `changed` is set at each new one."""

    def __init__(self, kept: int) -> None:
        self.events: deque[_Event] = deque(maxlen=kept)
        self.next_id = 1
        self.changed = asyncio.Event()

    def emit(self, type: str, step: str, **data: Any) -> None:
        """Record an event now and wake the watchers."""
        at = datetime.now(UTC)
        self.events.append(_Event(id=self.next_id, at=at, type=type, step=step, data=data))
        self.next_id += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def after(self, after: int) -> list[_Event]:
        """The events kept after id `after`."""
        first = self.events[0].id if self.events else self.next_id
        return list(islice(self.events, max(0, after + 1 - first), None))

    def step(self, n: int) -> None:
        """What a run of wait steps says as step `n` ends: it ended, the next one started."""
        self.emit("step.completed", f"w{n}", attempts=1)
        self.emit("step.started", f"w{n + 1}", kind="wait")


async def _pace(log: _Log, pause_s: float) -> None:
    """Step the log every `pause_s` seconds, from a random moment (runs start apart)."""
    loop = asyncio.get_running_loop()
    due = loop.time() + random.uniform(0, pause_s)
    n = BASELINE_KEPT // 2
    while True:
        await asyncio.sleep(max(0.0, due - loop.time()))
        log.step(n)
        n += 1
        due += pause_s


async def _follow(log: _Log, after: int) -> AsyncIterator[ServerSentEvent]:
    """The log's events after `after` as they come."""
    while True:
        changed = log.changed
        for event in log.after(after):
            yield ServerSentEvent(data=event.model_dump_json(), event=event.type, id=str(event.id))
            after = event.id
        await changed.wait()


def baseline_app(runs: int, pause_s: float, ping_s: float) -> FastAPI:
    """A plain SSE app: `GET /runs/{n}/events` streams run n's in-memory log."""
    logs = [_Log(BASELINE_KEPT) for _ in range(runs)]
    for log in logs:  # as many events as it keeps, before anyone watches
        for n in range(BASELINE_KEPT // 2):
            log.step(n)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pacing = [asyncio.create_task(_pace(log, pause_s)) for log in logs]
        yield
        for task in pacing:
            task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/runs/{n}/events", response_class=EventSourceResponse)
    async def events(n: int, after: int = 0) -> EventSourceResponse:
        return EventSourceResponse(_follow(logs[n], after), ping=ping_s)

    return app


# --- a client process: W / C streams -------------------------------------------------------


class _Watcher:
    """What one stream read: (recorded at, read at) of each event, in epoch seconds."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float]] = []
        self.last_id: int | None = None
        self.gaps = 0
        self.ended_at: float | None = None  # the stream failed or closed (epoch seconds)

    def read(self, event: httpx2.ServerSentEvent) -> None:
        now = time.time()
        at = datetime.fromisoformat(json.loads(event.data)["at"]).timestamp()
        self.seen.append((at, now))
        n = int(event.id)
        if self.last_id is not None and n != self.last_id + 1:
            self.gaps += 1
        self.last_id = n


async def _stream(
    http: httpx2.AsyncClient,
    url: str,
    watcher: _Watcher,
    opening: asyncio.Semaphore,
    answered: Callable[[], None],
) -> None:
    """Read one stream until cancelled; `answered` once it connected or failed to."""
    await opening.acquire()
    told = False
    try:
        async with http.sse(url) as source:
            source.response.raise_for_status()
            opening.release()
            told = True
            answered()
            async for event in source:
                watcher.read(event)
    except httpx2.HTTPError:
        pass
    finally:
        watcher.ended_at = time.time()
        if not told:
            opening.release()
            answered()


async def watch(urls: list[str]) -> None:
    """A client process: a stream to each of `urls`; says `connected` once each answered,
    then reads the window (JSON from stdin) and, after its grace, prints what it saw in it."""
    loop = asyncio.get_running_loop()
    watchers = [_Watcher() for _ in urls]
    waiting = len(urls)
    all_answered = asyncio.Event()

    def answered() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0:
            all_answered.set()

    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx2.Timeout(CONNECT_WAIT_S, read=None)
    async with httpx2.AsyncClient(limits=limits, timeout=timeout) as http:
        opening = asyncio.Semaphore(OPENING)
        tasks = [
            asyncio.create_task(_stream(http, url, w, opening, answered))
            for url, w in zip(urls, watchers, strict=True)
        ]
        await all_answered.wait()
        print("connected", flush=True)
        window = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
        await asyncio.sleep(max(0.0, window["end"] + window["grace"] - time.time()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    start, end = window["start"], window["end"]
    delays = [(now - at) * 1000 for w in watchers for at, now in w.seen if start <= at < end]
    failed = sum(w.ended_at is not None and w.ended_at < end for w in watchers)
    events = sum(len(w.seen) for w in watchers)
    gaps = sum(w.gaps for w in watchers)
    seen = {"delays_ms": delays, "events": events, "gaps": gaps, "failed": failed}
    print(json.dumps(seen), flush=True)


# --- measuring one side --------------------------------------------------------------------


async def _line(proc: asyncio.subprocess.Process, what: str, wait_s: float) -> bytes:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), wait_s)
    if not line:
        raise RuntimeError(f"{what} exited ({await proc.wait()})")
    return line


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def _server(argv: list[str], url: str, log: Path, **kw: Any) -> asyncio.subprocess.Process:
    """A server process, once it answers `GET {url}/healthz`."""
    with log.open("w") as sink:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=sink, stderr=sink, **kw)
    deadline = time.monotonic() + START_WAIT_S
    async with httpx2.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                break
            try:
                if (await http.get(f"{url}/healthz")).status_code == 200:
                    return proc
            except httpx2.HTTPError:
                pass
            await asyncio.sleep(0.1)
    await _stop(proc)
    raise RuntimeError(f"{argv[:4]} did not start: {_tail(log)}")


Counters = Callable[[], Awaitable[dict[str, float]]]


async def _watch(
    server: asyncio.subprocess.Process,
    urls: list[str],
    clients: int,
    window_s: float,
    counters: Counters | None,
    others: dict[str, int],
) -> Side:
    """Warm the server up, connect a stream to each of `urls` from `clients` processes,
    and measure one window (and the CPU of the `others` processes, by name and pid)."""
    async with httpx2.AsyncClient(timeout=60) as http:
        for url in urls[:WARMUP_STREAMS]:
            async with http.sse(url) as source:
                async for _ in source:
                    break
    await asyncio.sleep(1)
    rss_before = rss_kb(server.pid)
    procs: list[asyncio.subprocess.Process] = []
    try:
        started = time.perf_counter()
        for n in range(clients):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--watch", stdin=PIPE, stdout=PIPE, limit=2**28
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(urls[n::clients]).encode() + b"\n")
            procs.append(proc)
        for proc in procs:
            if (await _line(proc, "a client", CONNECT_WAIT_S)).strip() != b"connected":
                raise RuntimeError("a client process did not connect")
        connect_s = time.perf_counter() - started
        await asyncio.sleep(min(SETTLE_S, 0.3 * window_s))
        rss_connected = rss_kb(server.pid)
        before = await counters() if counters else {}
        cpu, client_cpu = cpu_s(server.pid), sum(cpu_s(p.pid) for p in procs)
        others_cpu = {name: cpu_s(pid) for name, pid in others.items()}
        start = time.time()
        await asyncio.sleep(window_s)
        end = time.time()
        rss_end = rss_kb(server.pid)
        cpu, client_cpu = cpu_s(server.pid) - cpu, sum(cpu_s(p.pid) for p in procs) - client_cpu
        others_cpu = {name: cpu_s(pid) - others_cpu[name] for name, pid in others.items()}
        after = await counters() if counters else {}
        for proc in procs:
            assert proc.stdin is not None
            window = {"start": start, "end": end, "grace": min(GRACE_S, window_s)}
            proc.stdin.write(json.dumps(window).encode() + b"\n")
        seen = [json.loads(await _line(p, "a client", GRACE_S + 120)) for p in procs]
    finally:
        for proc in procs:
            await _stop(proc)
    counted = {name: after[name] - before[name] for name in after}
    return Side(
        rss_kb_before=rss_before,
        rss_kb_connected=rss_connected,
        rss_kb_end=rss_end,
        connect_s=connect_s,
        window_s=end - start,
        cpu_s=cpu,
        client_cpu_s=client_cpu,
        delays_ms=[d for s in seen for d in s["delays_ms"]],
        events=sum(s["events"] for s in seen),
        gaps=sum(s["gaps"] for s in seen),
        failed=sum(s["failed"] for s in seen),
        others_cpu_s=others_cpu,
        queries=counted.get("longrun_event_queries"),
        pages=counted.get("longrun_event_pages"),
    )


def _targets(watchers: int, runs: list[str]) -> list[str]:
    """Watcher n watches run n mod R."""
    return [runs[n % len(runs)] for n in range(watchers)]


async def measure_baseline(
    tmp: Path, watchers: int, runs: int, window_s: float, pause_s: float, clients: int
) -> Side:
    """The plain SSE app in its own process, watched like the API."""
    from api.routes.events import PING_S
    from longrun.dev.stack import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, __file__, "--serve-baseline", "--port", str(port)]
    argv += ["--runs", str(runs), "--pause", str(pause_s), "--ping", str(PING_S)]
    server = await _server(argv, url, tmp / "baseline.log")
    try:
        urls = [f"{url}/runs/{n}/events" for n in range(runs)]
        return await _watch(server, _targets(watchers, urls), clients, window_s, None, {})
    finally:
        await _stop(server)


async def measure_longrun(
    tmp: Path, watchers: int, runs: int, window_s: float, pause_s: float, clients: int
) -> Side:
    """The API in its own process, its runs on a worker in this one, watched."""
    # Imported here: the baseline's and the clients' processes stay plain.
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving

    async with TemporalDevServer(tmp / "temporal.db", port=free_port()) as temporal:
        settings = Settings(
            _env_file=None,
            TEMPORAL_ADDRESS=temporal.address,
            LONGRUN_TASK_QUEUE=API_QUEUE,
            LONGRUN_DATA_DIR=tmp / "data",
            OPENAI_BASE_URL="http://127.0.0.1:9/v1",
            OPENAI_API_KEY="x",
            LONGRUN_WORKER_SHUTDOWN_S=0,
        )
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": _ROOT,
            "TEMPORAL_ADDRESS": temporal.address,
            "LONGRUN_TASK_QUEUE": API_QUEUE,
            "LONGRUN_DATA_DIR": str(tmp / "data"),
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "OPENAI_API_KEY": "x",
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "uvicorn", "api.app:app", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
        client = await connect(settings)
        async with serving(client, settings):
            api = await _server(argv, url, tmp / "api.log", cwd=tmp, env=env)
            try:
                async with httpx2.AsyncClient(base_url=url, timeout=60) as http:
                    steps = math.ceil((window_s + RUN_SPARE_S) / pause_s)
                    ids = [await _submit(http, steps, pause_s) for _ in range(runs)]

                    async def counters() -> dict[str, float]:
                        return await _counters(http)

                    urls = [f"{url}/v1/runs/{run_id}/events" for run_id in ids]
                    assert temporal.process is not None
                    others = {"worker": os.getpid(), "Temporal": temporal.process.pid}
                    targets = _targets(watchers, urls)
                    return await _watch(api, targets, clients, window_s, counters, others)
            finally:
                await _stop(api)


async def _submit(http: httpx2.AsyncClient, steps: int, pause_s: float) -> str:
    """A run of `steps` wait steps of `pause_s` seconds, one after the other."""
    plan: list[dict[str, Any]] = [
        {"id": f"w{n}", "wait": {"seconds": pause_s}} for n in range(min(steps, 1000))
    ]
    for n in range(1, len(plan)):
        plan[n]["depends_on"] = [f"w{n - 1}"]
    created = await http.post("/v1/runs", json={"goal": "watched", "plan": {"steps": plan}})
    created.raise_for_status()
    run_id: str = created.json()["run_id"]
    return run_id


async def _counters(http: httpx2.AsyncClient) -> dict[str, float]:
    """The API's event counters, from /metrics."""
    text = (await http.get("/metrics")).raise_for_status().text
    wanted = ("longrun_event_queries", "longrun_event_pages")
    return {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(text)
        if family.name in wanted
    }


async def measure(
    watchers: int, runs: int, window_s: float = 20.0, pause_s: float = 1.0, clients: int = 2
) -> Result:
    """Both sides, one after the other; see the module's docstring."""
    from api.feed import POLL_S

    if watchers < runs:
        raise ValueError("watchers must be at least runs")
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        size = (watchers, runs, window_s, pause_s, clients)
        baseline = await measure_baseline(Path(tmp), *size)
        ours = await measure_longrun(Path(tmp), *size)
    return Result(watchers, runs, pause_s, POLL_S, {"baseline": baseline, "longrun": ours})


# --- report --------------------------------------------------------------------------------


def report(result: Result) -> None:
    """Print each side's detail and the ratios."""
    w, r = result.watchers, result.runs
    print(f"{w} watchers on {r} runs (2 events every {result.pause_s:g} s each), one server")
    print(f"{'':<36} {'baseline':>10} {'longrun':>10} {'ratio':>7}")
    rows: list[tuple[str, Callable[[str], float]]] = [
        ("memory per watcher (KB)", result.memory_kb),
        ("delay p50 (ms)", lambda side: result.delay_ms(side, 50)),
        ("delay p99 (ms)", lambda side: result.delay_ms(side, 99)),
        ("server CPU in the window (% core)", result.cpu_percent),
    ]
    for label, value in rows:
        base, ours = value("baseline"), value("longrun")
        ratio = ours / base if base else math.nan
        print(f"{label:<36} {base:>10.1f} {ours:>10.1f} {ratio:>7.2f}")
    for side in SIDES:
        s = result.sides[side]
        print(
            f"{side}: RSS {s.rss_kb_before / 1024:.0f} MB before, "
            f"{s.rss_kb_connected / 1024:.0f} connected, {s.rss_kb_end / 1024:.0f} at the end, "
            f"connected in {s.connect_s:.1f} s, window {s.window_s:.1f} s, "
            f"{len(s.delays_ms)} events read in it ({s.events} in all), "
            f"{s.gaps} gaps, {s.failed} streams failed"
        )
        recorded = len(s.delays_ms) / result.watchers / s.window_s
        cpu = {"clients": s.client_cpu_s, **s.others_cpu_s}
        shares = ", ".join(f"{name} {100 * v / s.window_s:.0f}%" for name, v in cpu.items())
        print(
            f"  {recorded:.2f} events a run a second in the window ({2 / result.pause_s:g} "
            f"paced); CPU of a core besides the server's: {shares}"
        )
    longrun = result.sides["longrun"]
    per_s, ideal = result.queries_per_s, result.ideal_queries_per_s
    pages = (longrun.pages or 0.0) / longrun.window_s
    per_run = per_s / ideal  # queries per run per poll interval
    shared = "one per run" if per_run <= 1.05 else "more than one per run"
    print(
        f"events queries: {per_s:.1f}/s, {per_run:.2f} per run per {result.poll_s:g} s "
        f"({shared}; the ideal is {ideal:.0f}/s, one per watcher would be "
        f"{w / result.poll_s:.0f}/s); {pages:.0f} pages/s served to the watchers, "
        f"{pages / per_s if per_s else 0:.1f} per query"
    )


def figures(result: Result) -> list[Figure]:
    """The suite's figures of this benchmark."""
    w, r = result.watchers, result.runs
    plain = "plain SSE"
    return [
        Figure(
            "watchers",
            f"API memory per watcher, {w} on {r} live runs",
            "KB",
            result.memory_kb("longrun"),
            result.memory_kb("baseline"),
            baseline_name=plain,
        ),
        Figure(
            "watchers",
            "event delay, recorded -> read, p50",
            "ms",
            result.delay_ms("longrun", 50),
            result.delay_ms("baseline", 50),
            baseline_name=plain,
        ),
        Figure(
            "watchers",
            "event delay, recorded -> read, p99",
            "ms",
            result.delay_ms("longrun", 99),
            result.delay_ms("baseline", 99),
            baseline_name=plain,
        ),
        Figure(
            "watchers",
            f"events queries to Temporal, {w} watchers on {r} runs",
            "/s",
            result.queries_per_s,
            result.ideal_queries_per_s,
            baseline_name=f"1 per run per {result.poll_s:g} s",
            target="<= 1",
        ),
        Figure(
            "watchers",
            "API CPU while they watch",
            "% core",
            result.cpu_percent("longrun"),
            result.cpu_percent("baseline"),
            baseline_name=plain,
        ),
    ]


def main() -> None:
    """Parse the arguments: measure, or be the baseline's server or a client process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--watchers", type=int, default=1000, help="SSE clients in all")
    parser.add_argument("--runs", type=int, default=100, help="live runs they watch")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds of each wait step")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--watch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ping", type=float, default=15.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.watch:
        asyncio.run(watch(json.loads(sys.stdin.readline())))
        return
    if args.serve_baseline:
        app = baseline_app(args.runs, args.pause, args.ping)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
        return
    if args.runs < 1 or args.watchers < args.runs or args.clients < 1:
        parser.error("need --runs >= 1, --watchers >= --runs and --clients >= 1")
    size = {"window_s": args.window, "pause_s": args.pause, "clients": args.clients}
    report(asyncio.run(measure(args.watchers, args.runs, **size)))


if __name__ == "__main__":
    main()
