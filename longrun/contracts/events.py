"""The run's event log, as the `events` query answers it and `GET /v1/runs/{id}/events`
streams it: what happened, in order, each event numbered once for the whole run."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

EventType = Literal[
    "step.started",
    "step.completed",
    "step.failed",
    "step.skipped",
    "step.cancelled",
    "approval.requested",
    "approval.decided",
    "phase",
    "usage",
    "audit",
    "run.continued",
    "run.ended",
]


class RunEvent(BaseModel):
    """One thing that happened to a run. `id` counts from 1 across the whole run, history
    segments included, so a client resumes after the last id it saw."""

    id: int
    at: datetime
    type: EventType
    step: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class EventsQuery(BaseModel):
    """Argument of the `events` query: events after `after`, at most `limit` of them."""

    after: int = Field(0, ge=0)
    limit: int = Field(500, ge=1, le=1000)


class EventPage(BaseModel):
    """Answer of the `events` query."""

    events: list[RunEvent]
    # Artifacts holding events before the oldest the run keeps, oldest first.
    archived: list[str] = Field(default_factory=list)
    first_kept: int = 1  # the id of the oldest event the run keeps
    last: int = 0  # the id of the newest event
    ended: bool = False  # the run has ended: `run.ended` is the last event
