"""What an agent step costs in history events and billable actions: a goal-only longrun run
against the same agent loop written as a bare workflow.

Starts one headless Temporal dev server, the OpenAI-compatible stand-in, and in this process
longrun's worker, its API (over ASGI) and a bare worker. For N in the given step counts:

- longrun: a goal-only run through `POST /v1/runs` with the `note` tool (an activity task;
  read-only tools such as `read_file` would run as local activities, see bench/quick.py).
  The stand-in plans N steps; each step's first actor turn calls `note`, its second answers,
  and the step's evidence is checked (`verify.step`); the run's acceptance is checked at the
  end;
- bare: `bench.BareAgent`, the same work as a bare agent loop: one planning model activity,
  then per step a model activity (the tool call), the tool activity, a model activity (the
  answer) and one that checks the step's evidence, and a last model activity that checks
  the job's acceptance. Its checks are model calls as longrun's are, their answers unread.

Each side's history is counted as bench/billing.py counts it (Temporal Cloud's actions).
Printed: events and actions per agent step and per turn (model call), what each step added
costs between the smallest and the largest N (the fixed cost of a run left out), and what a
longrun step does that the bare loop does not (by event type).

    .venv/bin/python bench/agent_billing.py [--steps 2,8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: no I/O at import; the bare workflow reads only constants.
    import httpx
    from billing import Tally, tally
    from figures import Figure
    from overhead import TOOL_RETRY

    from api.app import create_app as create_api
    from longrun.dev.stack import ServerThread, TemporalDevServer, free_port
    from longrun.dev.standin import STANDIN_MODEL, Rule
    from longrun.dev.standin import create_app as create_standin
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving
    from workflows.common import MODEL_TIMEOUT, TOOL_HEARTBEAT_TIMEOUT, TOOL_TIMEOUT

GOAL = "Keep a note of each chore of the plan"
RUN_TIMEOUT_S = 300.0


@activity.defn(name="bench.model")
async def model(turn: str) -> str:
    """A model call of the bare loop (answered at once)."""
    return turn


@activity.defn(name="bench.tool")
async def tool(step: int) -> int:
    """A tool call of the bare loop."""
    return step


@workflow.defn(name="bench.BareAgent")
class BareAgent:
    """A plan, then per step: the model's tool call, the tool, the model's answer, the
    step's check; then the job's check."""

    @workflow.run
    async def run(self, steps: int) -> int:
        """Plan `steps` steps and carry each out."""
        await self._model("plan")
        for i in range(steps):
            await self._model(f"act {i}")
            await workflow.execute_activity(
                tool,
                i,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=TOOL_RETRY,
            )
            await self._model(f"answer {i}")
            await self._model(f"verify {i}")
        await self._model("accept")
        return steps

    async def _model(self, turn: str) -> None:
        await workflow.execute_activity(
            model, turn, start_to_close_timeout=MODEL_TIMEOUT, retry_policy=TOOL_RETRY
        )


@dataclass
class AgentBilling:
    """Per N: the model calls of longrun's run, and each side's tally."""

    cases: dict[int, tuple[int, Tally, Tally]]  # steps: (longrun model calls, longrun, bare)


def _rules(marker: str, steps: int) -> list[Rule]:
    """The stand-in's answers: a plan of `steps` steps, a `note` call as each one's first
    actor turn (its second falls to the default answer)."""
    plan = [
        {"id": f"s{k}", "intent": f"Chore number {k}", "expected_evidence": "noted"}
        for k in range(1, steps + 1)
    ]
    rules = [Rule.model_validate({"match": marker, "role": "plan", "json": {"steps": plan}})]
    for k in range(1, steps + 1):
        call = {"name": "note", "arguments": {"text": f"chore {k} is done"}}
        rules.append(
            Rule.model_validate(
                {
                    # A step is named by its intent; a plan of one step is the goal itself.
                    "match": [marker, f"step now: Chore number {k}\n"] if steps > 1 else marker,
                    "role": "act",
                    "times": 1,
                    "tool_calls": [call],
                }
            )
        )
    return rules


async def _longrun(api: httpx.AsyncClient, client: Client, standin: Any, steps: int) -> Tally:
    marker = f"bill-{uuid.uuid4().hex[:8]}"
    standin.rules.extend(_rules(marker, steps))
    response = await api.post(
        "/v1/runs",
        json={
            "goal": f"{marker}: {GOAL}",
            "strategy": "plan",  # the scripted plan, though the goal is short
            "tools": ["note"],
            "max_steps": 3 * steps,
        },
    )
    response.raise_for_status()
    run_id = response.json()["run_id"]
    await asyncio.wait_for(client.get_workflow_handle(run_id).result(), RUN_TIMEOUT_S)
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    if run["status"] != "completed":
        raise RuntimeError(f"the agent run ended {run['status']}: {run.get('error')}")
    return await tally(client, run_id)


async def _bare(client: Client, queue: str, steps: int) -> Tally:
    workflow_id = f"bench-agent-{uuid.uuid4().hex}"
    await client.execute_workflow(BareAgent.run, steps, id=workflow_id, task_queue=queue)
    return await tally(client, workflow_id)


async def measure(step_counts: list[int]) -> AgentBilling:
    """Run one agent job of each size on both sides and count their histories."""
    result = AgentBilling({})
    standin_app = create_standin()
    standin = standin_app.state.standin
    with ServerThread(standin_app) as standin_server, tempfile.TemporaryDirectory() as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-agent-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL=f"{standin_server.url}/v1",
                OPENAI_API_KEY="x",
                LONGRUN_MODEL=STANDIN_MODEL,
            )
            bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
            client = await connect(settings)
            transport = httpx.ASGITransport(app=create_api(settings))
            async with (
                serving(client, settings),
                Worker(
                    client, task_queue=bare_queue, workflows=[BareAgent], activities=[model, tool]
                ),
                httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
            ):
                for steps in step_counts:
                    before = len(standin.calls)
                    mine = await _longrun(api, client, standin, steps)
                    calls = len(standin.calls) - before
                    bare = await _bare(client, bare_queue, steps)
                    result.cases[steps] = (calls, mine, bare)
    return result


def _bare_calls(steps: int) -> int:
    # The plan; per step a tool call, an answer and a check; the acceptance check.
    return 2 + 3 * steps


def report(result: AgentBilling) -> None:
    """Print each size's events and actions, per step and per model call."""
    print(f"{'agent steps':<12} {'model calls l/b':>16} {'events l/b':>12} {'actions l/b':>12}")
    for steps, (calls, mine, bare) in result.cases.items():
        print(
            f"{steps:<12} {calls:>7}/{_bare_calls(steps):<8} {mine.events:>5}/{bare.events:<6} "
            f"{mine.actions:>5}/{bare.actions:<6}"
        )
        extra = mine.by_type - bare.by_type
        if extra:
            print("    longrun's extra events: " + ", ".join(f"{k} {v}" for k, v in extra.items()))


