"""What the agent loop tells models, as text: criteria, tool schemas, the plan around a
step, a step's brief, and the turns a step's conversation resends."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

from workflows.common import preview

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: pure prompt text, pydantic models, and the toolbox (read for
    # argument schemas only).
    from longrun.catalogue import AnyTool
    from longrun.contracts import (
        ActResult,
        AgentPlan,
        Brief,
        Criterion,
        Expect,
        PlanItem,
        ToolCallRequest,
        ToolCheck,
    )

MAX_ARGUMENT_CHARS = 200_000
ECHOED_ARGUMENT_CHARS = 2000  # of a tool call's arguments, in the step's later turns
NOTES_KEPT = 10
PLAN_WINDOW = 5  # plan steps shown on each side of the current one


def describe_criterion(criterion: Criterion, *, prose: bool = False) -> str:
    """A criterion as a person (or a model) reads it: a tool check in words with `prose`
    (`criteria-in-prose`), else as JSON, which a small model copies: it
    wrote `{"contains": "2"}` into the file the check reads."""
    check = criterion.check
    if not isinstance(check, ToolCheck):
        return f"{criterion.id}: {check.judge}"
    if not prose:
        expect = check.expect.model_dump(exclude_none=True)
        return f"{criterion.id}: {check.tool} {preview(check.args)} must give {preview(expect)}"
    call = " and ".join(f"{k} {_spoken(v)}" for k, v in check.args.items())
    return (
        f"{criterion.id}: at the end, {check.tool} is called"
        + (f" with {call}" if call else "")
        + f", and {' and '.join(_expected(check.expect))}"
    )


def _spoken(value: Any) -> str:
    """An argument as words: a command's argv as its command line."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return f"`{' '.join(value)}`"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _expected(expect: Expect) -> list[str]:
    said = []
    if expect.exit_code is not None:
        said.append(f"it must exit with code {expect.exit_code}")
    if expect.contains is not None:
        said.append(f'its output must contain "{expect.contains}"')
    if expect.regex is not None:
        said.append(f"its output must match the regular expression {expect.regex}")
    if expect.json_path is not None:
        said.append(f"{expect.json_path} in its result must be {json.dumps(expect.equals)}")
    if expect.file_exists is not None:
        said.append(f"the file {expect.file_exists} must exist")
    return said


def function_name(tool: str) -> str:
    """The name a model calls a tool by: OpenAI's function names allow letters, digits, `_`
    and `-` only, so `mcp.time.now` is offered as `mcp__time__now`."""
    return tool.replace(".", "__")


def tool_schema(spec: AnyTool) -> dict[str, Any]:
    """The OpenAI `tools` entry for a tool."""
    return {
        "type": "function",
        "function": {
            "name": function_name(spec.name),
            "description": spec.description,
            "parameters": spec.parameters(),
        },
    }


def plan_window(plan: list[PlanItem], item: PlanItem) -> list[str]:
    """The plan around the current step; the rest is counted, so the brief stays the same
    size however long the plan."""
    at = plan.index(item) if item in plan else 0
    start, end = max(0, at - PLAN_WINDOW), at + PLAN_WINDOW + 1
    # Intents only: a model reads a step id such as `compute_sum` as a tool to call.
    lines = [f"[{p.status}] {p.intent}" for p in plan[start:end]]
    if start:
        done = sum(1 for p in plan[:start] if p.status == "completed")
        lines.insert(0, f"... {start} earlier steps ({done} completed)")
    if end < len(plan):
        lines.append(f"... {len(plan) - end} more steps")
    return lines


def step_text(item: PlanItem) -> str:
    """The step as the actor is told it: what to do and what shows it done, no id."""
    return f"{item.intent}\nExpected evidence: {item.expected_evidence}"


def _is_the_goal(plan: list[PlanItem]) -> bool:
    """Whether the plan's one step is the whole goal: the brief then says only the goal. A
    one-step plan is the goal said again, and a small model says it worse ("Read file" for
    "write hello into hello.txt"); a run without a plan has the goal as its step."""
    return len(plan) == 1


def brief(
    goal: str,
    criteria: list[Criterion],
    plan: list[PlanItem],
    summary: str,
    notes: list[str],
    item: PlanItem,
    feedback: str | None,
    token_budget: int,
    *,
    prose: bool = False,
) -> Brief:
    """What `model.act` assembles a step's prompt from."""
    return Brief(
        goal=goal,
        criteria=[describe_criterion(c, prose=prose) for c in criteria],
        plan=plan_window(plan, item),
        summary=summary,
        progress=notes,
        step="" if _is_the_goal(plan) else step_text(item),
        guidance=item.guidance,
        feedback=feedback,
        recall=f"{item.intent} {item.expected_evidence}",
        token_budget=token_budget,
    )


def assistant_message(result: ActResult) -> dict[str, Any]:
    """The model's turn as the step's later turns resend it. Long tool arguments (a file's
    content) are cut to a preview there: they ran already, and resending them on every
    turn would grow the step's history with the square of its turns."""
    message: dict[str, Any] = {"role": "assistant", "content": result.content}
    if result.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _echoed(c.arguments)},
            }
            for c in result.tool_calls
        ]
    return message


def _echoed(arguments: str) -> str:
    if len(arguments) <= ECHOED_ARGUMENT_CHARS:
        return arguments
    cut = {"cut": f"{len(arguments)} characters", "start": arguments[:ECHOED_ARGUMENT_CHARS]}
    return json.dumps(cut)


def finish_summary(call: ToolCallRequest) -> str:
    """The summary a `finish` call gives (its raw arguments when they are not JSON)."""
    try:
        args = json.loads(call.arguments[:MAX_ARGUMENT_CHARS] or "{}")
    except (ValueError, RecursionError):
        return call.arguments[:1000]
    summary = args.get("summary") if isinstance(args, dict) else None
    return str(summary or call.arguments)[:1000]


def duplicate_ids(plan: AgentPlan | None) -> str | None:
    """What is wrong with a plan whose step ids repeat, or None."""
    if plan is None:
        return None
    ids = [s.id for s in plan.steps]
    return None if len(set(ids)) == len(ids) else "step ids must be unique"


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments of the shape a tool's JSON schema asks for, its required ones with a
    placeholder of their type: what a model that sent the schema itself, or lacked a field,
    is shown."""
    properties = schema.get("properties") or {}
    example: dict[str, Any] = {}
    for name in schema.get("required") or list(properties)[:2]:
        kind = (properties.get(name) or {}).get("type")
        example[name] = _placeholder(kind)
    return example


def _placeholder(kind: Any) -> Any:
    """A value of a JSON schema type."""
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "..."
