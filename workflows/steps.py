"""The step book: every step's record (a plan's steps, or an agent's tool calls), which are
running, and how many are done."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from temporalio import workflow

from workflows.common import Clock
from workflows.events import EventLog

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import EventType, StepKind, StepState, StepStatusName

PREVIEW_CHARS = 200
LISTED_OUTPUT_CHARS = 2000  # of one step's output in status; the `step` query has it all
AGENT_STEPS_KEPT = 100  # an agent's latest tool calls, listed and carried across continue-as-new
DONE = ("completed", "skipped")
OPEN = ("pending", "running", "waiting_approval")
_ENDED: Mapping[str, EventType] = MappingProxyType(
    {
        "completed": "step.completed",
        "failed": "step.failed",
        "skipped": "step.skipped",
        "cancelled": "step.cancelled",
    }
)


class StepBook:
    """Step records, kept so that what status asks costs O(what is in flight)."""

    def __init__(self, now: Clock, on_change: Callable[[], None], events: EventLog) -> None:
        self._now = now
        self._on_change = on_change
        self._events = events
        self.by_id: dict[str, StepState] = {}  # every step, in the order it was added
        self.active: dict[str, None] = {}  # running steps, in start order
        self.done = 0
        self.dropped = 0  # an agent's tool calls earlier segments did not carry

    def restore(self, steps: list[StepState], dropped: int) -> None:
        """Take over the records an earlier history segment carried."""
        self.by_id = {s.id: s for s in steps}
        self.done = sum(1 for s in steps if s.status in DONE)
        self.dropped = dropped

    def take_over(self, done: dict[str, StepState]) -> None:
        """Count as done, with what they recorded, the steps a retried run completed or
        skipped (and this plan still has)."""
        for step_id, recorded in done.items():
            state = self.by_id.get(step_id)
            if state is None or recorded.status not in DONE or state.kind != recorded.kind:
                continue
            self.by_id[step_id] = recorded.model_copy()
            self.done += 1
            self._ended(self.by_id[step_id])

    def add(self, step_id: str, kind: StepKind) -> StepState:
        """A new step record, pending."""
        state = self.by_id[step_id] = StepState(id=step_id, kind=kind)
        return state

    def start(self, state: StepState) -> None:
        """Mark a step running."""
        state.status = "running"
        state.started_at = self._now()
        self.active[state.id] = None
        self._events.emit("step.started", state.id, kind=state.kind)
        self._on_change()

    def settle(
        self,
        state: StepState,
        status: StepStatusName,
        *,
        output: Any = None,
        error: str | None = None,
    ) -> None:
        """Record how a step ended."""
        state.status = status
        state.output = output
        state.error = error
        state.finished_at = self._now()
        self.active.pop(state.id, None)
        if status in DONE:
            self.done += 1
        self._ended(state)
        self._on_change()

    def cancel_pending(self, reason: str) -> None:
        """Steps that never started are cancelled, saying why."""
        for state in self.by_id.values():
            if state.status == "pending":
                state.status = "cancelled"
                state.error = f"not started: {reason[:200]}"
                self._ended(state)

    def cancel_open(self) -> None:
        """Steps not yet ended are cancelled: the run has ended."""
        for state in self.by_id.values():
            if state.status in OPEN:
                state.status = "cancelled"
                self._ended(state)

    def _ended(self, state: StepState) -> None:
        event = _ENDED.get(state.status)
        if event is not None:
            self._events.emit(event, state.id, error=state.error, attempts=state.attempts)

    def recent(self, kept: int | None) -> tuple[list[StepState], int]:
        """The latest `kept` steps (all when None) and how many are left out."""
        steps = list(self.by_id.values())
        if kept is None or len(steps) <= kept:
            return steps, 0
        return steps[-kept:], len(steps) - kept


def shown(value: Any, limit: int) -> Any:
    """`value`, or a preview of it when its JSON is longer than `limit` characters."""
    if value is None:
        return None
    text = json.dumps(value)
    if len(text) <= limit:
        return value
    return {"truncated": True, "chars": len(text), "preview": text[:PREVIEW_CHARS]}


def listed(state: StepState, limit: int = LISTED_OUTPUT_CHARS) -> StepState:
    """A step as status lists it: an output too big to list becomes a preview."""
    output = shown(state.output, limit)
    return state if output is state.output else state.model_copy(update={"output": output})