def figures(result: AgentBilling) -> list[Figure]:
    """Events and actions each agent step adds, and per model call, between the smallest
    and largest job."""
    low, high = min(result.cases), max(result.cases)
    if high == low:
        return []
    (low_calls, low_mine, low_bare), (high_calls, high_mine, high_bare) = (
        result.cases[low],
        result.cases[high],
    )
    added = high - low
    out: list[Figure] = []
    for what in ("events", "actions"):
        mine = getattr(high_mine, what) - getattr(low_mine, what)
        bare = getattr(high_bare, what) - getattr(low_bare, what)
        out.append(
            Figure(
                "billing",
                f"{what} each agent step adds ({low} to {high} steps)",
                what,
                mine / added,
                bare / added,
                baseline_name="bare agent loop",
                target="<= 1.2",
            )
        )
        out.append(
            Figure(
                "billing",
                f"{what} per model call (turn), same",
                what,
                mine / (high_calls - low_calls),
                bare / (_bare_calls(high) - _bare_calls(low)),
                baseline_name="bare agent loop",
            )
        )
    return out


def main() -> None:
    """Parse the arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", default="2,8", help="agent steps per job, comma-separated")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.steps.split(",")]
    except ValueError:
        parser.error("--steps takes whole numbers, e.g. 2,8")
    if any(n < 1 for n in counts):
        parser.error("--steps must be >= 1")
    result = asyncio.run(measure(counts))
    report(result)
    print(*(f"{f.name}: {f.longrun:.2f} vs {f.baseline:.2f}" for f in figures(result)), sep="\n")


if __name__ == "__main__":
    main()
