"""Where a goal-only run's agent loop stands: its plan and position, the acceptance
results, counters, progress notes and rolling summary; what status shows of it and what a
hand-over carries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

from workflows.agent.briefs import PLAN_WINDOW
from workflows.common import cut

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import (
        AgentCarry,
        AgentSpec,
        CriterionState,
        Phase,
        PlanItem,
        RunState,
    )

CARRIED_SUMMARY_CHARS = 100  # of a step's intent and summary far behind the current one
OBSERVATIONS_KEPT = 8


class AgentState:
    """The agent loop's state; no Temporal calls, so it is plain to test."""

    def __init__(
        self,
        spec: AgentSpec,
        on_change: Callable[[], None],
        on_phase: Callable[[Phase], None] | None = None,
    ) -> None:
        self._on_change = on_change
        self._on_phase = on_phase
        self.plan: list[PlanItem] = []
        self.phase: Phase = "planning"
        self.acceptance = [CriterionState.pending(c) for c in spec.acceptance]
        self.replans = 0
        self.premature_completions = 0
        self.turns = 0
        self.tool_calls = 0
        self.effects = 0  # completed tool calls that changed something (not read-only)
        self.rejected = 0  # tool calls a person rejected
        self.rejected_calls: list[str] = []  # the latest of them (name and arguments)
        self.notes: list[str] = []  # finished steps' summaries since the rolling summary
        self.summary = ""  # rolling summary of progress older than the notes
        self.observations: list[str] = []  # the current step's tool results, newest last
        self.observing: str | None = None  # the step they are of
        self.current: PlanItem | None = None
        self.last_check: str | None = None
        self.index = 0  # the plan step the loop is on
        self.feedback: str | None = None  # for the step's next attempt
        # What the progress watchdog reads (workflows/agent/watchdog.py).
        self.turns_at_progress = 0  # `turns` when a plan step was last verified
        self.phase_seconds: dict[str, float] = {}  # time spent in each phase before this one

    def restore(self, carry: AgentCarry) -> None:
        """Take over where the previous history segment stood."""
        self.plan = carry.plan
        self.index = carry.index
        self.feedback = carry.feedback
        self.acceptance = carry.acceptance
        self.replans = carry.replans
        self.premature_completions = carry.premature_completions
        self.turns = carry.turns
        self.tool_calls = carry.tool_calls
        self.effects = carry.effects
        self.rejected = carry.rejected
        self.rejected_calls = carry.rejected_calls
        self.notes = carry.progress
        self.summary = carry.summary
        self.turns_at_progress = carry.turns_at_progress
        self.phase_seconds = dict(carry.phase_seconds)
        self.phase = "acting"
        if self.plan:  # past the last step, the last one's summary is the run's claim
            self.current = self.plan[min(self.index, len(self.plan) - 1)]

    def carry(self) -> AgentCarry:
        """The loop's state for the next history segment."""
        return AgentCarry(
            plan=self.compact_plan(),
            index=self.index,
            feedback=self.feedback,
            acceptance=self.acceptance,
            replans=self.replans,
            premature_completions=self.premature_completions,
            turns=self.turns,
            tool_calls=self.tool_calls,
            effects=self.effects,
            rejected=self.rejected,
            rejected_calls=self.rejected_calls,
            progress=self.notes,
            summary=self.summary,
            turns_at_progress=self.turns_at_progress,
            phase_seconds=self.phase_seconds,
        )

    def compact_plan(self) -> list[PlanItem]:
        """A copy of the plan in which steps far behind the current one keep a short
        summary and no verification (the journal has both), so it stays small to carry
        and to show however long the plan."""
        plan = [item.model_copy() for item in self.plan]
        for item in plan[: max(0, self.index - PLAN_WINDOW)]:
            item.intent = cut(item.intent, CARRIED_SUMMARY_CHARS)
            item.expected_evidence = ""
            if item.summary:
                item.summary = cut(item.summary, CARRIED_SUMMARY_CHARS)
            item.verification = None
            item.guidance = []
        return plan

    def enter(self, phase: Phase) -> None:
        """Move to another phase of the loop."""
        if phase != self.phase and self._on_phase is not None:
            self._on_phase(phase)
        self.phase = phase
        self._on_change()

    def observe(self, line: str) -> None:
        """Keep one of the current step's tool results for its verification."""
        self.observations = [*self.observations[-(OBSERVATIONS_KEPT - 1) :], line]

    def result(self) -> dict[str, Any]:
        """The run's result: the last step's summary and the acceptance evidence."""
        return {
            "summary": self.current.summary if self.current else None,
            "acceptance": {c.id: c.evidence for c in self.acceptance},
        }

    # --- what status shows --------------------------------------------------------------------

    def describe(self, state: RunState) -> None:
        """Add the agent's view to a status answer."""
        state.phase = self.phase
        state.plan = self.compact_plan()
        state.acceptance = [c.model_copy() for c in self.acceptance]
        state.replans = self.replans
        state.premature_completions = self.premature_completions

    def progress(self) -> str:
        """One line for the Web UI's current details."""
        line = f"{self.phase}"
        if self.current is not None and self.current in self.plan:
            k = self.plan.index(self.current) + 1
            line += f", step {k} of {len(self.plan)} ({self.current.id})"
        if self.last_check:
            line += f"\nlast verification: {self.last_check}"
        return line

    def counts(self) -> tuple[int, int]:
        """Plan steps done and planned so far."""
        return min(self.index, len(self.plan)), len(self.plan)

    def close(self, failed: bool) -> None:
        """Settle plan steps left open when the run ends early."""
        for item in self.plan:
            if item.status == "pending":
                item.status = "cancelled"
            elif item.status in ("running", "waiting_approval"):
                item.status = "failed" if failed else "cancelled"
