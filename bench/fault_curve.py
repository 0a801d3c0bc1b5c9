"""The share of runs that complete against their length, when calls fail now and then.

The seed's headline as a measurement: a step that fails 1% of the time fails a 100-step job
63% of the time when nothing catches it. For each length N (steps) and per-call fault rate p:

- longrun: K plan runs of N `http_request GET <flaky>/ok` steps, one after another, on a
  headless Temporal dev server with a longrun worker process (`python -m worker`). The
  target answers 503 with probability p; a 5xx is transient for longrun, so each call is
  an activity retried with the default policy (5 attempts, 1 s backoff doubling). A run
  counts as completed when it returns its result (a step failing all its attempts fails it).
- plain loop: the same N calls made in this process one after another with httpx and no
  retries; it completes only if every call succeeds, so it should follow (1 - p) ** N.
- longrun with worker kills: the same as longrun at the middle fault rate while the worker
  process is killed (SIGKILL) every `--kill-every` seconds and started again at once.

Prints a table, and with `--plot PATH` draws the curves (matplotlib, the bench extra:
`pip install -e '.[bench]'`). Always exits 0: nothing here is a pass/fail.

    .venv/bin/python bench/fault_curve.py [--steps 10,50,100,200] [--rates 0.01,0.05,0.10]
        [--runs 10] [--kill-every 15] [--plot docs/fault-curve.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import uuid
from asyncio.subprocess import Process
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from agent_faults import Flaky  # noqa: E402
from figures import Figure  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import SearchAttributePair, TypedSearchAttributes  # noqa: E402

from longrun import wire  # noqa: E402
from longrun.attributes import STATUS_ATTRIBUTE  # noqa: E402
from longrun.catalogue import CATALOGUE  # noqa: E402
from longrun.contracts import Plan, RunConfig, RunInput, Step  # noqa: E402
from longrun.dev.stack import ServerThread, TemporalDevServer, free_port  # noqa: E402
from longrun.plans import normalize_plan  # noqa: E402
from longrun.settings import Settings  # noqa: E402
from longrun.temporal import connect, ensure_search_attributes  # noqa: E402

READY_S = 60.0


@dataclass
class Point:
    """The share of K runs of N steps that completed at fault rate p, on one side."""

    side: str  # "longrun", "plain loop", "longrun, worker killed"
    rate: float
    steps: int
    runs: int
    completed: int

    @property
    def share(self) -> float:
        """Completed runs over runs."""
        return self.completed / self.runs


class WorkerProcess:
    """The longrun worker as a process of its own, so it can be killed."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: Process | None = None
        self.kills = 0

    async def start(self) -> None:
        """Start it and wait until it polls its task queue."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "worker", env=self.env, cwd=_ROOT, stdout=out, stderr=out
            )
        for _ in range(int(READY_S * 5)):
            if b"worker polling" in self.log.read_bytes()[offset:]:
                return
            if self.proc.returncode is not None:
                raise RuntimeError(f"the worker exited: {self.log.read_text()[-2000:]}")
            await asyncio.sleep(0.2)
        raise RuntimeError("the worker did not poll in time")

    async def kill_and_restart(self) -> None:
        """SIGKILL it and start a new one."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        self.kills += 1
        await self.start()

    async def stop(self) -> None:
        """Stop it (SIGTERM)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


async def longrun_run(client: Client, queue: str, url: str, steps: int) -> bool:
    """One run of `steps` calls of the flaky target; whether it completed."""
    run_id = f"run-{uuid.uuid4().hex}"
    plan = Plan(
        steps=[
            Step.model_validate(
                {"id": f"s{i}", "tool": "http_request", "args": {"method": "GET", "url": url}}
                | ({"depends_on": [f"s{i - 1}"]} if i else {})
            )
            for i in range(steps)
        ]
    )
    inp = RunInput(
        run_id=run_id,
        goal=f"bench: {steps} flaky calls",
        plan=normalize_plan(plan, CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    attrs = TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "running")])
    handle = await client.start_workflow(
        wire.RUN_WORKFLOW, inp, id=run_id, task_queue=queue, search_attributes=attrs
    )
    try:
        await handle.result()
    except Exception:
        return False
    return True


async def plain_run(http: httpx.AsyncClient, url: str, steps: int) -> bool:
    """The same calls, one after another, no retries; whether every one succeeded."""
    for _ in range(steps):
        if (await http.get(url)).status_code != 200:
            return False
    return True


async def _kill_now_and_then(worker: WorkerProcess, every: float, rng: random.Random) -> None:
    while True:
        await asyncio.sleep(every * rng.uniform(0.5, 1.5))
        await worker.kill_and_restart()


async def measure(
    steps: list[int], rates: list[float], runs: int, kill_every: float, seed: int
) -> tuple[list[Point], int]:
    """Every point of every curve, and how many times the worker was killed."""
    flaky = Flaky()
    points: list[Point] = []
    with (
        tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp,
        ServerThread(flaky.app()) as target,
    ):
        url = f"{target.url}/ok"
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            queue = f"bench-faults-{uuid.uuid4().hex[:8]}"
            settings = Settings(_env_file=None, TEMPORAL_ADDRESS=server.address)
            client = await connect(settings)
            await ensure_search_attributes(client)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": tmp,
                "TEMPORAL_ADDRESS": server.address,
                "LONGRUN_TASK_QUEUE": queue,
                "LONGRUN_DATA_DIR": str(Path(tmp) / "data"),
                "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                "OPENAI_API_KEY": "x",
                "LONGRUN_WORKER_SHUTDOWN_S": "0",
                "LONGRUN_HTTP_ALLOW_HOSTS": urlsplit(target.url).netloc,
            }
            worker = WorkerProcess(env, Path(tmp) / "worker.log")
            await worker.start()
            try:
                async with httpx.AsyncClient(timeout=30) as http:
                    for rate in rates:
                        for n in steps:
                            flaky.reset(rate, f"{seed}:plain:{rate}:{n}")
                            done = [await plain_run(http, url, n) for _ in range(runs)]
                            points.append(Point("plain loop", rate, n, runs, sum(done)))
                            flaky.reset(rate, f"{seed}:longrun:{rate}:{n}")
                            done = await asyncio.gather(
                                *(longrun_run(client, queue, url, n) for _ in range(runs))
                            )
                            points.append(Point("longrun", rate, n, runs, sum(done)))
                            print(f"p={rate:g} N={n}: " + _row(points[-2:]), flush=True)
                    rate = rates[len(rates) // 2]
                    killer = asyncio.create_task(
                        _kill_now_and_then(worker, kill_every, random.Random(seed))
                    )
                    try:
                        for n in steps:
                            flaky.reset(rate, f"{seed}:kills:{rate}:{n}")
                            done = await asyncio.gather(
                                *(longrun_run(client, queue, url, n) for _ in range(runs))
                            )
                            points.append(Point("longrun, worker killed", rate, n, runs, sum(done)))
                            print(f"p={rate:g} N={n}: " + _row(points[-1:]), flush=True)
                    finally:
                        killer.cancel()
            finally:
                await worker.stop()
    return points, worker.kills


def _row(points: list[Point]) -> str:
    return ", ".join(f"{p.side} {p.completed}/{p.runs}" for p in points)


def report(points: list[Point], kills: int) -> None:
    """Print one line per side and rate: the completed share at each length."""
    lengths = sorted({p.steps for p in points})
    print(f"share of runs completed, by steps per run ({kills} worker kills in the last series)")
    print(f"{'side':<24} {'p':>5} " + " ".join(f"{f'N={n}':>7}" for n in lengths))
    for side, rate in dict.fromkeys((p.side, p.rate) for p in points):
        shares = {p.steps: p.share for p in points if (p.side, p.rate) == (side, rate)}
        cells = " ".join(f"{shares[n]:>7.0%}" if n in shares else f"{'':>7}" for n in lengths)
        print(f"{side:<24} {rate:>5.0%} {cells}")
    for rate in sorted({p.rate for p in points}):
        expected = " ".join(f"{(1 - rate) ** n:>7.0%}" for n in lengths)
        print(f"{'(1 - p) ** N':<24} {rate:>5.0%} {expected}")


def plot(points: list[Point], kills: int, path: Path) -> None:
    """Draw the curves: longrun solid, the plain loop dashed, (1 - p) ** N dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    rates = sorted({p.rate for p in points})
    colours = dict(zip(rates, ("tab:blue", "tab:orange", "tab:red", "tab:green"), strict=False))
    lengths = sorted({p.steps for p in points})
    for side, rate in dict.fromkeys((p.side, p.rate) for p in points):
        mine = sorted(
            (p for p in points if (p.side, p.rate) == (side, rate)), key=lambda p: p.steps
        )
        style = {"longrun": "-o", "plain loop": "--s"}.get(side, "-^")
        colour = "black" if "killed" in side else colours[rate]
        label = f"{side}, p = {rate:.0%}" + (f" ({kills} kills)" if "killed" in side else "")
        ax.plot(
            [p.steps for p in mine], [p.share * 100 for p in mine], style, color=colour, label=label
        )
    for rate in rates:
        ax.plot(
            lengths, [(1 - rate) ** n * 100 for n in lengths], ":", color=colours[rate], alpha=0.6
        )
    ax.set_xlabel("steps per run (one call each)")
    ax.set_ylabel("runs completed (%)")
    ax.set_ylim(-3, 103)
    ax.set_title("Runs completed when each call fails at rate p (dotted: (1 - p)^N)")
    ax.annotate(
        "longrun: every run completed, at every rate and with the worker killed",
        xy=(lengths[-1], 100),
        xytext=(lengths[0], 92),
        fontsize=8,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def figures(points: list[Point]) -> list[Figure]:
    """The suite's figures: the share completed at the longest runs, by fault rate (and with
    worker kills), against the plain loop at the same rate and length."""
    longest = max(p.steps for p in points)
    plain = {p.rate: p for p in points if p.side == "plain loop" and p.steps == longest}
    return [
        Figure(
            "under faults",
            f"runs of {longest} steps completed, {p.side}, calls failing at {p.rate:.0%}",
            "%",
            p.share * 100,
            plain[p.rate].share * 100,
            baseline_name="plain loop",
        )
        for p in points
        if p.side != "plain loop" and p.steps == longest and p.rate in plain
    ]


def as_json(points: list[Point], kills: int) -> dict[str, Any]:
    """The figures as bench/results.json keeps them."""
    return {"points": [asdict(p) | {"share": p.share} for p in points], "worker_kills": kills}


def main() -> None:
    """Parse the arguments, measure, print, and plot if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", default="10,50,100,200", help="run lengths, comma-separated")
    parser.add_argument("--rates", default="0.01,0.05,0.10", help="fault rates, comma-separated")
    parser.add_argument("--runs", type=int, default=10, help="runs per point and side")
    parser.add_argument("--kill-every", type=float, default=15.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, help="where to draw the curves (PNG)")
    parser.add_argument("--json", type=Path, help="where to write the figures")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    points, kills = asyncio.run(measure(steps, rates, args.runs, args.kill_every, args.seed))
    report(points, kills)
    if args.json:
        args.json.write_text(json.dumps(as_json(points, kills), indent=2) + "\n")
    if args.plot:
        plot(points, kills, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
