"""Pydantic types that cross a boundary: REST bodies, workflow and activity inputs and outputs.

Every field added after release needs a default so that histories of running jobs keep
deserialising.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from longrun.policy import Policy

RUN_ID_PATTERN = r"^run-[0-9a-f]{32}$"  # the ids the API gives runs
STEP_ID_PATTERN = r"^[a-z0-9_-]{1,64}$"
LABEL_KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"

StepId = Annotated[str, StringConstraints(pattern=STEP_ID_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN)]

RunStatusName = Literal["running", "waiting_approval", "paused", "completed", "failed", "cancelled"]
LIVE_RUN_STATUSES: frozenset[str] = frozenset({"running", "waiting_approval", "paused"})
StepStatusName = Literal[
    "pending", "running", "waiting_approval", "completed", "failed", "skipped", "cancelled"
]
StepKind = Literal["tool", "model", "wait", "approval"]
Decision = Literal["approve", "reject"]
ApprovalKind = Literal["approval", "needs_help"]

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
    on_reject: Literal["fail", "skip", "compensate"] = "fail"
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


class Expect(_Strict):
    """What a deterministic check's tool result must show; every field given must hold."""

    exit_code: int | None = None
    contains: str | None = Field(None, max_length=10_000)
    regex: str | None = Field(None, max_length=1000)
    json_path: str | None = Field(None, max_length=500, description="dotted path into the output")
    equals: Any = None
    file_exists: str | None = Field(None, max_length=1024)

    @model_validator(mode="after")
    def _something(self) -> Expect:
        # Judged by values, not by which fields were sent, so the model survives a round
        # trip through workflow history.
        tests = (self.exit_code, self.contains, self.regex, self.json_path, self.file_exists)
        if all(t is None for t in tests):
            raise ValueError(
                "expect needs at least one of exit_code, contains, regex, "
                "json_path (with equals), file_exists"
            )
        if self.equals is not None and self.json_path is None:
            raise ValueError("equals needs a json_path to compare")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex does not compile: {exc}") from None
        return self


class ToolCheck(_Strict):
    """A deterministic check: call a tool, then test its output."""

    tool: str = Field(min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    expect: Expect


class JudgeCheck(_Strict):
    """A model-judged check: the judge must confirm the statement and cite why."""

    judge: str = Field(min_length=1, max_length=4000)


class Criterion(_Strict):
    """One acceptance criterion of a goal-only run."""

    id: StepId
    check: ToolCheck | JudgeCheck


class RoleModels(_Strict):
    """Models per role of a goal-only run; unset roles use the run's `model`."""

    planner: str | None = Field(None, min_length=1, max_length=200)
    actor: str | None = Field(None, min_length=1, max_length=200)
    judge: str | None = Field(None, min_length=1, max_length=200)


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


class RunRequest(_Strict):
    """Body of `POST /v1/runs`: an explicit `plan`, or a goal with acceptance criteria."""

    goal: str = Field(min_length=1, max_length=4000)
    plan: Plan | None = None
    acceptance: list[Criterion] | None = Field(None, max_length=50)
    tools: list[str] | None = Field(None, max_length=100)
    model: str | None = Field(None, min_length=1, max_length=200)
    models: RoleModels | None = None
    max_steps: int | None = Field(None, ge=1, le=10_000)
    budget: Budget | None = None
    on_failure: Literal["stop", "compensate"] = "stop"
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=20)


# --- workflow ------------------------------------------------------------------------------


class Price(BaseModel):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class RunConfig(BaseModel):
    """Settings a run needs inside the workflow, fixed when the run starts."""

    default_model: str
    # A plan run continues as new after this many steps end in one history segment (or
    # sooner, when Temporal suggests it).
    continue_as_new_every: int = Field(500, ge=1)
    # The most an actor prompt may hold, in estimated tokens (see longrun.context).
    prompt_token_budget: int = Field(12_000, ge=1000)
    prices: dict[str, Price] = Field(default_factory=dict)
    policy: Policy = Field(default_factory=Policy)


class AgentSpec(BaseModel):
    """What a goal-only run needs: criteria, allowed tools, models and bounds."""

    acceptance: list[Criterion]
    tools: list[str]
    planner_model: str
    actor_model: str
    judge_model: str
    max_steps: int = 40
    max_plan_attempts: int = 3
    max_verify_attempts: int = 2
    max_replans: int = 2
    max_turns_per_step: int = 12


