"""Context assembly: the actor's prompt, built from a brief and kept under a token budget.

A prompt is made of, in this order: the system prompt, the goal and acceptance criteria,
the plan around the current step, the rolling summary of older progress, the last few
finished steps, the journal notes most relevant to this step, the step itself (with
guidance and feedback), then this step's own turns. When the estimate passes the budget,
parts are trimmed in a fixed order, least needed first:

1. journal notes, least relevant first;
2. this step's older tool results (all but the latest two), cut to a preview;
3. finished steps, oldest first;
4. the rolling summary, from its start (its newest part stays);
5. the plan, down to the current step and its neighbours.

The system prompt, goal, criteria, the step, guidance, feedback and the latest tool
results are never trimmed. Pure functions: `model.act` calls them with what it read from
the journal and the artifact store.
"""

from __future__ import annotations

import json
import math
from typing import Any

from longrun import prompts
from longrun.contracts import Brief

# Tokenizers differ by model and some download their tables at run time; an estimate
# that over-counts English (about 4 bytes a token) also holds for code and JSON. The
# provider's own count of every call is recorded in its usage.
BYTES_PER_TOKEN = 3
TOOL_PREVIEW_CHARS = 300
FULL_TOOL_RESULTS = 2
PLAN_NEIGHBOURS = 1


def estimate_tokens(text: str) -> int:
    """A conservative token count of `text`."""
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)


def _size(messages: list[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        total += estimate_tokens(str(message.get("content") or "")) + 4
        if message.get("tool_calls"):
            total += estimate_tokens(json.dumps(message["tool_calls"]))
    return total


def _user_message(
    brief: Brief, plan: list[str], summary: str, progress: list[str], notes: list[str]
) -> str:
    # What is empty, or the goal again, is left out: a small model reads every line.
    parts = [f"Goal: {brief.goal}"]
    if brief.criteria:
        parts.append(f"Acceptance criteria:\n{prompts.bullet(brief.criteria)}")
    if len(plan) > 1:
        parts.append(f"Plan:\n{prompts.bullet(plan)}")
    if summary:
        parts.append(f"Progress summary:\n{summary}")
    if progress:
        parts.append(f"Recently finished steps:\n{prompts.bullet(progress)}")
    if notes:
        parts.append(f"Notes from the journal that may matter here:\n{prompts.bullet(notes)}")
    if brief.step:
        parts.append(f"Your step now: {brief.step}")
    if brief.guidance:
        parts.append("Guidance:\n" + prompts.bullet(brief.guidance))
    if brief.feedback:
        parts.append(brief.feedback)
    return "\n\n".join(parts)


def _preview(message: dict[str, Any]) -> dict[str, Any]:
    content = str(message.get("content") or "")
    if len(content) <= TOOL_PREVIEW_CHARS:
        return message
    cut = f"{content[:TOOL_PREVIEW_CHARS]}… [older result cut: {len(content)} characters]"
    return {**message, "content": cut}


def bounded_turns(turns: list[dict[str, Any]], max_bytes: int) -> None:
    """Cut the oldest tool results of `turns` to previews, in place, until their contents
    take at most `max_bytes` (the model would see them cut anyway: `assemble` keeps only
    the latest results whole)."""
    sizes = [len(str(m.get("content") or "").encode()) for m in turns]
    total = sum(sizes)
    for i, message in enumerate(turns):
        if total <= max_bytes:
            return
        if message.get("role") == "tool":
            turns[i] = _preview(message)
            total -= sizes[i] - len(str(turns[i].get("content") or "").encode())


def assemble(
    brief: Brief,
    notes: list[str],
    turns: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages of one actor call, and what was trimmed to fit the budget (which the
    tools' schemas, sent with every call, count against too)."""
    plan, summary, progress, notes = list(brief.plan), brief.summary, list(brief.progress), notes
    turns = list(turns)
    trimmed: list[str] = []
    fixed = estimate_tokens(json.dumps(tools)) if tools else 0

    def build() -> list[dict[str, Any]]:
        user = _user_message(brief, plan, summary, progress, notes)
        return [
            {"role": "system", "content": prompts.ACTOR},
            {"role": "user", "content": user},
            *turns,
        ]

    def over() -> int:
        return fixed + _size(build()) - brief.token_budget

    tool_turns = [i for i, m in enumerate(turns) if m.get("role") == "tool"]
    while notes and over() > 0:
        notes = notes[:-1]
        trimmed.append("note")
    for i in tool_turns[:-FULL_TOOL_RESULTS]:
        if over() <= 0:
            break
        cut = _preview(turns[i])
        if cut is not turns[i]:
            turns[i] = cut
            trimmed.append("tool result")
    while progress and over() > 0:
        progress = progress[1:]
        trimmed.append("finished step")
    if summary and over() > 0:
        trimmed.append("summary")
        ellipsis = len("…".encode())
        while summary and over() > 0:  # cut bytes from the start; the newest part stays
            data = summary.encode()
            rest = data[over() * BYTES_PER_TOKEN + ellipsis :].decode(errors="ignore")
            summary = "…" + rest if rest else ""
    if over() > 0 and len(plan) > 2 * PLAN_NEIGHBOURS + 1:
        at = next((i for i, line in enumerate(plan) if line.startswith("[running]")), 0)
        plan = plan[max(0, at - PLAN_NEIGHBOURS) : at + PLAN_NEIGHBOURS + 1]
        trimmed.append("plan")
    return build(), trimmed
