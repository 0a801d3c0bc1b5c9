"""Context assembly: the actor's prompt fits its token budget, trimmed in the stated order."""

from __future__ import annotations

from typing import Any

from longrun.context import assemble, bounded_turns, estimate_tokens
from longrun.contracts import Brief


def brief(**changes: Any) -> Brief:
    base: dict[str, Any] = {
        "goal": "ship the report",
        "criteria": ["report.md exists"],
        "plan": [f"[completed] s{i}: chore {i}" for i in range(5)]
        + ["[running] s5: write the report"]
        + [f"[pending] s{i}: chore {i}" for i in range(6, 11)],
        "summary": "early steps gathered the data. " * 20,
        "progress": [f"s{i}: did chore {i}" for i in range(5)],
        "step": "s5: write the report\nExpected evidence: report.md",
        "feedback": "Verification of this step failed: report.md is empty",
        "token_budget": 100_000,
    }
    return Brief(**{**base, **changes})


NOTES = [f"[fact, s{i}] fact number {i}" for i in range(5)]
TURNS: list[dict[str, Any]] = [
    {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "x" * 3000}
    for i in range(4)
]


def size(messages: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(str(m.get("content") or "")) + 4 for m in messages)


def test_a_prompt_within_budget_is_not_trimmed() -> None:
    messages, trimmed = assemble(brief(), NOTES, TURNS)
    assert trimmed == []
    user = messages[1]["content"]
    for part in ("ship the report", "fact number 4", "did chore 0", "early steps", "chore 10"):
        assert part in user
    assert messages[2:] == TURNS


def test_trimming_follows_the_stated_order_and_keeps_what_must_stay() -> None:
    full, _ = assemble(brief(), NOTES, TURNS)
    budgets = range(size(full), 300, -150)
    last_order: list[str] = []
    for budget in budgets:
        messages, trimmed = assemble(brief(token_budget=budget), NOTES, TURNS)
        order = list(dict.fromkeys(trimmed))
        expected = ["note", "tool result", "finished step", "summary", "plan"]
        assert order == expected[: len(order)], (budget, order)
        user = messages[1]["content"]
        # Never trimmed: the goal, the criteria, the step, the feedback, the latest results.
        for part in ("ship the report", "report.md exists", "s5: write the report", "is empty"):
            assert part in user
        assert messages[-2:] == TURNS[-2:]
        if size(messages) > budget:  # only what may not be trimmed is left
            assert order == expected
        last_order = order
    assert last_order == ["note", "tool result", "finished step", "summary", "plan"]


def test_notes_go_least_relevant_first() -> None:
    full, _ = assemble(brief(), NOTES, [])
    messages, trimmed = assemble(brief(token_budget=size(full) - 5), NOTES, [])
    assert trimmed == ["note"]
    assert "fact number 0" in messages[1]["content"]
    assert "fact number 4" not in messages[1]["content"]


def test_a_cut_summary_fits_the_budget_and_keeps_its_newest_part() -> None:
    summary = "é" * 3000 + " the newest fact"
    full, _ = assemble(brief(summary=summary, progress=[]), [], [])
    for excess in (1, 7, 39, 500):
        budget = size(full) - excess
        messages, trimmed = assemble(
            brief(summary=summary, progress=[], token_budget=budget), [], []
        )
        assert trimmed == ["summary"]
        assert budget - 3 <= size(messages) <= budget  # fits, and not cut far more than needed
        assert "the newest fact" in messages[1]["content"]


def test_the_tool_schemas_count_against_the_budget() -> None:
    tools = [{"type": "function", "function": {"name": "t", "description": "d" * 3000}}]
    full, _ = assemble(brief(), NOTES, [])
    _, trimmed = assemble(brief(token_budget=size(full) + 10), NOTES, [], tools)
    assert trimmed[0] == "note"
    _, trimmed = assemble(brief(token_budget=size(full) + 10), NOTES, [])
    assert trimmed == []


def test_a_turn_of_many_big_tool_results_is_bounded_oldest_first() -> None:
    turns: list[dict[str, Any]] = [{"role": "user", "content": "u" * 1000}]
    for i in range(20):  # twenty 32 KB results: 640 KB, more than one call should carry
        turns.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}:" + "r" * 32_000})
    bounded_turns(turns, 256 * 1024)
    sizes = [len(m["content"].encode()) for m in turns]
    assert sum(sizes) <= 256 * 1024
    assert turns[0]["content"] == "u" * 1000  # only tool results are cut
    assert turns[-1]["content"].startswith("19:") and sizes[-1] > 32_000  # the newest stay
    assert "older result cut" in turns[1]["content"]
    assert [m["tool_call_id"] for m in turns[1:]] == [f"c{i}" for i in range(20)]