class RunInput(BaseModel):
    """Input of the run workflow: a validated, normalised plan and its context."""

    run_id: str
    goal: str
    plan: Plan | None = None
    agent: AgentSpec | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    config: RunConfig
    owner: str = "local"
    budget: Budget = Field(default_factory=Budget)
    on_failure: Literal["stop", "compensate"] = "stop"
    carry: RunCarry | None = None


Phase = Literal["planning", "acting", "verifying", "replanning", "completing"]


class AgentPlanStep(_Strict):
    """One step of a model-made plan: what to do and what will show it was done."""

    id: StepId
    intent: str = Field(min_length=1, max_length=2000)
    expected_evidence: str = Field(min_length=1, max_length=2000)


MAX_AGENT_PLAN_STEPS = 1000
MAX_AGENT_PLAN_CHARS = 400_000


class AgentPlan(_Strict):
    """The planner's answer, validated before the run uses it."""

    steps: list[AgentPlanStep] = Field(min_length=1, max_length=MAX_AGENT_PLAN_STEPS)

    @model_validator(mode="after")
    def _not_too_long(self) -> AgentPlan:
        size = sum(len(s.intent) + len(s.expected_evidence) for s in self.steps)
        if size > MAX_AGENT_PLAN_CHARS:
            raise ValueError(
                f"the plan's intents and evidence hold {size} characters; at most "
                f"{MAX_AGENT_PLAN_CHARS} fit in a run's state"
            )
        return self


class PlanItem(BaseModel):
    """A model-made plan step and where it stands."""

    id: str
    intent: str
    expected_evidence: str
    status: StepStatusName = "pending"
    attempts: int = 0
    summary: str | None = None
    verification: str | None = None
    guidance: list[str] = Field(default_factory=list)


class CriterionState(BaseModel):
    """An acceptance criterion and its latest result."""

    id: str
    kind: Literal["tool", "judge"]
    status: Literal["pending", "passed", "failed"] = "pending"
    evidence: str | None = None


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
    kind: ApprovalKind = "approval"
    arguments: Any = Field(None, description="exactly what will run once approved")


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


class ControlRequest(_Strict):
    """Signal payload of pause, resume and the note taken before a cancel."""

    actor: str
    reason: str | None = Field(None, max_length=2000)


class CancelNote(_Strict):
    """Signal payload sent just before a cancel: who cancels, and whether to compensate."""

    actor: str
    compensate: bool = False


class Compensation(BaseModel):
    """What undoing a run's completed steps achieved."""

    compensated: list[str] = Field(default_factory=list)
    not_undone: list[str] = Field(default_factory=list)


class BudgetChange(_Strict):
    """Signal payload: new limits (unset ones stay as they are) and who set them."""

    limits: Limits
    actor: str


class RunState(BaseModel):
    """Answer of the workflow's `status` query; the body of `GET /v1/runs/{id}`."""

    run_id: str
    goal: str
    status: RunStatusName = "running"
    steps: list[StepState] = Field(default_factory=list)
    steps_omitted: int = Field(
        0, description="an agent's earlier tool calls not listed (the latest 100 are)"
    )
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    labels: dict[str, str] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None
    budget: BudgetView = Field(default_factory=BudgetView)
    pause_reason: Literal["budget", "requested"] | None = None
    exhausted: list[str] = Field(default_factory=list)
    # Goal-only runs:
    phase: Phase | None = None
    plan: list[PlanItem] = Field(default_factory=list)
    acceptance: list[CriterionState] = Field(default_factory=list)
    replans: int = 0
    premature_completions: int = 0


class StepQuery(BaseModel):
    """Input of the workflow's `step` query."""

    step_id: str


class CompletedCall(BaseModel):
    """A completed tool call that compensation would undo or report as irreversible.

    The undo call is worked out when the call completes, so the log stays small (a
    write's undo names a backup, not the content). Records of older runs carry the call's
    arguments and output instead, and their undo is worked out when it is needed.
    """

    step_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any] = Field(default_factory=dict)
    undo_known: bool = False
    undo_tool: str | None = None
    undo_args: dict[str, Any] | None = None
    irreversible: bool = False


