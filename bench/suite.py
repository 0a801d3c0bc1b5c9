"""Every benchmark in one go: one table of longrun against its baselines, and the figures
kept in bench/results.json.

Each section starts its own headless Temporal dev server and measures longrun beside a
baseline in the same run: bare Temporal (a workflow defined in the benchmark doing the same
work with the same timeouts), or a plain loop making the same calls without Temporal. Every
figure is a ratio against that baseline; nothing passes or fails on time. Sections print
their own detail as they go; one that breaks is reported and the others still run.

- per step: overhead of sequential no-op steps (wall, worker time) and throughput
  (bench/overhead.py);
- API: submit, live, ended short and long runs, first read after a worker restart
  (bench/status.py);
- load: the API under many concurrent clients submitting, reading and deciding, against
  the same calls to Temporal (bench/load.py);
- watchers: many SSE clients on live runs through one API process, against plain SSE
  (bench/watchers.py);
- waiting runs: worker memory, CPU and first workflow task of runs waiting for a person,
  their resumption after a worker is killed, and listing them (bench/memory.py);
- context: prompt size over a long agent job (bench/context_growth.py);
- sandbox: a confined `shell` call and step against an unconfined one (bench/sandbox.py);
- billing: history events and Temporal Cloud actions per plan step and per agent step and
  turn, and dollars per 1,000 steps (bench/billing.py, bench/agent_billing.py);
- quick steps: short read-only steps as local activities against bare activities
  (bench/quick.py);
- under faults: agent runs completed when calls fail (bench/agent_faults.py), and completion
  against run length at three fault rates and with worker kills (bench/fault_curve.py), drawn
  to docs/fault-curve.png by the full suite.

    .venv/bin/python bench/suite.py [--quick | --smoke] [--only overhead,api,...] [--json PATH]

`make bench` runs the full suite (about an hour on 2 cores, most of it the plain loop's
1,000-step conversation and the ten thousand waiting runs); `make bench QUICK=1` the
quick one (a few minutes, smaller numbers everywhere, no plot unless `--plot` is given).
`--smoke` runs every section at its smallest size, for correctness only (its figures mean
nothing and are not kept), each in a process of its own, SMOKE_AT_ONCE at a time (they
mostly wait for servers to start): `make test` runs it, so a section that no longer does
its work fails the suite. A section that fails marks the table FAILED and the exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))

import agent_billing  # noqa: E402
import agent_faults  # noqa: E402
import billing  # noqa: E402
import context_growth  # noqa: E402
import fault_curve  # noqa: E402
import load  # noqa: E402
import memory  # noqa: E402
import overhead  # noqa: E402
import quick  # noqa: E402
import sandbox  # noqa: E402
import status  # noqa: E402
import watchers  # noqa: E402
from figures import Figure, table  # noqa: E402

from longrun.dev.revision import commit  # noqa: E402

PLOT = _HERE.parent / "docs" / "fault-curve.png"
RESULTS = _HERE / "results.json"

# Each section's size: (full, quick). --smoke takes SMOKE's.
SIZES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "overhead": (
        {"steps": 50, "runs": 5, "warmup": 1, "batch_runs": 50, "batch_rounds": 5},
        {"steps": 20, "runs": 3, "warmup": 1, "batch_runs": 20, "batch_rounds": 3},
    ),
    "api": ({"steps": 500, "reads": 30, "restarts": 3}, {"steps": 200, "reads": 15, "restarts": 2}),
    "load": (
        {"clients": 200, "seconds": 45.0, "warmup": 5.0, "reads": 3},
        {"clients": 50, "seconds": 15.0, "warmup": 3.0, "reads": 3},
    ),
    "watchers": (
        {"watchers": 1000, "runs": 100, "window_s": 20.0, "clients": 2},
        {"watchers": 100, "runs": 10, "window_s": 10.0, "clients": 1},
    ),
    "memory": (
        {"runs": 10000, "warmup": 5, "lists": 200},
        {"runs": 500, "warmup": 5, "lists": 100},
    ),
    "context": ({"steps": 1000, "run_timeout": 1800.0}, {"steps": 100, "run_timeout": 600.0}),
    "faults": (
        {"runs": 10, "rates": [0.05, 0.10], "steps": 10, "tools_per_step": 5},
        {"runs": 4, "rates": [0.10], "steps": 5, "tools_per_step": 3},
    ),
    "sandbox": ({"calls": 40, "rounds": 5, "steps": 20}, {"calls": 20, "rounds": 3, "steps": 10}),
    "billing": (
        {"step_counts": [4, 20, 100], "agent_steps": [2, 8]},
        {"step_counts": [4, 20], "agent_steps": [1, 3]},
    ),
    "quick": ({"steps": 20, "runs": 10, "warmup": 2}, {"steps": 20, "runs": 5, "warmup": 1}),
    "curve": (
        {"steps": [10, 50, 100, 200], "rates": [0.01, 0.05, 0.10], "runs": 10, "kill_every": 15.0},
        {"steps": [10, 50, 100], "rates": [0.01, 0.05, 0.10], "runs": 4, "kill_every": 10.0},
    ),
}


# The smallest size at which each section still does all of its work.
SMOKE: dict[str, dict[str, Any]] = {
    "overhead": {"steps": 3, "runs": 1, "warmup": 1, "batch_runs": 3, "batch_rounds": 1},
    "api": {"steps": 5, "reads": 2, "restarts": 1},
    "load": {"clients": 4, "seconds": 3.0, "warmup": 0.5, "reads": 1},
    "watchers": {"watchers": 4, "runs": 2, "window_s": 2.0, "clients": 1},
    "memory": {"runs": 10, "warmup": 2, "lists": 5},
    "context": {"steps": 5, "run_timeout": 120.0},
    "faults": {"runs": 1, "rates": [0.10], "steps": 2, "tools_per_step": 2},
    "sandbox": {"calls": 2, "rounds": 1, "steps": 2},
    "billing": {"step_counts": [2], "agent_steps": [1]},
    "quick": {"steps": 3, "runs": 1, "warmup": 1},
    "curve": {"steps": [3], "rates": [0.10], "runs": 2, "kill_every": 5.0},
}


def _overhead(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(overhead.measure(**size))
    overhead.report(result)
    return overhead.figures(result)


def _api(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(status.measure(**size))
    status.report(result)
    return status.figures(result)


def _load(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(load.measure(**size))
    load.report(result)
    return load.figures(result)


def _watchers(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(watchers.measure(**size))
    watchers.report(result)
    return watchers.figures(result)


def _memory(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    costs = asyncio.run(memory.measure(**size))
    memory.report(costs, size["runs"])
    return memory.figures(costs, size["runs"])


def _context(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    growth = asyncio.run(context_growth.measure(**size))
    context_growth.report(growth)
    return context_growth.figures(growth)


def _faults(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    args = argparse.Namespace(seed=0, run_timeout=300.0, **size)
    results, took = asyncio.run(agent_faults.measure(args, size["rates"]))
    agent_faults.report(results, size["rates"], args, took)
    return agent_faults.figures(results, size["rates"], args)


def _sandbox(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(sandbox.measure_all(**size))
    sandbox.report(result)
    return sandbox.figures(result)


def _billing(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(billing.measure(size["step_counts"]))
    billing.report(result)
    agents = asyncio.run(agent_billing.measure(size["agent_steps"]))
    agent_billing.report(agents)
    return billing.figures(result) + agent_billing.figures(agents)


def _quick(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    result = asyncio.run(quick.measure(**size))
    quick.report(result)
    return quick.figures(result)


def _curve(size: dict[str, Any], out: dict[str, Any]) -> list[Figure]:
    points, kills = asyncio.run(fault_curve.measure(seed=0, **size))
    fault_curve.report(points, kills)
    out["fault_curve"] = fault_curve.as_json(points, kills)
    if out.get("plot"):
        fault_curve.plot(points, kills, Path(out["plot"]))
        print(f"plot: {out['plot']}")
    return fault_curve.figures(points)


SECTIONS: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[Figure]]] = {
    "overhead": _overhead,
    "api": _api,
    "load": _load,
    "watchers": _watchers,
    "memory": _memory,
    "context": _context,
    "faults": _faults,
    "sandbox": _sandbox,
    "billing": _billing,
    "quick": _quick,
    "curve": _curve,
}


def run(
    sections: list[str],
    quick: bool,
    plot: Path | None,
    results: Path | None,
    partial: bool = False,
    smoke: bool = False,
) -> bool:
    """Run the sections, print their detail and then the one table, and keep the figures
    (`partial`: beside those of the sections not run, as `results` has them; none kept
    without `results`). True if every section did its work."""
    out: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "commit": commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "plot": str(plot) if plot else None,
        "seconds": {},
        "failed": [],
    }
    figures: list[Figure] = []
    for name in sections:
        size = SMOKE[name] if smoke else SIZES[name][1 if quick else 0]
        print(f"\n=== {name} {json.dumps(size)}", flush=True)
        started = time.perf_counter()
        try:
            found = SECTIONS[name](size, out)
            unmeasured = [f.name for f in found if not f.measured()]
            if not found or unmeasured:
                raise RuntimeError(f"a side measured nothing: {unmeasured or 'no figure'}")
            figures += found
        except Exception:
            traceback.print_exc()
            print(f"section {name} FAILED; see above")
            out["failed"].append(name)
        out["seconds"][name] = round(time.perf_counter() - started, 1)
        print(f"=== {name} took {out['seconds'][name]:g} s", flush=True)
    kind = "smoke" if smoke else "quick" if quick else "full"
    print(f"\n=== longrun against its baselines ({kind} suite)\n")
    print(table(figures))
    if out["failed"]:
        print(f"\nFAILED: sections that did not do their work: {', '.join(out['failed'])}")
    if results is None:
        return not out["failed"]
    out["figures"] = [f.as_json() for f in figures]
    kept = json.loads(results.read_text()) if partial and results.exists() else None
    if kept is not None and kept.get("quick") == quick:
        # The other sections' figures stay as last measured (by a suite of the same size).
        mine = {f.section for f in figures}
        out["figures"] = [f for f in kept["figures"] if f["section"] not in mine] + out["figures"]
        out["seconds"] = {**kept.get("seconds", {}), **out["seconds"]}
        for key, value in kept.items():  # e.g. the fault curve's points, notes
            out.setdefault(key, value)
    results.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nfigures kept in {results}")
    return not out["failed"]


# Smoke sections at once, each in its own process; the longest first.
SMOKE_AT_ONCE = 4
SMOKE_ORDER = ("memory", "watchers", "load", "sandbox", "curve", "billing", "api", "context")


def smoke(sections: list[str]) -> bool:
    """Run each section's smoke in a process of its own, SMOKE_AT_ONCE at a time; print
    each one's output as it ends. True if every one did its work."""
    argv = [sys.executable, __file__, "--smoke", "--only"]
    ordered = sorted(sections, key=lambda s: SMOKE_ORDER.index(s) if s in SMOKE_ORDER else 99)
    started = time.perf_counter()

    def one(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return name, subprocess.run([*argv, name], capture_output=True, text=True, check=False)

    failed = []
    with ThreadPoolExecutor(SMOKE_AT_ONCE) as pool:
        for name, done in pool.map(one, ordered):
            print(done.stdout + done.stderr, flush=True)
            if done.returncode != 0:
                failed.append(name)
    took = time.perf_counter() - started
    print(f"\n=== smoke suite: {len(sections)} sections in {took:.0f} s")
    if failed:
        print(f"FAILED: sections that did not do their work: {', '.join(failed)}")
    return not failed


def main() -> None:
    """Parse the arguments and run the suite; exits 1 if a section did not do its work."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="smaller numbers: a few minutes")
    sizes.add_argument(
        "--smoke", action="store_true", help="every section at its smallest, figures not kept"
    )
    parser.add_argument("--only", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    parser.add_argument("--plot", type=Path, help=f"where to draw the fault curve ({PLOT})")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to keep the figures")
    args = parser.parse_args()
    sections = list(SECTIONS) if not args.only else args.only.split(",")
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    plot = args.plot or (None if args.quick or args.smoke else PLOT)
    # Retried attempts are logged as warnings by the workers; the tables say it all.
    for name in ("temporalio", "longrun.activity"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if args.smoke and len(sections) > 1:
        sys.exit(0 if smoke(sections) else 1)
    results = None if args.smoke else args.json
    if not run(sections, args.quick, plot, results, partial=bool(args.only), smoke=args.smoke):
        sys.exit(1)


if __name__ == "__main__":
    main()
