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
    "approval.reminder",
    "approval.escalated",
    "step.verified",
    "step.restarted",
    "plan.made",
    "acceptance.failed",
    "phase",
    "usage",
    "budget.changed",
    "run.paused",
    "run.resumed",
    "audit",
    "run.continued",
    "run.ended",
    "child.started",
    "child.ended",
]


class RunEvent(BaseModel):
    """One thing that happened to a run. `id` counts from 1 across the whole run, history
    segments included, so a client resumes after the last id it saw."""

    id: int
    at: datetime
    type: EventType
    step: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class RunFigures(BaseModel):
    """What a run met and who stepped in, counted from its events as they happen; the
    task metrics (`GET /v1/metrics`) add them up across runs."""

    retried_steps: int = Field(0, description="steps (or agent tool calls) tried more than once")
    budget_pauses: int = 0
    model_pauses: int = Field(0, description="pauses because the model stayed unavailable")
    replans: int = 0
    approvals: int = Field(0, description="approval requests people decided")
    guidance: int = Field(
        0, description="of those, answers to an agent asking for help or held as stalled"
    )
    budget_changes: int = 0
    resumes: int = 0
    verifications: int = Field(0, description="an agent's step verifications")
    failed_verifications: int = 0
    premature_completions: int = Field(
        0, description="times the agent claimed the goal met while a criterion failed"
    )
    stalls: int = Field(0, description="times the watchdog held the run: no progress")
    restarts: int = Field(
        0, description="agent steps set aside, going nowhere, and started afresh unasked"
    )
    replayed_calls: int = Field(
        0, description="a counterfactual fork's tool calls answered from the recording"
    )

    def met_failure(self) -> bool:
        """Whether the run met a failure it had to recover from."""
        return bool(
            self.retried_steps
            or self.budget_pauses
            or self.model_pauses
            or self.replans
            or self.stalls
            or self.restarts
        )

    def interventions(self) -> int:
        """How many times a person stepped in."""
        return self.approvals + self.budget_changes + self.resumes


class WebhookDelivery(BaseModel):
    """Input of `webhook.deliver`: one event for one URL. `delivery_id` is the same on
    every attempt, so a receiver can apply each delivery once."""

    run_id: str
    url: str
    delivery_id: str
    event: RunEvent


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
