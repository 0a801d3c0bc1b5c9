"""The run workflow's parts on their own, in plain pytest: no server, a fake clock, and a
display that records what the run would show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from longrun.contracts import (
    ApprovalDecision,
    Budget,
    ControlRequest,
    Limits,
    Plan,
    Price,
    RunConfig,
    RunInput,
    RunStatusName,
    Step,
)
from workflows.common import StepFailed
from workflows.handover import HandOver
from workflows.parts import RunParts
from workflows.status import PROGRESS_EVERY, Progress, ProgressGate
from workflows.steps import LISTED_OUTPUT_CHARS


class FakeClock:
    """Time that moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Shown:
    """What the run showed: its current details and each status it published (as a run
    from before progress attributes does)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.statuses: list[RunStatusName] = []

    def details(self, text: str) -> None:
        self.texts.append(text)

    def status(self, status: RunStatusName) -> None:
        self.statuses.append(status)

    def progress(self, progress: Progress, final: bool) -> bool:
        return False

    def version(self) -> str | None:
        return "v1"


def _input(steps: list[Step] | None = None, budget: Budget | None = None) -> RunInput:
    return RunInput(
        run_id="run-" + "0" * 32,
        goal="test the parts",
        plan=Plan(steps=steps) if steps else None,
        config=RunConfig(default_model="m", prices={"m": Price(input=1.0, output=2.0)}),
        budget=budget or Budget(),
    )


def _parts(
    steps: list[Step] | None = None, budget: Budget | None = None
) -> tuple[RunParts, FakeClock, Shown]:
    clock, shown = FakeClock(), Shown()
    parts = RunParts(_input(steps, budget), clock, shown)
    for step in steps or []:
        parts.steps.add(step.id, step.kind)
    return parts, clock, shown


# --- audit -------------------------------------------------------------------------------


def test_audit_starts_with_the_submission_and_caps_details() -> None:
    parts, clock, _ = _parts()
    clock.advance(5)
    parts.audit.record("ann", "note", "x" * 5000)
    first, second = parts.audit.entries
    assert (first.actor, first.action, first.detail) == ("local", "submitted", "test the parts")
    assert second.at == clock.now
    assert second.detail is not None and len(second.detail) == 1001
    assert second.detail.endswith("…")


# --- step book -----------------------------------------------------------------------------


def test_step_book_counts_done_steps_and_keeps_start_order() -> None:
    steps = [Step(id=s, tool="echo") for s in ("a", "b", "c")]
    parts, _, shown = _parts(steps)
    book = parts.steps
    book.start(book.by_id["b"])
    book.start(book.by_id["a"])
    assert list(book.active) == ["b", "a"]
    assert shown.texts[-1] == "running: 0/3 steps done\nrunning: b, a"
    book.settle(book.by_id["a"], "completed", output={"v": 1})
    book.settle(book.by_id["b"], "skipped")
    assert book.done == 2 and list(book.active) == []
    book.cancel_pending("step 'x' failed")
    assert book.by_id["c"].status == "cancelled"
    assert book.by_id["c"].error == "not started: step 'x' failed"
    assert book.by_id["a"].status == "completed"


def test_step_book_lists_the_latest_steps_and_counts_the_rest() -> None:
    parts, _, _ = _parts()
    for n in range(5):
        parts.steps.add(f"t{n}", "tool")
    kept, omitted = parts.steps.recent(2)
    assert [s.id for s in kept] == ["t3", "t4"] and omitted == 3
    assert parts.steps.recent(None) == (list(parts.steps.by_id.values()), 0)


# --- ledger --------------------------------------------------------------------------------


def test_ledger_counts_calls_and_holds_at_an_exhausted_limit() -> None:
    parts, _, shown = _parts(budget=Budget(max_model_calls=1))
    ledger = parts.ledger
    assert ledger.admit("model") is True
    assert ledger.usage.model_calls == 1
    assert ledger.admit("model") is False
    assert ledger.admit("model") is False  # still held, recorded once
    assert (ledger.pause_reason, ledger.exhausted) == ("budget", ["max_model_calls"])
    assert ledger.resume_refusal() == (
        "NotPaused",
        "the run holds for its budget (max_model_calls); raise the limits instead",
    )
    paused = [e for e in parts.audit.entries if e.action == "paused"]
    assert [e.detail for e in paused] == ["budget exhausted: max_model_calls"]
    assert ledger.usage.model_calls == 1  # a held call is not counted
    assert ledger.admit("tool") is False  # any call is held, not only model calls

    ledger.set_limits(Limits(max_model_calls=3), actor="ann")
    assert ledger.budget.max_model_calls == 3
    assert ledger.admit("tool") is True
    assert ledger.pause_reason is None and ledger.exhausted == []
    assert ledger.usage.tool_calls == 1
    assert shown.statuses == ["paused", "running"]


def test_ledger_holds_a_requested_pause_until_resumed() -> None:
    parts, _, _ = _parts()
    ledger = parts.ledger
    assert ledger.resume_refusal() == ("NotPaused", "the run is not paused")
    assert ledger.pause_refusal() is None
    ledger.pause(ControlRequest(actor="ann", reason="lunch"))
    assert ledger.pause_refusal() == ("AlreadyPaused", "the run is already paused by ann")
    assert ledger.admit("tool") is False
    assert ledger.pause_reason == "requested" and ledger.exhausted == []
    assert ledger.resume_refusal() is None
    ledger.resume(ControlRequest(actor="bob"))
    assert ledger.admit("tool") is True
    actions = [(e.actor, e.action) for e in parts.audit.entries]
    assert actions[1:] == [("ann", "pause"), ("bob", "resume")]


def test_ledger_fails_a_used_up_time_budget_when_told_to() -> None:
    parts, clock, _ = _parts(budget=Budget(max_duration_s=10, on_budget_exhausted="fail"))
    assert parts.ledger.admit("model") is True
    clock.advance(11)
    with pytest.raises(StepFailed, match=r"time budget \(10 s\) is used up"):
        parts.ledger.admit("model")
    assert parts.ledger.view().limits["max_duration_s"].used == 11


def test_ledger_prices_tokens_by_the_model_asked_for() -> None:
    parts, _, _ = _parts()
    parts.ledger.add_usage("m", 1_000_000, 500_000)
    parts.ledger.add_usage("unpriced", 7, 7)
    usage = parts.ledger.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (1_000_007, 500_007, 2.0)


# --- approvals -----------------------------------------------------------------------------


def test_approvals_first_decision_wins_and_ids_stay_unique() -> None:
    parts, clock, shown = _parts([Step(id="gate", approval={"message": "ok?"})])
    approvals = parts.approvals
    first = approvals.ask("gate", "ok?", arguments={"x": 1})
    assert first.approval_id == "apr-gate"
    assert parts.steps.by_id["gate"].status == "waiting_approval"
    assert shown.statuses == ["waiting_approval"]
    assert [a.approval_id for a in approvals.pending()] == ["apr-gate"]

    clock.advance(60)
    assert approvals.decide(ApprovalDecision(approval_id="apr-gate", decision="reject", actor="a"))
    assert not approvals.decide(
        ApprovalDecision(approval_id="apr-gate", decision="approve", actor="b")
    )
    assert not approvals.decide(ApprovalDecision(approval_id="apr-none", decision="approve"))
    late = ApprovalDecision(approval_id="apr-gate", decision="approve", actor="b")
    assert approvals.refusal(late) == (
        "AlreadyDecided",
        "approval 'apr-gate' was already decided: reject by a",
    )
    unknown = ApprovalDecision(approval_id="apr-none", decision="approve")
    assert approvals.refusal(unknown) == ("UnknownApproval", "the run has no approval 'apr-none'")
    assert (first.decision, first.decided_by, first.decided_at) == ("reject", "a", clock.now)
    assert approvals.pending() == []
    assert [(e.actor, e.action) for e in parts.audit.entries][1:] == [("a", "reject")]

    again = approvals.ask("gate", "ok now?")
    help_ = approvals.ask("gate", "stuck", kind="needs_help")
    assert (again.approval_id, help_.approval_id) == ("apr-gate-2", "help-gate")
    listed = {a.approval_id: a for a in approvals.listed()}
    assert listed["apr-gate"].arguments is None  # decided: its arguments are in history
    assert first.arguments == {"x": 1}  # the record itself keeps them
    approvals.close()
    assert approvals.pending() == []


# --- undo log ------------------------------------------------------------------------------


def test_undo_log_keeps_undo_calls_not_arguments() -> None:
    parts, _, _ = _parts()
    undo = parts.undo
    undo.remember("r", "echo", {"value": 1}, {"value": 1})  # read-only: nothing to undo
    undo.remember(
        "w", "write_file", {"path": "a.txt", "content": "x" * 10_000}, {"backup": ".b/w.bak"}
    )
    undo.remember("s", "shell", {"argv": ["true"]}, {"exit_code": 0})
    assert [(c.step_id, c.undo_tool, c.irreversible) for c in undo.calls] == [
        ("w", "restore_file", False),
        ("s", None, True),
    ]
    assert undo.calls[0].undo_args == {"path": "a.txt", "backup": ".b/w.bak"}
    assert undo.calls[0].args == {}  # the content is not kept


# --- hand-over -----------------------------------------------------------------------------


def test_a_hand_over_carries_what_the_next_segment_needs() -> None:
    steps = [
        Step(id="a", tool="echo"),
        Step(id="b", tool="echo", args={"v": "{{steps.a.output}}"}, depends_on=["a"]),
        Step(id="side", tool="echo"),
        Step(id="later", tool="echo", depends_on=["side"]),
        Step(id="gate", approval={"message": "ok?"}),
    ]
    parts, clock, _ = _parts(steps, Budget(max_tool_calls=50))
    big = {"blob": "x" * (LISTED_OUTPUT_CHARS * 2)}
    for step_id in ("a", "side"):
        parts.ledger.admit("tool")
        parts.steps.settle(parts.steps.by_id[step_id], "completed", output=big)
    parts.approvals.ask("gate", "ok?")
    parts.ledger.pause(ControlRequest(actor="ann"))
    parts.undo.compensate_on_cancel = True
    clock.advance(30)

    carry = HandOver(parts).carry()
    carried = {s.id: s for s in carry.steps}
    assert carried["a"].output == big  # b, still to run, refers to it
    assert carried["side"].output["truncated"] is True  # nobody refers to it any more
    assert carry.segment == 2 and carry.usage.tool_calls == 2 and carry.version == "v1"

    fresh, _, _ = _parts(steps)
    handover = HandOver(fresh)
    handover.restore(carry)
    assert handover.segment == 2
    assert fresh.steps.done == 2
    assert fresh.ledger.started == parts.ledger.started
    assert fresh.ledger.budget.max_tool_calls == 50
    assert fresh.ledger.pause_request is not None
    assert fresh.undo.compensate_on_cancel is True
    assert fresh.audit.entries == parts.audit.entries
    # The waiting step waits on its old request, not a new one.
    resumed = fresh.approvals.ask("gate", "ok?")
    assert resumed.approval_id == "apr-gate"
    assert [a.approval_id for a in fresh.approvals.pending()] == ["apr-gate"]


# --- status --------------------------------------------------------------------------------


def test_status_shows_a_pause_before_a_wait_and_previews_big_outputs() -> None:
    steps = [Step(id="a", tool="echo"), Step(id="gate", approval={"message": "ok?"})]
    parts, _, shown = _parts(steps)
    parts.steps.settle(parts.steps.by_id["a"], "completed", output={"x": "y" * 5000})
    parts.approvals.ask("gate", "ok?")
    parts.ledger.pause(ControlRequest(actor="ann"))
    parts.ledger.admit("tool")
    assert shown.statuses == ["waiting_approval", "paused"]
    state = parts.status.state()
    assert state.status == "paused" and state.pause_reason == "requested"
    assert state.steps[0].output["truncated"] is True
    assert parts.steps.by_id["a"].output == {"x": "y" * 5000}  # the `step` query has it all
    assert shown.texts[-1].startswith("paused: 1/2 steps done")
    assert "waiting for approval: apr-gate (step gate)" in shown.texts[-1]


def test_progress_is_published_at_once_for_what_people_filter_on_and_sparingly_otherwise() -> None:
    gate, clock = ProgressGate(), FakeClock()
    start = Progress("running", "acting", 0, 50, 0.0, 0)

    def names(progress: Progress, final: bool = False) -> list[str]:
        return [u.key.name for u in gate.updates(progress, clock.now, final)]

    assert len(names(start)) == 6  # everything, the first time
    assert names(start) == []
    # Steps done and cost wait for their turn...
    assert names(Progress("running", "acting", 1, 50, 0.5, 0)) == []
    clock.advance(PROGRESS_EVERY.total_seconds() - 1)
    assert names(Progress("running", "acting", 9, 50, 0.5, 0)) == []
    clock.advance(1)
    assert names(Progress("running", "acting", 10, 50, 0.5, 0)) == [
        "LongrunStepsDone",
        "LongrunCostUsd",
    ]
    # ...a request for approval does not, and takes the progress so far along.
    clock.advance(1)
    assert names(Progress("waiting_approval", "acting", 11, 50, 0.5, 1)) == [
        "LongrunStatus",
        "LongrunStepsDone",
        "LongrunPendingApprovals",
    ]
    assert names(Progress("waiting_approval", "acting", 12, 50, 0.5, 1)) == []
    # The end is published whatever the time.
    assert names(Progress("completed", "acting", 50, 50, 0.5, 0), final=True) == [
        "LongrunStatus",
        "LongrunStepsDone",
        "LongrunPendingApprovals",
    ]


def test_progress_a_run_started_showing_is_not_published_again() -> None:
    clock = FakeClock()
    start = Progress("running", "planning", 0, 0, 0.0, 0)
    gate = ProgressGate(start, clock.now)

    def names(progress: Progress, final: bool = False) -> list[str]:
        return [u.key.name for u in gate.updates(progress, clock.now, final)]

    assert names(start) == []
    # What changed is published when due, as if the start had been published then.
    assert names(Progress("running", "acting", 0, 3, 0.0, 0)) == []
    clock.advance(PROGRESS_EVERY.total_seconds())
    assert names(Progress("running", "acting", 1, 3, 0.0, 0)) == [
        "LongrunPhase",
        "LongrunStepsDone",
        "LongrunStepsTotal",
    ]
    assert names(Progress("paused", "acting", 1, 3, 0.0, 0)) == ["LongrunStatus"]


def test_progress_counted_is_published_every_so_many_changes_whatever_the_time() -> None:
    clock = FakeClock()
    gate = ProgressGate(Progress("running", "acting", 0, 50, 0.0, 0), clock.now, every_changes=3)

    def names(progress: Progress, final: bool = False) -> list[str]:
        return [u.key.name for u in gate.updates(progress, clock.now, final)]

    clock.advance(3600)  # time does not make progress due
    assert names(Progress("running", "acting", 1, 50, 0.0, 0)) == []
    assert names(Progress("running", "acting", 1, 50, 0.0, 0)) == []  # no change: not counted
    assert names(Progress("running", "acting", 2, 50, 0.0, 0)) == []
    assert names(Progress("running", "acting", 3, 50, 0.0, 0)) == ["LongrunStepsDone"]
    assert names(Progress("running", "acting", 4, 50, 0.0, 0)) == []
    # Status is published at once, with the count started again.
    assert names(Progress("paused", "acting", 5, 50, 0.0, 0)) == [
        "LongrunStatus",
        "LongrunStepsDone",
    ]
    assert names(Progress("paused", "acting", 6, 50, 0.0, 0)) == []
    assert names(Progress("completed", "acting", 7, 50, 0.0, 0), final=True) == [
        "LongrunStatus",
        "LongrunStepsDone",
    ]
