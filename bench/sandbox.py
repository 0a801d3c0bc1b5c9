"""What confining a process tool costs, against the same tool unconfined, alternating rounds
in one run:

- per call: the `tool.shell` activity alone running a trivial command (`true`) and a short
  Python one, inside bubblewrap (LONGRUN_SANDBOX=bwrap) and unconfined;
- per step: plans of sequential `shell` steps running `true`, through a Temporal dev server
  and a worker of each kind (what a run pays per step: its workflow and activity tasks too);
- per call and per step, the sandbox as it was at commit BEFORE (no per-step memory cgroup,
  no sized /tmp, no workspace quota): that commit's own bench/sandbox.py, from a git
  worktree, in the same run, after this one (its own Temporal server and worker).

    .venv/bin/python bench/sandbox.py [--calls 40] [--rounds 5] [--steps 20] [--before REV]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))

import httpx  # noqa: E402
from figures import Figure  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from activities.tools.bound import build_tool_activities  # noqa: E402
from api.app import create_app  # noqa: E402
from longrun.contracts import ToolCall  # noqa: E402
from longrun.dev.stack import TemporalDevServer, free_port  # noqa: E402
from longrun.settings import Settings  # noqa: E402
from longrun.temporal import connect, ensure_search_attributes  # noqa: E402
from worker import serving  # noqa: E402

COMMANDS = {"true": ["true"], "python -c pass": [sys.executable, "-c", "pass"]}
# The last commit whose sandbox bounded a step's processes one by one only (a pids cgroup,
# no memory cgroup, an unsized /tmp, no workspace quota).
BEFORE = "8593b49"


def _shell(settings: Settings) -> Callable[..., Any]:
    for fn in build_tool_activities(settings):
        if activity._Definition.must_from_callable(fn).name == "tool.shell":
            return fn
    raise RuntimeError("no tool.shell")


async def _per_call_ms(shell: Callable[..., Any], argv: list[str], calls: int) -> float:
    """The median wall time of one call, in ms."""
    env = ActivityEnvironment()
    run_id = f"run-{uuid.uuid4().hex}"
    took = []
    for n in range(calls):
        call = ToolCall(run_id=run_id, step_id=f"s{n}", idempotency_key="k", args={"argv": argv})
        started = time.perf_counter()
        await env.run(shell, call)
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


async def _per_step_ms(client: Client, settings: Settings, steps: int) -> float:
    """The wall time per step of one plan of `steps` sequential `shell true` steps."""
    plan = [
        {
            "id": f"s{n}",
            "tool": "shell",
            "args": {"argv": ["true"]},
            "requires_approval": False,
            **({"depends_on": [f"s{n - 1}"]} if n else {}),
        }
        for n in range(steps)
    ]
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        started = time.perf_counter()
        created = await api.post("/v1/runs", json={"goal": "bench", "plan": {"steps": plan}})
        created.raise_for_status()
        await client.get_workflow_handle(created.json()["run_id"]).result()
        return (time.perf_counter() - started) * 1000 / steps


async def measure_steps(steps: int, rounds: int) -> dict[str, float]:
    """Median ms per `shell true` step of a plan, confined and not."""
    with tempfile.TemporaryDirectory(prefix="longrun-bench-sandbox-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            base = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            sides = {
                "bwrap": base.model_copy(update={"task_queue": "bench-bwrap"}),
                "unconfined": base.model_copy(
                    update={"task_queue": "bench-unconfined", "sandbox": "unconfined"}
                ),
            }
            client = await connect(base)
            await ensure_search_attributes(client)
            found: dict[str, list[float]] = {side: [] for side in sides}
            async with serving(client, sides["bwrap"]), serving(client, sides["unconfined"]):
                for n in range(rounds + 1):  # the first round warms up
                    order = list(sides) if n % 2 else list(reversed(sides))
                    for side in order:
                        took = await _per_step_ms(client, sides[side], steps)
                        if n:
                            found[side].append(took)
    return {side: statistics.median(values) for side, values in found.items()}


async def measure(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median per-call ms of each command, confined and not, over alternating rounds."""
    data = Path(tempfile.mkdtemp(prefix="longrun-bench-sandbox-"))
    base = Settings(_env_file=None, LONGRUN_DATA_DIR=data)
    shells = {
        "bwrap": _shell(base),
        "unconfined": _shell(base.model_copy(update={"sandbox": "unconfined"})),
    }
    found: dict[str, dict[str, list[float]]] = {c: {m: [] for m in shells} for c in COMMANDS}
    for _ in range(rounds):
        for name, argv in COMMANDS.items():
            for mode, shell in shells.items():
                found[name][mode].append(await _per_call_ms(shell, argv, calls))
    return {
        name: {mode: statistics.median(values) for mode, values in modes.items()}
        for name, modes in found.items()
    }