class RunCarry(BaseModel):
    """What a plan run hands to its next history segment when it continues as new."""

    segment: int
    started: datetime
    steps: list[StepState]
    approvals: list[ApprovalRecord]
    usage: Usage
    budget: Budget
    audit: list[AuditEntry]
    completed_calls: list[CompletedCall] = Field(default_factory=list)
    pause_request: ControlRequest | None = None
    compensate_on_cancel: bool = False
    agent: AgentCarry | None = None
    steps_dropped: int = 0  # an agent's tool calls not carried


class AgentCarry(BaseModel):
    """Where a goal-only run's loop stands, handed to its next history segment."""

    plan: list[PlanItem]
    index: int
    feedback: str | None = None
    acceptance: list[CriterionState]
    replans: int = 0
    premature_completions: int = 0
    turns: int = 0
    tool_calls: int = 0
    progress: list[str] = Field(default_factory=list)
    summary: str = ""


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
    """Output of the `model.complete` activity; a long text comes as an artifact reference."""

    text: str | dict[str, Any]
    json_value: Any = None
    json_error: str | None = None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    attempt: int = 1


class ModelUsage(BaseModel):
    """Tokens one model call consumed."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0


class PlanRequest(BaseModel):
    """Input of `model.plan`: ask for a plan (or a replan) as structured output."""

    run_id: str
    model: str
    goal: str
    criteria: list[str]
    tools: list[str]
    context: str | None = None
    previous_error: str | None = None


class PlanAttempt(BaseModel):
    """Output of `model.plan`: a valid plan, or why the answer was not one."""

    plan: AgentPlan | None = None
    error: str | None = None
    usage: ModelUsage
    attempt: int = 1


class ToolCallRequest(BaseModel):
    """A tool call the model asked for; `arguments` is the JSON text it sent."""

    id: str
    name: str
    arguments: str


class Brief(BaseModel):
    """What an actor's prompt is assembled from; `model.act` adds the journal's notes
    relevant to `recall` and trims the whole to `token_budget` (see longrun.context)."""

    goal: str
    criteria: list[str]
    plan: list[str]
    summary: str = ""
    progress: list[str] = Field(default_factory=list)
    step: str
    guidance: list[str] = Field(default_factory=list)
    feedback: str | None = None
    recall: str = ""
    token_budget: int = 12_000


class ActRequest(BaseModel):
    """Input of `model.act`: one turn of a step's conversation, with the tools offered.

    With a `brief`, `messages` hold only this step's turns and the activity puts the
    prompt together; without one (runs started before briefs), `messages` are complete.
    """

    run_id: str
    step_id: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    brief: Brief | None = None


class ActResult(BaseModel):
    """Output of `model.act`: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: ModelUsage
    attempt: int = 1
    trimmed: list[str] = Field(default_factory=list, description="what the budget left out")


class CheckRequest(BaseModel):
    """Input of `verify.step` and `verify.acceptance`."""

    run_id: str
    check_id: str
    goal: str
    tool_check: ToolCheck | None = None
    statement: str | None = None
    observations: str = ""
    judge_model: str
    # Kept in the run's journal with the verdict: the step's summary when it passes, the
    # failed verification when it does not.
    journal: Note | None = None


class Verdict(BaseModel):
    """Whether a check passed, with the evidence a person can read."""

    passed: bool
    evidence: str
    usage: ModelUsage | None = None


class Note(BaseModel):
    """One entry of a run's journal."""

    kind: str
    step: str
    text: str


class NoteWrite(BaseModel):
    """Input of `memory.write`."""

    run_id: str
    note: Note


class RecallRequest(BaseModel):
    """Input of `memory.recall`: what the step is about, and how many notes to return."""

    run_id: str
    query: str
    k: int = 5


class Recall(BaseModel):
    """Output of `memory.recall`: notes, most relevant first."""

    notes: list[Note]


class CompactRequest(BaseModel):
    """Input of `context.compact`: the rolling summary and the oldest progress to fold in."""

    run_id: str
    model: str
    goal: str
    summary: str
    entries: list[str]
    max_chars: int = 2000


class CompactResult(BaseModel):
    """Output of `context.compact`: the new rolling summary."""

    summary: str
    usage: ModelUsage
