"""The progress watchdog of a goal-only run: it notices the agent going nowhere (the same
tool call again and again, the same output again and again, answers that call no allowed
tool rightly, many turns without a verified step, one phase eating its share of the time
budget) and holds the run, `pause_reason: stalled`, with what it saw. A person decides its
`stalled` approval: approve with guidance to go on, reject to fail; left alone past
`Watchdog.decide_within_s` the run fails, stalled."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from temporalio import workflow

from workflows.agent.state import AgentState
from workflows.changes import changed
from workflows.common import TIMEOUT_ACTOR, Clock, StepFailed, cut
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import Phase, PlanItem, Watchdog

SEEN_CHARS = 300  # of a call or an output, in the evidence
DECIDER = "longrun"


class Stall(Exception):
    """The agent made no progress; the message says how, `evidence` shows it."""

    def __init__(self, why: str, evidence: dict[str, Any]) -> None:
        super().__init__(why)
        self.why = why
        self.evidence = evidence


def call_key(name: str, args: dict[str, Any]) -> str:
    """A tool call by name and canonical arguments: what counts as the same call."""
    return f"{name} {json.dumps(args, sort_keys=True)}"


class ProgressWatch:
    """What the watchdog counts on the agent's way; no Temporal calls, so it is plain to
    test. After each `note_*`, `stall` says how the run went nowhere, if it did."""

    def __init__(
        self,
        limits: Watchdog,
        state: AgentState,
        now: Clock,
        time_budget: Callable[[], float | None],
        coach: bool = False,
        coach_invalid: bool = False,
    ) -> None:
        """With `coach`, a repetition is first told to the model (`coaching`) and holds the
        run only if it goes on after that; a call repeated with different outputs is no
        repetition."""
        self._limits = limits
        self._coach = coach
        self._coach_invalid = coach_invalid
        self._coached: set[str] = set()  # repetitions already told, this step
        self.coaching: str | None = None  # what to tell the model with this call's output
        self._state = state
        self._now = now
        self._time_budget = time_budget
        self._calls: Counter[str] = Counter()  # this step's tool calls, by name and arguments
        self._outputs: list[str] = []  # the latest outputs, newest last
        self._invalid: list[str] = []  # the latest answers that called no tool rightly
        self._phase_since = now()
        self.stall: Stall | None = None

    def forgive(self) -> None:
        """A person said go on: counting starts afresh, for the step and its phase."""
        self.stall = None
        self._calls.clear()
        self._outputs.clear()
        self._invalid.clear()
        self._coached.clear()
        self._state.turns_at_progress = self._state.turns
        self._state.phase_seconds[self._state.phase] = 0.0
        self._phase_since = self._now()

    def new_step(self) -> None:
        """The agent starts a step (or starts it again): what it repeated is forgotten."""
        self._calls.clear()
        self._outputs.clear()
        self._coached.clear()

    def progressed(self) -> None:
        """A plan step was verified."""
        self._state.turns_at_progress = self._state.turns

    def note_call(self, name: str, args: dict[str, Any], output: str) -> None:
        """A tool call ran and gave `output` (or its failure)."""
        self._invalid.clear()
        key = call_key(name, args)
        # Coached, a call is the same call only with the same output (a poll is no loop).
        counted = f"{key} -> {output}" if self._coach else key
        self._calls[counted] += 1
        times = self._calls[counted]
        self._outputs = [*self._outputs[-(self._limits.repeats - 1) :], output]
        if times >= self._limits.repeats:
            if self._coaches(counted, key, output, times):
                self._calls[counted] = 0
                return
            self.stall = Stall(
                f"the agent called {cut(key, SEEN_CHARS)} {times} times in step "
                f"'{self._step_id()}'",
                {"kind": "repeated_call", "call": cut(key, SEEN_CHARS), "times": times},
            )
        elif len(self._outputs) >= self._limits.repeats and len(set(self._outputs)) == 1:
            if self._coaches(f"-> {output}", key, output, len(self._outputs)):
                self._outputs.clear()
                return
            self.stall = Stall(
                f"the agent's last {len(self._outputs)} tool calls all gave the same output",
                {
                    "kind": "repeated_output",
                    "output": cut(output, SEEN_CHARS),
                    "times": len(self._outputs),
                },
            )

    def _coaches(self, repetition: str, key: str, output: str, times: int) -> bool:
        """Tell the model of a repetition the first time it is seen this step, instead of
        holding the run; whether it did."""
        if not self._coach or repetition in self._coached:
            return False
        self._coached.add(repetition)
        self.coaching = (
            f"Note from longrun: this is the {times}th time in this step that a call gave this "
            f"same result (last: {cut(key, SEEN_CHARS)}). Use the result you have; do not repeat "
            "the call unless the step asks for it again. If the step is done, say so without "
            "calling a tool. A further repeat holds the run for a person."
        )
        return True

    def note_invalid(self, problem: str) -> None:
        """The model's answer called a tool it may not use, or with invalid arguments."""
        self._invalid = [*self._invalid, cut(problem, SEEN_CHARS)]
        if len(self._invalid) >= self._limits.invalid_answers:
            if self._coach_invalid and "invalid answers" not in self._coached:
                self._coached.add("invalid answers")
                self._invalid.clear()
                self.coaching = (
                    f"Note from longrun: your last {self._limits.invalid_answers} answers "
                    "called no allowed tool rightly. Call one of the tools offered, by its "
                    "name, with every argument it requires given as a value (not a schema). "
                    "A further run of such answers holds the run for a person."
                )
                return
            self.stall = Stall(
                f"the model's last {len(self._invalid)} answers called no allowed tool rightly",
                {"kind": "invalid_answers", "answers": self._invalid},
            )

    def note_turn(self) -> None:
        """Before a model turn: too many since the last verified step, or a phase over its
        share of the time budget."""
        s = self._state
        turns = s.turns - s.turns_at_progress
        if turns >= self._limits.turns_without_progress:
            self.stall = Stall(
                f"{turns} model turns without a verified step (now on '{self._step_id()}')",
                {"kind": "no_progress", "turns": turns, "on": self._step_id()},
            )
        else:
            self.note_time()

    def note_time(self) -> None:
        """After a model call: a phase other than acting (where the work is) that took more
        than its share of the time budget."""
        budget = self._time_budget()
        phase = self._state.phase
        if budget is None or phase == "acting":
            return
        spent = self.phase_seconds(phase)
        if spent > self._limits.phase_share * budget:
            self.stall = Stall(
                f"{phase} took {spent:.0f} s, more than {self._limits.phase_share:.0%} of the "
                f"run's {budget:g} s",
                {"kind": "phase_over_budget", "phase": phase, "seconds": round(spent)},
            )

    def leave(self, phase: Phase) -> None:
        """The loop leaves `phase` (for another, or for the next segment): count its time."""
        now = self._now()
        spent = self._state.phase_seconds
        spent[phase] = spent.get(phase, 0.0) + (now - self._phase_since).total_seconds()
        self._phase_since = now

    def phase_seconds(self, phase: Phase) -> float:
        """Time spent in `phase`, its current stretch included."""
        before = self._state.phase_seconds.get(phase, 0.0)
        if phase != self._state.phase:
            return before
        return before + (self._now() - self._phase_since).total_seconds()

    def _step_id(self) -> str:
        current = self._state.current
        return current.id if current is not None else "(planning)"


