"""Budget and approvals: limits, prices and usage, the budget as status shows it; the signal
payloads that pause, resume, cancel, change the budget or decide an approval; and the approval and
audit records a run keeps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from longrun.contracts.common import ApprovalKind, Decision, Role, _Strict

LIMITS = (
    "max_input_tokens",
    "max_output_tokens",
    "max_cost_usd",
    "max_model_calls",
    "max_tool_calls",
    "max_duration_s",
)


class Limits(_Strict):
    """Budget limits; an unset limit does not bind."""

    max_input_tokens: int | None = Field(None, ge=0)
    max_output_tokens: int | None = Field(None, ge=0)
    max_cost_usd: float | None = Field(None, ge=0)
    max_model_calls: int | None = Field(None, ge=0)
    max_tool_calls: int | None = Field(None, ge=0)
    max_duration_s: float | None = Field(None, ge=0)


class Budget(Limits):
    """A run's budget, and what happens when its time limit runs out."""

    on_budget_exhausted: Literal["pause", "fail"] = "pause"


class Price(BaseModel):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class PendingApproval(BaseModel):
    """An approval a person still has to decide."""

    approval_id: str
    step_id: str
    summary: str
    requested_at: datetime
    kind: ApprovalKind = "approval"
    arguments: Any = Field(None, description="exactly what will run once approved")
    digest: str | None = Field(
        None,
        description="sha256 over the tool, its resolved arguments and the policy in force: a "
        "decision naming it is taken for this exact call only",
    )
    role: Role = Field(
        "approver", description="who may decide it: approver, or the role it was escalated to"
    )
    tool: str | None = Field(None, description="the tool the call runs, if one does")
    run_id: str | None = Field(
        None, description="the child run that asks, when it is not this run (decide it there)"
    )


class ApprovalRecord(PendingApproval):
    """An approval request and, once taken, the decision on it."""

    decision: Decision | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    comment: str | None = None


class Usage(BaseModel):
    """Model usage of a run so far."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    duration_s: float = 0.0
    recovering_s: float = Field(
        0.0,
        description="of duration_s, the time model calls waited for longrun to recover (a "
        "worker lost, a server unreachable, retried): max_duration_s does not count it",
    )


class LimitUse(BaseModel):
    """One budget limit against what the run has used of it."""

    limit: float | None
    used: float


class BudgetView(BaseModel):
    """The run's budget as status shows it."""

    limits: dict[str, LimitUse] = Field(default_factory=dict)
    on_budget_exhausted: Literal["pause", "fail"] = "pause"


class AuditEntry(BaseModel):
    """One decision about a run: who, when, what, why."""

    at: datetime
    actor: str
    action: str
    detail: str | None = None


class AuditTrail(BaseModel):
    """Answer of the `audit` query: every decision, oldest first."""

    run_id: str
    entries: list[AuditEntry]
    archived: list[str] = Field(
        default_factory=list,
        description="artifacts holding earlier entries, oldest first (the API reads them in)",
    )


RequestId = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class ControlRequest(_Strict):
    """Signal payload of pause and resume."""

    actor: str
    reason: str | None = Field(None, max_length=2000)
    request_id: RequestId | None = None  # the run keeps whether it took it (see RequestOutcome)


class CancelNote(_Strict):
    """Signal payload sent just before a cancel: who cancels, and whether to compensate."""

    actor: str
    compensate: bool = False


class BudgetChange(_Strict):
    """Signal payload: new limits (unset ones stay as they are) and who set them."""

    limits: Limits
    actor: str
    request_id: RequestId | None = None


class ApprovalDecision(_Strict):
    """Signal payload: a person's decision on one approval request."""

    approval_id: str
    decision: Decision
    comment: str | None = Field(None, max_length=4000)
    actor: str = "anonymous"
    request_id: RequestId | None = None
    # The call the person decided on: refused if the request is now for another one.
    digest: str | None = None
    # The roles of who decides: an escalated request takes only its role's (or admin's).
    roles: list[Role] = Field(default_factory=list)
    # Sent before the API saw the request in the run's status: a run that has not asked
    # for it refuses it (UnknownApproval) instead of keeping it for when it does.
    unseen: bool = False


class RequestOutcome(BaseModel):
    """Whether a run took a request a person sent it (a decision, a pause, a resume, a budget
    change), and if not, why: what the API tells its caller."""

    request_id: str
    taken: bool
    kind: str | None = None  # why not: UnknownApproval, AlreadyDecided, AlreadyPaused, ...
    message: str | None = None
