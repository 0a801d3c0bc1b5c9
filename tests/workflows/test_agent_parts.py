"""The agent loop's parts that make no Temporal calls, in plain pytest: its state, what a
hand-over carries of it, and the text it sends models."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from longrun import secrets
from longrun.contracts import (
    ActResult,
    AgentSpec,
    Criterion,
    ModelUsage,
    PlanItem,
    RunState,
    ToolCallRequest,
    Watchdog,
)
from workflows.agent import briefs
from workflows.agent.state import CARRIED_SUMMARY_CHARS, AgentState
from workflows.agent.watchdog import ProgressWatch


def _spec() -> AgentSpec:
    return AgentSpec(
        acceptance=[
            Criterion.model_validate(
                {
                    "id": "file",
                    "check": {
                        "tool": "read_file",
                        "args": {"path": "a"},
                        "expect": {"contains": "x"},
                    },
                }
            ),
            Criterion.model_validate({"id": "tone", "check": {"judge": "it reads well"}}),
        ],
        tools=["read_file"],
        planner_model="m",
        actor_model="m",
        judge_model="m",
    )


def _state(steps: int = 20, at: int = 12) -> tuple[AgentState, list[int]]:
    changes: list[int] = []
    state = AgentState(_spec(), lambda: changes.append(1))
    state.plan = [
        PlanItem(
            id=f"s{n}",
            intent="i" * 300,
            expected_evidence="evidence",
            status="completed" if n < at else "pending",
            summary="s" * 300 if n < at else None,
            verification="checked" if n < at else None,
        )
        for n in range(steps)
    ]
    state.index = at
    state.current = state.plan[min(at, steps - 1)]
    return state, changes


def test_a_new_state_knows_its_criteria_kinds() -> None:
    state, _ = _state()
    assert [(c.id, c.kind, c.status) for c in state.acceptance] == [
        ("file", "tool", "pending"),
        ("tone", "judge", "pending"),
    ]


def test_carry_keeps_far_behind_steps_short_and_restores_where_the_loop_stood() -> None:
    state, changes = _state()
    state.turns, state.tool_calls, state.replans = 30, 12, 1
    state.notes, state.summary, state.feedback = ["s11: done"], "older work", "try again"
    carry = state.carry()
    far, near = carry.plan[0], carry.plan[state.index - 1]
    assert len(far.intent) == CARRIED_SUMMARY_CHARS + 1 and far.verification is None
    assert far.expected_evidence == "" and far.summary is not None
    assert near.intent == "i" * 300 and near.verification == "checked"
    assert state.plan[0].intent == "i" * 300  # the loop's own plan is left whole

    restored = AgentState(_spec(), lambda: None)
    restored.restore(carry)
    assert (restored.index, restored.turns, restored.tool_calls) == (12, 30, 12)
    assert (restored.notes, restored.summary, restored.feedback) == (
        ["s11: done"],
        "older work",
        "try again",
    )
    assert restored.phase == "acting" and restored.current is restored.plan[12]
    state.enter("verifying")
    assert changes == [1]


def test_a_restored_loop_past_its_last_step_keeps_that_step_as_its_claim() -> None:
    state, _ = _state(steps=3, at=3)
    state.plan[2].summary = "all done"
    restored = AgentState(_spec(), lambda: None)
    restored.restore(state.carry())
    assert restored.result()["summary"] == "all done"


def test_status_and_progress_show_the_step_and_the_last_check() -> None:
    state, _ = _state(steps=3, at=1)
    state.last_check = "s0: passed"
    answer = RunState(run_id="r", goal="g")
    state.describe(answer)
    assert answer.phase == "planning" and len(answer.plan) == 3
    assert state.progress() == "planning, step 2 of 3 (s1)\nlast verification: s0: passed"


def test_closing_settles_open_steps() -> None:
    state, _ = _state(steps=3, at=1)
    state.plan[1].status = "running"
    state.close(failed=True)
    assert [p.status for p in state.plan] == ["completed", "failed", "cancelled"]


def test_the_brief_shows_the_plan_around_the_step_and_counts_the_rest() -> None:
    state, _ = _state(steps=30, at=15)
    window = briefs.plan_window(state.plan, state.plan[15])
    assert window[0] == "... 10 earlier steps (10 completed)"
    assert window[-1] == "... 9 more steps"
    assert len(window) == 2 + 2 * briefs.PLAN_WINDOW + 1
    brief = briefs.brief("g", _spec().acceptance, state.plan, "sum", [], state.plan[15], None, 9000)
    assert brief.criteria[1] == "tone: it reads well"
    # Intents, never ids: a model takes an id such as `compute_sum` for a tool to call.
    assert brief.step.startswith("i") and "s15" not in brief.step and brief.token_budget == 9000
    assert not any("s15" in line or "s14" in line for line in brief.plan)


def test_resent_turns_cut_long_arguments() -> None:
    long_args = json.dumps({"path": "a", "content": "x" * 10_000})
    result = ActResult(
        tool_calls=[ToolCallRequest(id="c1", name="write_file", arguments=long_args)],
        usage=ModelUsage(model="m"),
    )
    sent = briefs.assistant_message(result)["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent)["cut"] == f"{len(long_args)} characters"
    assert len(sent) < briefs.ECHOED_ARGUMENT_CHARS + 100


def test_finish_summaries_and_named_secrets() -> None:
    finish = ToolCallRequest(id="f", name="finish", arguments='{"summary": "done it"}')
    assert briefs.finish_summary(finish) == "done it"
    garbled = ToolCallRequest(id="f", name="finish", arguments="{not json")
    assert briefs.finish_summary(garbled) == "{not json"
    assert secrets.named({"headers": [{"secret": "TOKEN"}, {"secret": "TOKEN"}]}) == ["TOKEN"]
    assert secrets.named({"secret": "TOKEN", "other": 1}) == []


def test_the_watchdog_counts_repeats_invalid_answers_turns_and_phase_time() -> None:
    clock = [datetime(2026, 1, 1, tzinfo=UTC)]
    state, _ = _state()
    budget: list[float | None] = [None]
    watch = ProgressWatch(Watchdog(repeats=3), state, lambda: clock[0], lambda: budget[0])

    # The same output from different calls, three in a row.
    for path in ("a", "b"):
        watch.note_call("read_file", {"path": path}, "missing")
        assert watch.stall is None
    watch.note_call("read_file", {"path": "c"}, "missing")
    assert watch.stall is not None and watch.stall.evidence["kind"] == "repeated_output"
    watch.forgive()
    # A call repeated (arguments compared whatever their order) though outputs differ.
    for n in range(3):
        watch.note_call(
            "write_file",
            {"path": "x", "content": "y"} if n else {"content": "y", "path": "x"},
            str(n),
        )
    assert watch.stall is not None and watch.stall.evidence == {
        "kind": "repeated_call",
        "call": 'write_file {"content": "y", "path": "x"}',
        "times": 3,
    }
    watch.forgive()
    # A step started again forgets its calls; invalid answers count in a row only.
    watch.note_call("write_file", {"path": "x"}, "1")
    watch.new_step()
    watch.note_call("write_file", {"path": "x"}, "2")
    watch.note_invalid("no such tool")
    watch.note_invalid("bad arguments")
    watch.note_call("read_file", {"path": "z"}, "3")  # a valid call breaks the row
    watch.note_invalid("no such tool")
    watch.note_invalid("no such tool")
    assert watch.stall is None
    watch.note_invalid("no such tool")
    assert watch.stall is not None and watch.stall.evidence["kind"] == "invalid_answers"
    watch.forgive()

    # Turns without a verified step.
    state.turns += 29
    watch.note_turn()
    assert watch.stall is None
    state.turns += 1
    watch.note_turn()
    assert watch.stall is not None and watch.stall.evidence["kind"] == "no_progress"
    watch.progressed()
    watch.stall = None
    watch.note_turn()
    assert watch.stall is None

    # Time: planning may take half of a 100 s budget; acting, where the work is, any share.
    budget[0] = 100.0
    state.phase = "acting"
    clock[0] += timedelta(seconds=90)
    watch.note_time()
    assert watch.stall is None
    watch.leave("acting")
    state.phase = "planning"
    clock[0] += timedelta(seconds=40)
    watch.note_time()
    assert watch.stall is None
    clock[0] += timedelta(seconds=11)
    watch.note_time()
    assert watch.stall is not None and watch.stall.evidence == {
        "kind": "phase_over_budget",
        "phase": "planning",
        "seconds": 51,
    }
    assert watch.phase_seconds("acting") == 90
    watch.forgive()  # the phase gets its share again
    watch.note_time()
    assert watch.stall is None


def test_the_watchdog_coaches_once_before_it_holds_and_a_poll_is_no_loop() -> None:
    clock = [datetime(2026, 1, 1, tzinfo=UTC)]
    state, _ = _state()
    watch = ProgressWatch(Watchdog(repeats=3), state, lambda: clock[0], lambda: None, coach=True)
    # The same call with different outputs (a poll, a flaky server): no repetition.
    for n in range(5):
        watch.note_call("http_request", {"url": "u"}, f"status {n}")
    assert watch.stall is None and watch.coaching is None
    watch.new_step()
    # The same call, the same output: the model is told first, the run goes on.
    for _ in range(3):
        watch.note_call("http_request", {"url": "u"}, "ok")
    assert watch.stall is None
    assert watch.coaching is not None and "http_request" in watch.coaching
    watch.coaching = None
    # Repeated after that: held.
    for _ in range(3):
        watch.note_call("http_request", {"url": "u"}, "ok")
    assert watch.stall is not None and watch.stall.evidence["kind"] == "repeated_call"
    # A new step is coached afresh.
    watch.forgive()
    watch.new_step()
    for _ in range(3):
        watch.note_call("http_request", {"url": "u"}, "ok")
    assert watch.stall is None and watch.coaching is not None


def test_answers_that_call_no_tool_rightly_are_coached_once_then_hold() -> None:
    state, _ = _state()
    watch = ProgressWatch(
        Watchdog(invalid_answers=2), state, lambda: 0.0, lambda: None, coach_invalid=True
    )
    watch.note_invalid("Invalid arguments for write_file")
    watch.note_invalid("Invalid arguments for write_file")
    assert watch.stall is None and watch.coaching is not None
    assert "last 2 answers called no allowed tool rightly" in watch.coaching
    watch.coaching = None
    watch.note_invalid("Invalid arguments for write_file")
    watch.note_invalid("Invalid arguments for write_file")
    assert watch.stall is not None and watch.coaching is None


def test_an_invalid_call_is_shown_arguments_of_the_right_shape() -> None:
    schema = {
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "max_bytes": {"type": "integer"},
        },
        "required": ["path", "content"],
    }
    assert briefs.example_arguments(schema) == {"path": "...", "content": "..."}
    assert briefs.example_arguments({"properties": {"n": {"type": "integer"}}}) == {"n": 1}
