"""The words longrun says to models: planner, actor and judge. Pure text building, so the
workflow may use it too."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from longrun.contracts import CompactRequest, PlanRequest

PLANNER = (
    "You plan work for an autonomous agent. Break the goal into a short sequence of concrete "
    "steps that the available tools can carry out. For each step give an id (lowercase "
    "letters, digits, - or _), the intent, and the expected evidence: what will be observable "
    "once the step is done (a file and its content, a command's output). Answer with JSON "
    'only: {"steps": [{"id": ..., "intent": ..., "expected_evidence": ...}]}.'
)

ACTOR = (
    "You are an agent carrying out one step of a plan with tools. Call tools to do the work; "
    "look at their results. When the step is done, answer with a short summary of what you "
    "did and the evidence, without calling a tool. When the whole goal is met and every "
    "acceptance criterion holds, call `finish` with a summary; it is checked, so do not call "
    "it early."
)

# How a routed actor call asks for its one action (activities/routed_calls.py).
ROUTED_ACTION = (
    "Answer with one action as JSON only: "
    '{"tool": <one of the tools>, "arguments": {...}} to call a tool, or '
    '{"tool": "done", "summary": "..."} when the step is done.'
)

JUDGE = (
    "You verify claims about work an agent did. Decide from the evidence only whether the "
    "statement holds. Answer with JSON only: "
    '{"quote": "...", "passed": true|false, "reason": "..."}. quote: copy, word for word, '
    "the tool result or file content that shows the statement holds (the agent's own "
    "words show nothing); empty if none does, and then it does not hold. The reason must "
    "cite the evidence."
)

# The heading under which a step's verification lists what its tools returned.
TOOL_RESULTS = "Tool results:"

COMPACTOR = (
    "You keep the progress summary of a long-running agent job. Merge the finished steps "
    "you are given into the current summary. Keep facts later steps may need (names, "
    "paths, values, decisions, open problems); drop routine detail. Answer with the new "
    "summary only, in plain text, within the length you are given."
)

FINISH_TOOL = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Claim that the goal is met; every acceptance criterion is then checked.",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
}


DELEGATE_TOOL = {
    "type": "function",
    "function": {
        "name": "delegate",
        "description": "Hand a self-contained sub-goal to a new agent, which works on it with "
        "the same tools and within what is left of the budget; you get its result.",
        "parameters": {
            "type": "object",
            "properties": {
                "goal": {"type": "string", "description": "the sub-goal, complete in itself"},
                "acceptance": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "statements a judge must confirm before it counts as done",
                },
            },
            "required": ["goal"],
        },
    },
}


def bullet(items: list[str]) -> str:
    """Items as a bulleted list, or '(none)'."""
    return "\n".join(f"- {item}" for item in items) if items else "(none)"


def plan_request(req: PlanRequest) -> str:
    """The planner's user message."""
    parts = [
        f"Goal: {req.goal}",
        f"Acceptance criteria:\n{bullet(req.criteria)}",
        f"Tools: {', '.join(req.tools) or '(none)'}",
    ]
    if req.max_steps is not None:
        parts.append(f"Plan at most {req.max_steps} steps.")
    if req.context:
        parts.append(f"Progress so far, and why the plan must change:\n{req.context}")
    if req.previous_error:
        parts.append(
            f"Your previous answer was not a valid plan: {req.previous_error}\n"
            "Answer again with valid JSON."
        )
    return "\n\n".join(parts)


def reask(problem: str) -> str:
    """What a model is told when its last answer was not the JSON asked for."""
    return (
        f"Your previous answer was not valid: {problem}\n"
        "Answer again with JSON only, matching the schema."
    )


def judge_request(goal: str, statement: str, evidence: str) -> str:
    """The judge's user message."""
    return f"Goal: {goal}\n\nStatement: {statement}\n\nEvidence:\n{evidence or '(no evidence)'}"


def compact_request(req: CompactRequest) -> str:
    """The compactor's user message."""
    return (
        f"Goal: {req.goal}\n\nCurrent summary:\n{req.summary or '(none yet)'}\n\n"
        f"Finished steps to merge in, oldest first:\n{bullet(req.entries)}\n\n"
        f"Answer with the new summary, at most {req.max_chars} characters."
    )