class StallGate:
    """Holds a stalled run for a person: pause reason and evidence, an event (and so a
    webhook), an approval in the inbox. Returns the guidance given, or fails the run."""

    def __init__(self, parts: RunParts, limits: Watchdog) -> None:
        self._parts = parts
        self._limits = limits

    async def hold(self, stall: Stall, item: PlanItem | None) -> str:
        """Wait for a person's decision on the stall; the guidance to go on with."""
        p = self._parts
        step_id = item.id if item is not None else "plan"
        p.ledger.stalled = stall.why
        p.audit.record(DECIDER, "paused", f"stalled: {stall.why}", event=False)
        p.events.emit(
            "run.paused", step_id, reason="stalled", detail=stall.why, evidence=stall.evidence
        )
        ask = p.approvals.ask(
            step_id,
            f"Stalled: {stall.why}. Approve with guidance in the comment to go on, or reject "
            "to fail the run.",
            kind="stalled",
            arguments=stall.evidence,
        )
        if item is not None:
            before, item.status = item.status, "waiting_approval"
        try:
            record = await p.approvals.decision(ask, self._limits.decide_within_s, "fail")
        except asyncio.CancelledError:  # the run is cancelled: it holds no more
            p.ledger.stalled = None
            raise
        p.ledger.stalled = None
        if item is not None:
            item.status = before
        p.refresh()
        if record.decision == "reject":
            if record.decided_by == TIMEOUT_ACTOR:
                raise StepFailed(
                    f"stalled: {stall.why}; nobody decided within "
                    f"{self._limits.decide_within_s:g} s"
                )
            reason = f": {record.comment}" if record.comment else ""
            raise StepFailed(f"stalled: {stall.why}; {record.decided_by} rejected going on{reason}")
        guidance = f"{record.decided_by}: {record.comment or '(no comment)'}"
        if item is not None:
            item.guidance.append(guidance)
        return guidance


def watching() -> bool:
    """Whether this run has the watchdog (`agent-watchdog`)."""
    return changed("agent-watchdog")
