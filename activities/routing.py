"""Tool calls routed by longrun, for models that call tools badly on their own ("auto" tool
choice): the model answers one structured action, `{"tool": ..., "arguments": ...}` or
`{"tool": "done", "summary": ...}`, asked for the way the server takes structured output
(a forced tool or a JSON object, see activities/structured), and longrun turns it into the
tool call. What counts as calling badly is decided here; the endpoint remembers it per
model, as it remembers how a server takes JSON.

Pure functions: `activities/model.py` makes the calls.
"""

from __future__ import annotations

import json
from typing import Any

from longrun import prompts
from longrun.contracts import ToolCallRequest

DONE = "done"  # the action that ends the step with a summary and no tool call
ROUTED_ID = "routed"


def action_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The schema of one action among `tools` (OpenAI tool definitions)."""
    names = [t["function"]["name"] for t in tools if "function" in t]
    return {
        "type": "object",
        "properties": {
            "tool": {"type": "string", "enum": [*names, DONE]},
            "arguments": {"type": "object"},
            "summary": {"type": "string"},
        },
        "required": ["tool"],
    }


def routed_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The conversation for a routed call: earlier tool calls and results as plain turns
    (a server asked without `tools` may not take tool messages), the tools described, and
    the instruction."""
    described = "\n".join(
        f"- {t['function']['name']}: {t['function'].get('description', '')} "
        f"arguments: {json.dumps(t['function'].get('parameters', {}))}"
        for t in tools
        if "function" in t
    )
    plain: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = [
                {"tool": c["function"]["name"], "arguments": _loaded(c["function"]["arguments"])}
                for c in message["tool_calls"]
            ]
            plain.append(
                {"role": "assistant", "content": json.dumps(calls[0] if len(calls) == 1 else calls)}
            )
        elif role == "tool":
            plain.append({"role": "user", "content": f"Tool result: {message.get('content')}"})
        else:
            plain.append(message)
    plain.append({"role": "user", "content": f"Tools:\n{described}\n\n{prompts.ROUTED_ACTION}"})
    return plain


def routed_answer(value: Any, turn: int) -> tuple[str | None, list[ToolCallRequest]]:
    """The model's action as the actor's answer: a summary, or one tool call."""
    if not isinstance(value, dict):
        return json.dumps(value), []
    tool = value.get("tool")
    if tool == DONE or not isinstance(tool, str) or not tool:
        summary = value.get("summary")
        return (summary if isinstance(summary, str) else json.dumps(value)), []
    arguments = value.get("arguments")
    return None, [
        ToolCallRequest(
            id=f"{ROUTED_ID}_{turn}",
            name=tool,
            arguments=json.dumps(arguments if isinstance(arguments, dict) else {}),
        )
    ]


def calls_badly(
    content: str | None, calls: list[ToolCallRequest], tools: list[dict[str, Any]]
) -> str | None:
    """Why an answer to "auto" tool choice shows the model cannot call tools that way (a
    call written as text), or None. A call to a tool it was not offered is not that: the
    run refuses it and tells the model why (a policy at work, or a page that tricked it),
    and the watchdog counts such answers."""
    offered = {t["function"]["name"] for t in tools if "function" in t}
    if not calls and content:
        written = _loaded(content.strip().removeprefix("```json").strip("`").strip())
        if isinstance(written, dict) and (
            written.get("name") in offered or written.get("tool") in offered
        ):
            return "it wrote a tool call as text"
    return None


def _loaded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
