"""Pydantic types that cross a boundary: REST bodies, workflow and activity inputs and outputs.

Every field added after release needs a default so that histories of running jobs keep
deserialising.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

STEP_ID_PATTERN = r"^[a-z0-9_-]{1,64}$"
LABEL_KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"

StepId = Annotated[str, StringConstraints(pattern=STEP_ID_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN)]

RunStatusName = Literal["running", "waiting_approval", "completed", "failed", "cancelled"]
StepStatusName = Literal[
    "pending", "running", "waiting_approval", "completed", "failed", "skipped", "cancelled"
]
StepKind = Literal["tool", "model", "wait", "approval"]
Decision = Literal["approve", "reject"]

RUN_STATUSES: tuple[RunStatusName, ...] = (
    "running",
    "waiting_approval",
    "completed",
    "failed",
    "cancelled",
)
FINAL_RUN_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SideEffect(StrEnum):
    """What a tool call does to the world, which decides whether it is gated."""

    READ_ONLY = "read_only"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"


# --- plans -------------------------------------------------------------------------------


class RetrySpec(_Strict):
    """How often and how fast a failing step is retried."""

    max_attempts: int = Field(5, ge=1, le=100)
    initial_interval_s: float = Field(1.0, gt=0, le=3600)
    backoff: float = Field(2.0, ge=1, le=10)


class ModelSpec(_Strict):
    """A Chat Completions call; `json_schema` asks for structured output."""

    prompt: str = Field(min_length=1, max_length=200_000)
    system: str | None = Field(None, max_length=200_000)
    model: str | None = Field(None, min_length=1, max_length=200)
    json_schema: dict[str, Any] | None = None


class WaitSpec(_Strict):
    """A durable timer: the run sleeps in Temporal, not in a process."""

    seconds: float = Field(ge=0, le=366 * 24 * 3600)


class ApprovalSpec(_Strict):
    """A gate with no action: a person must approve before dependents run."""

    message: str = Field(min_length=1, max_length=4000)


class Step(_Strict):
    """One step of a plan: exactly one of `tool`, `model`, `wait` or `approval`."""

    id: StepId
    tool: str | None = Field(None, min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    model: ModelSpec | None = None
    wait: WaitSpec | None = None
    approval: ApprovalSpec | None = None
    depends_on: list[StepId] | None = Field(None, max_length=1000)
    requires_approval: bool | None = None
    on_reject: Literal["fail", "skip"] = "fail"
    retry: RetrySpec | None = None
    timeout_s: float | None = Field(None, gt=0, le=24 * 3600)

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        kinds = [k for k in ("tool", "model", "wait", "approval") if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(
                f"a step needs exactly one of tool, model, wait, approval (found: {found})"
            )
        if self.args and self.tool is None:
            raise ValueError("'args' only applies to tool steps")
        return self

    @property
    def kind(self) -> StepKind:
        """Which of the four kinds this step is."""
        if self.tool is not None:
            return "tool"
        if self.model is not None:
            return "model"
        if self.wait is not None:
            return "wait"
        return "approval"


class Plan(_Strict):
    """An explicit plan: steps run when their dependencies are done."""

    steps: list[Step] = Field(min_length=1, max_length=1000)


class RunRequest(_Strict):
    """Body of `POST /v1/runs`."""

    goal: str = Field(min_length=1, max_length=4000)
    plan: Plan | None = None
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=20)


# --- workflow ------------------------------------------------------------------------------


class RunConfig(BaseModel):
    """Settings a run needs inside the workflow, fixed when the run starts."""

    default_model: str


class RunInput(BaseModel):
    """Input of the run workflow: a validated, normalised plan and its context."""

    run_id: str
    goal: str
    plan: Plan
    labels: dict[str, str] = Field(default_factory=dict)
    config: RunConfig


class StepState(BaseModel):
    """Where one step stands."""

    id: str
    kind: StepKind
    status: StepStatusName = "pending"
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    output: Any = None
    error: str | None = None


class PendingApproval(BaseModel):
    """An approval a person still has to decide."""

    approval_id: str
    step_id: str
    summary: str
    requested_at: datetime


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


class RunState(BaseModel):
    """Answer of the workflow's `status` query; the body of `GET /v1/runs/{id}`."""

    run_id: str
    goal: str
    status: RunStatusName = "running"
    steps: list[StepState] = Field(default_factory=list)
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    labels: dict[str, str] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None


class ApprovalDecision(_Strict):
    """Signal payload: a person's decision on one approval request."""

    approval_id: str
    decision: Decision
    comment: str | None = Field(None, max_length=4000)
    actor: str = "anonymous"


class RunResult(BaseModel):
    """What a completed run returns: the outputs of its final steps."""

    outputs: dict[str, Any] = Field(default_factory=dict)


# --- activities ----------------------------------------------------------------------------


class ToolCall(BaseModel):
    """Input of every `tool.<name>` activity."""

    run_id: str
    step_id: str
    idempotency_key: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolResult(BaseModel):
    """Output of every `tool.<name>` activity."""

    output: dict[str, Any]
    attempt: int = 1


class ModelRequest(BaseModel):
    """Input of the `model.complete` activity."""

    run_id: str
    step_id: str
    model: str
    prompt: str
    system: str | None = None
    json_schema: dict[str, Any] | None = None


class ModelResult(BaseModel):
    """Output of the `model.complete` activity."""

    text: str
    json_value: Any = None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    attempt: int = 1
