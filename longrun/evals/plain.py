"""The plain tool loop that `longrun eval --baseline plain` runs beside longrun: what people
write when they run an agent without durability. One conversation; the task's tools offered;
each call the model asks for run at once in this process; a call written as text read as
longrun reads it and put back into the conversation as a native call; done when the model
answers without a call, or when it stops itself (the same call three times in a row, 20
calls): such a loop knows no failure but a broken server or an exhausted budget, so it ends
`completed` and what it did is scored. No plan, no verification, no retries but the openai
package's own, no history that outlives the process.

It gets what longrun gets, so the two are scored alike: the same model and server, longrun's
own tool functions, the task's budget (model calls, time), the scorer's answer to a call that
needs approval (irreversible ones, as longrun's default policy asks), and the same checker,
fed a record shaped like the API's view of a run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import APIError, AsyncOpenAI

from activities.routed_calls import text_calls
from activities.structured import tool_parameters
from activities.tools.bound import call_redacted
from activities.tools.registry import ToolContext
from longrun.catalogue import CATALOGUE
from longrun.settings import Settings

SYSTEM = (
    "You are a helpful assistant with tools. Use them to do the user's task. "
    "When the task is done, answer briefly without calling a tool."
)
MAX_CALLS = 20  # tool calls in one run
SAME_CALLS = 3  # the same call this many times in a row ends the run
MAX_TOKENS = 512
RESULT_CHARS = 4000  # of a tool result told to the model


@dataclass
class Loop:
    """One run of the loop on a goal."""

    run_id: str
    goal: str
    tools: list[str]
    budget: dict[str, Any]
    decide: str  # what a person answers a call that needs approval
    model: str
    workspace: Path
    settings: Settings
    status: str = "running"
    error: str | None = None
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    approvals: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why the loop stopped itself, if it did

    async def run(self, client: AsyncOpenAI) -> dict[str, Any]:
        """Work on the goal until the model answers without a call or a limit stops it;
        the run as the checker reads one."""
        started = time.monotonic()
        offered = [_schema(name) for name in self.tools if name in CATALOGUE]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": self.goal},
        ]
        last: list[str] = []
        while self.status == "running":
            stop = self._over(started)
            if stop:
                self._end("failed", stop)
                break
            if self.tool_calls >= MAX_CALLS:
                self.stopped = f"{MAX_CALLS} tool calls made"
                self._end("completed", None)
                break
            try:
                answer = await client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    tools=offered,  # type: ignore[arg-type]
                    max_tokens=MAX_TOKENS,
                    timeout=self._time_left(started),
                )
            except APIError as exc:
                self._end("failed", f"the model server failed: {exc}"[:500])
                break
            self.model_calls += 1
            if answer.usage is not None:
                self.input_tokens += answer.usage.prompt_tokens
                self.output_tokens += answer.usage.completion_tokens
            message = answer.choices[0].message
            calls = [
                (c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or []
                if c.type == "function"
            ]
            said = message.content or ""
            if not calls and said:
                written = text_calls(said, offered, self.model_calls)
                calls = [(c.id, c.name, c.arguments) for c in written]
                if calls:  # back into the conversation as native calls, not as text
                    said = ""
            if not calls:
                self._end("completed", None)
                break
            messages.append(
                {
                    "role": "assistant",
                    # Not null: llama.cpp's server refuses an assistant turn without content.
                    "content": said,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in calls
                    ],
                }
            )
            for call_id, name, arguments in calls:
                last = [*last, f"{name} {arguments}"][-SAME_CALLS:]
                reply = await self._call(name, arguments)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": reply})
            if len(last) == SAME_CALLS and len(set(last)) == 1:
                self.stopped = f"the same call {SAME_CALLS} times in a row: {last[0]}"[:500]
                self._end("completed", None)
        return self.record(time.monotonic() - started)

    def _over(self, started: float) -> str | None:
        limit = self.budget.get("max_model_calls")
        if limit is not None and self.model_calls >= limit:
            return f"budget exhausted: {self.model_calls} model calls"
        left = self._time_left(started)
        if left is not None and left <= 0:
            return "budget exhausted: out of time"
        return None

    def _time_left(self, started: float) -> float | None:
        limit = self.budget.get("max_duration_s")
        return None if limit is None else limit - (time.monotonic() - started)

    def _end(self, status: str, error: str | None) -> None:
        self.status, self.error = status, error

    async def _call(self, name: str, arguments: str) -> str:
        """Run one call; what the model is told."""
        spec = CATALOGUE.get(name)
        if spec is None or name not in self.tools:
            return f"Unknown tool {name}. Tools: {', '.join(self.tools)}."
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"Invalid JSON arguments: {exc}"
        if not isinstance(args, dict):
            return "Invalid arguments: not an object"
        problems = spec.args_errors(args)
        if problems:
            return "Invalid arguments: " + "; ".join(msg for _, msg in problems)
        self.tool_calls += 1
        if spec.side_effect_for(args) == "irreversible":
            self.approvals.append({"tool": name, "decision": self.decide})
            if self.decide != "approve":
                return "A person rejected this call."
        ctx = ToolContext(
            run_id=self.run_id,
            step_id=f"t{self.tool_calls}",
            idempotency_key=f"{self.run_id}:t{self.tool_calls}",
            workspace=self.workspace,
            settings=self.settings,
        )
        try:
            output = await call_redacted(spec, spec.args_model.model_validate(args), ctx)
        except Exception as exc:  # the loop tells the model, as such loops do
            return f"The tool failed: {exc}"[:RESULT_CHARS]
        return json.dumps(output)[:RESULT_CHARS]

    def record(self, took_s: float) -> dict[str, Any]:
        """The run as the API shows one, as far as the checker reads it."""
        limits = {"model_calls": ("max_model_calls", self.model_calls)}
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "stopped": self.stopped,
            "steps": [],
            "approvals": self.approvals,
            "pending_approvals": [],
            "budget": {
                "limits": {
                    name: {"limit": self.budget.get(key), "used": used}
                    for name, (key, used) in limits.items()
                }
            },
            "usage": {
                "model_calls": self.model_calls,
                "tool_calls": self.tool_calls,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cost_usd": 0.0,
            },
            "duration_s": round(took_s, 1),
        }


def _schema(name: str) -> dict[str, Any]:
    spec = CATALOGUE[name]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": spec.description,
            # As longrun offers them: without the limits grammar engines refuse.
            "parameters": tool_parameters(spec.parameters()),
        },
    }