def report(result: dict[str, dict[str, float]]) -> None:
    """Print each measure's cost, confined and against its baseline."""
    for name, modes in result.items():
        if not modes:
            continue
        ratio = modes["bwrap"] / modes["unconfined"]
        against = "before" if "against the sandbox of" in name else "unconfined"
        print(
            f"{name}: {modes['bwrap']:.1f} ms confined, {modes['unconfined']:.1f} ms "
            f"{against} ({ratio:.2f}x)"
        )


def figures(result: dict[str, dict[str, float]]) -> list[Figure]:
    """The suite's figures of this benchmark."""
    return [
        Figure(
            "sandbox",
            name,
            "ms",
            modes["bwrap"],
            modes["unconfined"],
            baseline_name="the sandbox before"
            if "against the sandbox of" in name
            else "unconfined",
            target="<= 1.2" if name.startswith("per step: a plan") else "",
        )
        for name, modes in result.items()
    ]


def measure_before(rev: str, calls: int, steps: int, rounds: int) -> dict[str, dict[str, float]]:
    """The per-call and per-step measures, confined and not, by the code of commit `rev`
    (its own bench/sandbox.py in a worktree of its own, on this machine, now)."""
    repo = _HERE.parent
    with tempfile.TemporaryDirectory(prefix="longrun-bench-before-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            code = (
                "import asyncio, json, sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/bench']\n"
                "import sandbox\n"
                "calls, steps, rounds = map(int, sys.argv[2:5])\n"
                "found = {'calls': asyncio.run(sandbox.measure(calls, rounds)),\n"
                "         'steps': asyncio.run(sandbox.measure_steps(steps, rounds))}\n"
                "print(json.dumps(found))"
            )
            done = subprocess.run(
                [sys.executable, "-c", code, str(tree), str(calls), str(steps), str(rounds)],
                cwd=tree,
                check=True,
                capture_output=True,
                text=True,
            )
        finally:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    measured = {"steps": found["steps"], **found["calls"]}
    if not all(m.get("bwrap") and m.get("unconfined") for m in measured.values()):
        raise RuntimeError(f"commit {rev}'s sandbox bench measured nothing: {done.stdout}")
    return measured


async def measure_all(
    calls: int, rounds: int, steps: int, before: str | None = BEFORE
) -> dict[str, dict[str, float]]:
    """The measures, as the suite's figures name them."""
    calls_found = await measure(calls, rounds)
    steps_found = await measure_steps(steps, rounds)
    found = {
        **{f"per call: {name}": modes for name, modes in calls_found.items()},
        f"per step: a plan of {steps} shell true steps": steps_found,
    }
    if before:
        old = await asyncio.to_thread(measure_before, before, calls, steps, rounds)
        found[f"per step: the same, against the sandbox of {before}"] = {
            "bwrap": steps_found["bwrap"],
            "unconfined": old["steps"]["bwrap"],
        }
        found[f"per call: true, against the sandbox of {before}"] = {
            "bwrap": calls_found["true"]["bwrap"],
            "unconfined": old["true"]["bwrap"],
        }
        found[f"per step: the sandbox of {before}, against its unconfined step"] = old["steps"]
    return found


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--before", default=BEFORE, help="a commit to measure beside; '' for none")
    args = parser.parse_args()
    report(asyncio.run(measure_all(args.calls, args.rounds, args.steps, args.before or None)))


if __name__ == "__main__":
    main()
