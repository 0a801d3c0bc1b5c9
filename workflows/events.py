"""The run's event log: what happened, in order, numbered once for the whole run. The
`events` query pages through it; `GET /v1/runs/{id}/events` streams it; a hand-over
carries the latest events and archives the rest (workflows/handover.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

from workflows.common import TIMEOUT_ACTOR, Clock

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import EventPage, EventsQuery, EventType, RunEvent, RunFigures

EVENTS_KEPT = 200  # the latest events a hand-over carries; older ones are archived
DETAIL_CHARS = 500  # of a text an event repeats (a summary, an error)


class EventLog:
    """Events of the run since the oldest kept; their ids have no gaps."""

    def __init__(self, now: Clock) -> None:
        self._now = now
        self.events: list[RunEvent] = []
        self.next_id = 1
        self.archived: list[str] = []  # artifacts holding the events before the oldest kept
        self.ended = False
        self.figures = RunFigures()  # counted from every event, whether kept or archived
        self._listeners: list[Callable[[RunEvent], None]] = []

    def restore(
        self, events: list[RunEvent], next_id: int, archived: list[str], figures: RunFigures
    ) -> None:
        """Take over the log an earlier history segment carried."""
        self.events = events
        self.next_id = next_id
        self.archived = archived
        self.figures = figures

    def emit(self, type: EventType, step: str | None = None, **data: Any) -> None:
        """Record that something happened (texts in `data` cut to DETAIL_CHARS)."""
        shown = {k: _cut(v) for k, v in data.items() if v is not None}
        event = RunEvent(id=self.next_id, at=self._now(), type=type, step=step, data=shown)
        self.events.append(event)
        self.next_id += 1
        if type == "run.ended":
            self.ended = True
        _count(self.figures, event)
        for listener in self._listeners:
            listener(event)

    def listen(self, listener: Callable[[RunEvent], None]) -> None:
        """Call `listener` with every event from now on."""
        self._listeners.append(listener)

    def page(self, query: EventsQuery) -> EventPage:
        """Events after `query.after`, oldest first, at most `query.limit`."""
        first = self.events[0].id if self.events else self.next_id
        start = max(0, query.after + 1 - first)
        return EventPage(
            events=self.events[start : start + query.limit],
            archived=self.archived,
            first_kept=first,
            last=self.next_id - 1,
            ended=self.ended,
        )

    def whole(self) -> EventPage:
        """Every event kept, as one page (for the run's final record)."""
        return EventPage(
            events=list(self.events),
            archived=self.archived,
            first_kept=self.events[0].id if self.events else self.next_id,
            last=self.next_id - 1,
            ended=self.ended,
        )

    def older(self) -> list[RunEvent]:
        """The events a hand-over archives: all but the latest EVENTS_KEPT."""
        return self.events[:-EVENTS_KEPT] if len(self.events) > EVENTS_KEPT else []

    def forget(self, count: int, artifacts: list[str]) -> None:
        """Drop the oldest `count` events, now kept in `artifacts`."""
        del self.events[:count]
        self.archived.extend(artifacts)


def _count(figures: RunFigures, event: RunEvent) -> None:
    """Add what an event says to the run's figures."""
    data = event.data
    if event.type in ("step.completed", "step.failed") and data.get("attempts", 0) > 1:
        figures.retried_steps += 1
    elif event.type == "run.paused" and data.get("reason") == "budget":
        figures.budget_pauses += 1
    elif event.type == "run.paused" and data.get("reason") == "model_unavailable":
        figures.model_pauses += 1
    elif event.type == "run.paused" and data.get("reason") == "stalled":
        figures.stalls += 1
    elif event.type == "step.restarted":
        figures.restarts += 1
    elif event.type == "run.resumed":
        figures.resumes += 1
    elif event.type == "budget.changed":
        figures.budget_changes += 1
    elif event.type == "approval.decided" and data.get("by") != TIMEOUT_ACTOR:
        figures.approvals += 1
        figures.guidance += data.get("kind") in ("needs_help", "stalled")
    elif event.type == "plan.made" and data.get("replan"):
        figures.replans += 1
    elif event.type == "step.verified":
        figures.verifications += 1
        figures.failed_verifications += not data.get("passed")
    elif event.type == "acceptance.failed":
        figures.premature_completions += 1
    elif event.type == "audit" and data.get("action") == "replayed":
        figures.replayed_calls += 1


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > DETAIL_CHARS:
        return value[:DETAIL_CHARS] + "…"
    return value
