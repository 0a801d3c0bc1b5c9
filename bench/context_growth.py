"""Prompt size over a long agent job: longrun against a naive loop that appends every message.

Both sides do the same job against the OpenAI-compatible stand-in: N steps, each one tool
call (`echo` of a 1 KB value) and one short answer.

- longrun: a goal-only run through the real API app and an in-process worker on a headless
  Temporal dev server, with default settings: each step's prompt is assembled from a brief
  (the plan around the step, a rolling summary kept by `context.compact`, the last finished
  steps, the journal's relevant notes) within the per-call token budget, and the run
  continues as new every 500 steps.
- naive: one conversation that grows: each step's instruction, the model's tool call, the
  tool result and the answer are appended, and every call sends all of it.

Printed: the prompt tokens of each step's first actor call at steps 10, 100, 500 and N
(the stand-in's count, about four characters a token, over the messages' text; both sides
also send the same tool schemas, not counted), and each side's last figure over its first.
The script prints and always exits 0: nothing here is a pass/fail.

    .venv/bin/python bench/context_growth.py [--steps 1000] [--run-timeout 1800]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

# `python bench/context_growth.py` puts bench/ on sys.path, not the repo root.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from figures import Figure  # noqa: E402

from api.app import create_app as create_api  # noqa: E402
from longrun import prompts  # noqa: E402
from longrun.catalogue import CATALOGUE  # noqa: E402
from longrun.dev.stack import ServerThread, TemporalDevServer, free_port  # noqa: E402
from longrun.dev.standin import STANDIN_MODEL, Rule, StandIn  # noqa: E402
from longrun.dev.standin import create_app as create_standin  # noqa: E402
from longrun.settings import Settings  # noqa: E402
from longrun.temporal import connect  # noqa: E402
from worker import serving  # noqa: E402
from workflows.agent import tool_schema  # noqa: E402

VALUE = "x" * 1000  # what each step's tool call echoes
GOAL = "Work through the chores of the plan, one tool call each"


def checkpoints(steps: int) -> list[int]:
    """The steps whose prompts are reported."""
    return sorted({k for k in (10, 100, 500, steps) if k <= steps})


def step_id(k: int) -> str:
    return f"s{k:04}"


def intent(k: int) -> str:
    return f"Chore number {k}"


def step_now(k: int) -> str:
    """How the actor's prompt names step k: by its intent (ids are never shown)."""
    return f"step now: {intent(k)}\n"


def tool_rule(marker: str, k: int) -> Rule:
    """Step k's first actor turn calls echo; its second turn falls to the default answer."""
    return Rule.model_validate(
        {
            "match": [marker, step_now(k)],
            "role": "act",
            "times": 1,
            "tool_calls": [{"name": "echo", "arguments": {"value": VALUE}}],
        }
    )


async def longrun_side(standin: StandIn, standin_url: str, steps: int, timeout_s: float) -> Any:
    """Run the job on longrun; the prompt tokens at each checkpoint, and facts of the run."""
    marker = f"ctx-{uuid.uuid4().hex[:8]}"
    plan = [
        {"id": step_id(k), "intent": intent(k), "expected_evidence": "echoed"}
        for k in range(1, steps + 1)
    ]
    standin.reset()
    standin.rules.append(
        Rule.model_validate({"match": marker, "role": "plan", "json": {"steps": plan}})
    )
    standin.rules.extend(tool_rule(marker, k) for k in range(1, steps + 1))
    with tempfile.TemporaryDirectory(prefix="longrun-context-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-context-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL=f"{standin_url}/v1",
                OPENAI_API_KEY="x",
                LONGRUN_MODEL=STANDIN_MODEL,
            )
            client = await connect(settings)
            transport = httpx.ASGITransport(app=create_api(settings))
            async with (
                serving(client, settings),
                httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
            ):
                t0 = time.perf_counter()
                response = await api.post(
                    "/v1/runs",
                    json={
                        "goal": f"{marker}: {GOAL}",
                        "strategy": "plan",  # the scripted plan, though the goal is short
                        "tools": ["echo"],
                        "max_steps": 3 * steps,
                    },
                )
                response.raise_for_status()
                run_id = response.json()["run_id"]
                run: dict[str, Any] = {}
                while time.perf_counter() - t0 < timeout_s:
                    await asyncio.sleep(2)
                    run = (await api.get(f"/v1/runs/{run_id}")).json()
                    if run["status"] not in ("running", "waiting_approval", "paused"):
                        break
                duration = time.perf_counter() - t0
                count = await client.count_workflows(f"WorkflowId = '{run_id}'")
    first: dict[int, int] = {}
    for call in standin.calls:
        if call.role != "act" or len(call.messages) < 2:
            continue
        text = str(call.messages[1].get("content") or "")
        for k in checkpoints(steps):
            if k not in first and step_now(k) in text:
                first[k] = call.prompt_tokens
    return first, run.get("status"), duration, count.count, run.get("error")


