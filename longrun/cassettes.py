"""Cassettes: a run's model calls as its model server answered them, to be played back by
the stand-in so a test covers a real model's behaviour without the server.

A worker with `LONGRUN_RECORD_MODEL_CALLS` keeps each model activity's exchanges (the
request as sent, the answer as received) as an artifact of the run and names it in the
activity's result (`recorded`); `longrun cassette RUN_ID` collects them from the run's
history. The stand-in answers a request by the digest of its normalized form: what was
asked (messages, tools offered, the answer's shape), not how (model name, `max_tokens`,
streaming). A request the cassette lacks is an error naming the nearest recorded one, so a
changed prompt fails loudly instead of drifting.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

CASSETTE_VERSION = 1
SHOWN_CHARS = 120  # of the texts where a request differs from the nearest recorded one


class Exchange(BaseModel):
    """One model call as sent and as answered."""

    request: dict[str, Any]
    response: dict[str, Any]  # content, tool_calls [{id, name, arguments}], finish_reason, usage


class Entry(BaseModel):
    """A recorded exchange, keyed by its request's digest."""

    key: str
    activity: str = Field(description="the model activity that made the call")
    request: dict[str, Any] = Field(description="the normalized request")
    response: dict[str, Any]


class ToolCall(BaseModel):
    """A tool call the run made, and what it gave."""

    activity_id: str
    tool: str
    args: Any
    output: Any = None
    error: str | None = None


class Cassette(BaseModel):
    """A run's model calls (and tool calls), in the order it made them."""

    version: int = CASSETTE_VERSION
    run_id: str
    model: str | None = None
    profile: str = Field("openai", description="the stand-in profile of the recorded server")
    entries: list[Entry]
    tools: list[ToolCall] = Field(default_factory=list)


def normalized(request: dict[str, Any]) -> dict[str, Any]:
    """What a request asks, whatever model, limits or streaming it asks it with."""
    messages = []
    for message in request.get("messages") or []:
        shown: dict[str, Any] = {
            "role": message.get("role"),
            "content": _text(message.get("content")),
        }
        calls = message.get("tool_calls") or []
        if calls:
            shown["tool_calls"] = [
                [c.get("function", {}).get("name"), c.get("function", {}).get("arguments")]
                for c in calls
            ]
        messages.append(shown)
    tools = sorted(str((t.get("function") or {}).get("name")) for t in request.get("tools") or [])
    fmt = request.get("response_format")
    choice = request.get("tool_choice")
    return {
        "messages": messages,
        "tools": tools,
        "format": fmt.get("type") if isinstance(fmt, dict) else None,
        "tool_choice": choice if isinstance(choice, (str, dict)) else None,
    }


def key_of(request: dict[str, Any]) -> str:
    """The digest a request is found by."""
    canonical = json.dumps(normalized(request), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def entry_of(exchange: Exchange, activity: str) -> Entry:
    """A recorded exchange as a cassette keeps it."""
    return Entry(
        key=key_of(exchange.request),
        activity=activity,
        request=normalized(exchange.request),
        response=exchange.response,
    )


def nearest(request: dict[str, Any], entries: list[Entry]) -> str:
    """Which recorded request is most like `request`, and where they first differ."""
    if not entries:
        return "the cassette records no calls"
    asked = normalized(request)
    flat = json.dumps(asked, sort_keys=True)
    scores = [
        difflib.SequenceMatcher(None, flat, json.dumps(e.request, sort_keys=True)).quick_ratio()
        for e in entries
    ]
    best = max(range(len(entries)), key=scores.__getitem__)
    entry = entries[best]
    return f"nearest recorded: entry {best} ({entry.activity}), {_difference(asked, entry.request)}"


def _difference(asked: dict[str, Any], recorded: dict[str, Any]) -> str:
    for field in ("tools", "format", "tool_choice"):
        if asked[field] != recorded[field]:
            return f"{field} differ: asked {asked[field]!r}, recorded {recorded[field]!r}"
    mine, theirs = asked["messages"], recorded["messages"]
    for n, (a, r) in enumerate(zip(mine, theirs, strict=False)):
        if a != r:
            at = next(
                (
                    i
                    for i, (x, y) in enumerate(zip(a["content"], r["content"], strict=False))
                    if x != y
                ),
                min(len(a["content"]), len(r["content"])),
            )
            start = max(0, at - 20)
            return (
                f"message {n} ({a['role']}) differs at character {at}: asked "
                f"{a['content'][start : start + SHOWN_CHARS]!r}, recorded "
                f"{r['content'][start : start + SHOWN_CHARS]!r}"
            )
    return f"asked {len(mine)} messages, recorded {len(theirs)}"


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
