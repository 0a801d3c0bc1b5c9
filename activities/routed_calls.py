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
import re
from typing import Any

from longrun import prompts
from longrun.contracts import ToolCallRequest

DONE = "done"  # the action that ends the step with a summary and no tool call
ROUTED_ID = "routed"


def offered_names(tools: list[dict[str, Any]]) -> list[str]:
    """The names of `tools` (OpenAI tool definitions), as offered."""
    return [t["function"]["name"] for t in tools if "function" in t]


def action_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The schema of one action among `tools` (OpenAI tool definitions)."""
    names = offered_names(tools)
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


def text_calls(content: str, tools: list[dict[str, Any]], turn: int) -> list[ToolCallRequest]:
    """The tool calls a model wrote as text, however it wrote them: Hermes `<tool_call>`
    tags (Qwen's, as llama.cpp and vLLM without a tool parser return them), a JSON object
    or a list of them, fenced or with prose around. An object is a call if it names an
    offered tool, or names any tool with its arguments (the run then refuses it and lists
    the tools it may call)."""
    offered = set(offered_names(tools))
    tagged = [m.group(1) for m in _TAGGED.finditer(content)]
    found: list[tuple[str, dict[str, Any]]] = []
    for chunk in tagged or [content]:
        for value in _json_values(chunk):
            for item in value if isinstance(value, list) else [value]:
                call = _as_call(item, offered)
                if call is not None:
                    found.append(call)
    return [
        ToolCallRequest(id=f"{TEXT_ID}_{turn}_{n}", name=name, arguments=json.dumps(args))
        for n, (name, args) in enumerate(found)
    ]


def named(calls: list[ToolCallRequest], tools: list[dict[str, Any]]) -> list[ToolCallRequest]:
    """`calls`, each that names an offered tool in another spelling named as offered:
    `WriteFileArgs` (the title of its arguments' schema), `WriteFile` or `write-file` is
    `write_file`. Any other name stays as it was, for the run to refuse."""
    offered = set(offered_names(tools))
    spelled: dict[str, list[str]] = {}
    for name in offered:
        spelled.setdefault(_spelling(name), []).append(name)
    renamed = []
    for call in calls:
        found = spelled.get(_spelling(call.name), [])
        if call.name not in offered and len(found) == 1:
            call = call.model_copy(update={"name": found[0]})
        renamed.append(call)
    return renamed


_SUFFIX = re.compile(r"(args|arguments|params|parameters|tool|function)$")


def _spelling(name: str) -> str:
    """A tool name without case, separators or a suffix naming its arguments."""
    letters = re.sub(r"[^a-z0-9]", "", name.lower())
    return _SUFFIX.sub("", letters) or letters


def calls_badly(
    content: str | None, calls: list[ToolCallRequest], tools: list[dict[str, Any]]
) -> str | None:
    """Why an answer to "auto" tool choice shows the model cannot call tools that way (it
    tried to write a call as text, and no call could be read from it), or None. A call to
    a tool it was not offered is not that: the run refuses it and tells the model why (a
    policy at work, or a page that tricked it), and the watchdog counts such answers."""
    if calls or not content:
        return None
    offered = set(offered_names(tools))
    tried = "<tool_call>" in content or any(
        f'"{name}"' in content and ('"name"' in content or '"tool"' in content) for name in offered
    )
    return "it wrote a tool call as text that could not be read" if tried else None


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
TEXT_ID = "text"


def _json_values(text: str) -> list[Any]:
    """Every JSON object or list standing in `text`, outermost only, left to right."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    at = 0
    while (start := _next_open(text, at)) >= 0:
        try:
            value, at = decoder.raw_decode(text, start)
        except ValueError:
            at = start + 1
            continue
        values.append(value)
    return values


def _next_open(text: str, at: int) -> int:
    found = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
    return min(found) if found else -1


def _as_call(item: Any, offered: set[str]) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) if `item` is written as a tool call, else None."""
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if isinstance(function, dict):  # OpenAI's own shape, written out
        item = function
    name = item.get("name", item.get("tool"))
    if not isinstance(name, str) or not name:
        return None
    keys = ("arguments", "parameters", "args")
    args = next((item[k] for k in keys if k in item), None)
    if isinstance(args, str):
        args = _loaded(args)
    if args is None and name in offered:
        args = {}
    if not isinstance(args, dict):
        return None
    return name, args


def _loaded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