async def naive_side(standin: StandIn, standin_url: str, steps: int) -> dict[int, int]:
    """Run the job as one growing conversation; the prompt tokens at each checkpoint."""
    marker = f"naive-{uuid.uuid4().hex[:8]}"
    oai = AsyncOpenAI(base_url=f"{standin_url}/v1", api_key="x", max_retries=0)
    tools = [tool_schema(CATALOGUE["echo"])]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompts.ACTOR},
        {"role": "user", "content": f"Goal: {marker}: {GOAL}"},
    ]
    first: dict[int, int] = {}
    try:
        for k in range(1, steps + 1):
            # Forget earlier calls: the stand-in would otherwise keep every growing prompt.
            standin.reset()
            standin.rules.append(tool_rule(marker, k))
            said = f"Your {step_now(k)}Expected evidence: echoed"  # as longrun's brief says it
            messages.append({"role": "user", "content": said})
            asked = await oai.chat.completions.create(
                model=STANDIN_MODEL,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
            if k in checkpoints(steps) and asked.usage is not None:
                first[k] = asked.usage.prompt_tokens
            call = (asked.choices[0].message.tool_calls or [])[0]
            assert call.type == "function"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                    ],
                }
            )
            result = {"value": json.loads(call.function.arguments)["value"]}
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
            answer = await oai.chat.completions.create(
                model=STANDIN_MODEL,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    finally:
        await oai.close()
    return first


@dataclass
class Growth:
    """Prompt tokens of each side's checkpoint steps, and how the longrun run ended."""

    steps: int
    longrun: dict[int, int]
    naive: dict[int, int]
    status: str | None
    duration_s: float
    segments: int
    error: str | None


async def measure(steps: int, run_timeout: float) -> Growth:
    """Run both sides against one stand-in."""
    standin_app = create_standin()
    standin: StandIn = standin_app.state.standin
    with ServerThread(standin_app) as standin_server:
        ours, status, duration, segments, error = await longrun_side(
            standin, standin_server.url, steps, run_timeout
        )
        naive = await naive_side(standin, standin_server.url, steps)
    return Growth(steps, ours, naive, status, duration, segments, error)


def report(g: Growth) -> None:
    """Print the table."""
    print(f"{g.steps} steps, each one echo call of {len(VALUE)} bytes and one answer")
    print(
        f"longrun run: {g.status} in {g.duration_s:.0f} s, {g.segments} history segments"
        + (f", error: {g.error}" if g.error else "")
    )
    print("\nprompt tokens of the step's first actor call")
    print(f"{'step':>6} {'longrun':>10} {'naive':>10}")
    for k in checkpoints(g.steps):
        print(f"{k:>6} {g.longrun.get(k, '-'):>10} {g.naive.get(k, '-'):>10}")
    ks = checkpoints(g.steps)
    for name, side in (("longrun", g.longrun), ("naive", g.naive)):
        if ks[0] in side and ks[-1] in side:
            print(f"{name}: step {ks[-1]} / step {ks[0]} = {side[ks[-1]] / side[ks[0]]:.2f}")


def figures(g: Growth) -> list[Figure]:
    """The suite's figures of this benchmark (none if a side missed a checkpoint)."""
    ks = checkpoints(g.steps)
    first, last = ks[0], ks[-1]
    if not all(k in side for k in (first, last) for side in (g.longrun, g.naive)):
        return []
    return [
        Figure(
            "context",
            f"prompt tokens at step {last}",
            "tokens",
            g.longrun[last],
            g.naive[last],
            baseline_name="loop appending all",
        ),
        Figure(
            "context",
            f"prompt growth, step {last} over step {first}",
            "x",
            g.longrun[last] / g.longrun[first],
            g.naive[last] / g.naive[first],
            baseline_name="loop appending all",
        ),
    ]


def main() -> None:
    """Parse the arguments and run the benchmark; always exits 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=1000, help="steps of the job (N)")
    parser.add_argument(
        "--run-timeout", type=float, default=1800.0, help="seconds before the longrun run is cut"
    )
    args = parser.parse_args()
    if not 10 <= args.steps <= 1000:
        parser.error("--steps must be in 10..1000 (the planner's limit)")
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    try:
        report(asyncio.run(measure(args.steps, args.run_timeout)))
    except Exception:
        traceback.print_exc()
        print("benchmark aborted; see the traceback above")


if __name__ == "__main__":
    main()
