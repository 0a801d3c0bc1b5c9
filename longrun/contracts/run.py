"""The run workflow's boundary: the REST body that starts a run, the workflow's input and
settings, its `status` and `step` queries, what it returns, and what a run hands to its next
history segment when it continues as new.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from longrun.contracts.agent import AgentCarry, AgentSpec, CriterionState, PlanItem, Watchdog
from longrun.contracts.budget import (
    ApprovalDecision,
    ApprovalRecord,
    AuditEntry,
    Budget,
    BudgetView,
    ControlRequest,
    Limits,
    PendingApproval,
    Price,
    RequestOutcome,
    Usage,
)
from longrun.contracts.common import (
    LabelKey,
    LabelValue,
    PauseReason,
    Phase,
    Role,
    RunStatusName,
    StepKind,
    StepStatusName,
    _Strict,
)
from longrun.contracts.events import RunEvent, RunFigures
from longrun.contracts.plans import Criterion, OnTimeout, Plan, RoleModels
from longrun.contracts.tools import McpTool, RecordedCall
from longrun.policy import Policy

WebhookUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2000)]


class RunRequest(_Strict):
    """Body of `POST /v1/runs`: an explicit `plan`, or a goal with acceptance criteria."""

    goal: str = Field(min_length=1, max_length=4000)
    plan: Plan | None = None
    acceptance: list[Criterion] | None = Field(None, max_length=50)
    tools: list[str] | None = Field(None, max_length=100)
    model: str | None = Field(None, min_length=1, max_length=200)
    models: RoleModels | None = None
    max_steps: int | None = Field(None, ge=1, le=10_000)
    watchdog: Watchdog | None = Field(
        None, description="when the agent counts as stalled (goal-only runs); defaults fit most"
    )
    strategy: Literal["auto", "plan", "direct"] | None = Field(
        None,
        description="how a goal-only run starts: plan steps first (`plan`), work on the goal "
        "as one step (`direct`), or plan and go direct when no valid plan comes (`auto`); "
        "default LONGRUN_AGENT_STRATEGY",
    )
    budget: Budget | None = None
    on_failure: Literal["stop", "compensate"] = "stop"
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=20,
        # Keys not matching the key pattern are refused; say so in the schema too.
        json_schema_extra={"additionalProperties": False},
    )
    webhooks: list[WebhookUrl] | None = Field(
        None,
        max_length=10,
        description="URLs that get a signed POST when an approval is requested, the run "
        "pauses, or it ends (besides the server's LONGRUN_WEBHOOKS)",
    )


class RunConfig(BaseModel):
    """Settings a run needs inside the workflow, fixed when the run starts."""

    default_model: str
    # A plan run continues as new after this many steps end in one history segment (or
    # sooner, when Temporal suggests it).
    continue_as_new_every: int = Field(500, ge=1)
    # The most an actor prompt may hold, in estimated tokens (see longrun.context).
    prompt_token_budget: int = Field(12_000, ge=1000)
    # How long a model call keeps retrying transient failures (an outage, a restart)
    # before it fails, when its step sets no retry policy of its own.
    model_retry_window_s: float = Field(1800.0, gt=0)
    prices: dict[str, Price] = Field(default_factory=dict)
    policy: Policy = Field(default_factory=Policy)
    webhooks: list[str] = Field(default_factory=list)
    # Defaults for steps that set no approval deadline of their own.
    approval_timeout_s: float | None = None
    on_timeout: OnTimeout = "remind"
    escalate_to: Role = "admin"
    # Child runs one run may start (run steps, for_each items, delegations).
    max_child_runs: int = Field(100, ge=0)


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


class Compensation(BaseModel):
    """What undoing a run's completed steps achieved."""

    compensated: list[str] = Field(default_factory=list)
    not_undone: list[str] = Field(default_factory=list)


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
    run_id: str | None = Field(None, description="the child run that made the call, if not this")


class ChildRun(BaseModel):
    """A child run as its parent shows it: where it stands, what it may use (carved out of
    the parent's budget) and what waits for a person in it."""

    run_id: str
    step_id: str
    item: int | None = Field(None, description="its item's index, in a for_each")
    status: RunStatusName = "running"
    pause_reason: PauseReason | None = None
    budget: Budget = Field(default_factory=Budget, description="what it may use")
    wants: Limits = Field(default_factory=Limits, description="what its step asked for")
    usage: Usage = Field(default_factory=Usage, description="what it reported it used")
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    seq: int = Field(0, description="the latest report taken")


class ChildReport(BaseModel):
    """What a child run tells its parent (signal `child`): sent when its status or pending
    approvals change, and as it ends, with what it used and what compensation would undo
    (for the parent to undo when it compensates). The latest `seq` wins."""

    run_id: str
    seq: int
    status: RunStatusName
    pause_reason: PauseReason | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    final: bool = False
    undo: list[CompletedCall] = Field(default_factory=list)


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
    approvals_archived: list[str] = Field(
        default_factory=list,
        description="ids of decided approvals a long run no longer lists (the audit has them)",
    )
    usage: Usage = Field(default_factory=Usage)
    labels: dict[str, str] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None
    budget: BudgetView = Field(default_factory=BudgetView)
    pause_reason: PauseReason | None = None
    pause_detail: str | None = Field(
        None,
        description="for model_unavailable: the model's last error (resume to ask again); "
        "for stalled: what the watchdog saw (decide the `stalled` approval)",
    )
    exhausted: list[str] = Field(default_factory=list)
    # Goal-only runs:
    phase: Phase | None = None
    plan: list[PlanItem] = Field(default_factory=list)
    acceptance: list[CriterionState] = Field(default_factory=list)
    replans: int = 0
    premature_completions: int = 0
    figures: RunFigures = Field(
        default_factory=RunFigures, description="what the run met and who stepped in"
    )
    parent_run_id: str | None = Field(None, description="the run whose step started this one")
    version: str | None = Field(
        None, description="the worker version (build id) the run is on; none if unversioned"
    )
    children: list[ChildRun] = Field(
        default_factory=list, description="the child runs this run's steps started"
    )


class StepQuery(BaseModel):
    """Input of the workflow's `step` query."""

    step_id: str


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
    # Earlier audit entries and decided approvals, stored when the carry grew too big.
    archived: list[str] = Field(default_factory=list)
    approvals_archived: list[str] = Field(default_factory=list)  # their ids
    # The event log: the latest events, the next id, artifacts holding the earlier ones.
    events: list[RunEvent] = Field(default_factory=list)
    next_event_id: int = 1
    events_archived: list[str] = Field(default_factory=list)
    figures: RunFigures = Field(default_factory=RunFigures)
    outcomes: list[RequestOutcome] = Field(default_factory=list)  # of the latest requests
    deferred_decisions: list[ApprovalDecision] = Field(default_factory=list)
    children: list[ChildRun] = Field(default_factory=list)
    # A tool call of the run has completed in its workspace, so the workspace must be there.
    workspace_used: bool = False
    reports_sent: int = 0  # a child run's reports to its parent so far
    # The worker version the handing-over segment ran on (None: an unversioned worker); the
    # next segment's `run.continued` event says whether the run moved. Carries from before
    # had their `run.continued` said by the segment handing over.
    version: str | None = None
    say_continued: bool = False


class Reuse(BaseModel):
    """What a retry takes over from the run it retries: the steps that run completed (or
    skipped), which the new run counts as done with their recorded outputs (for a goal-only
    run, its agent's plan up to the step it goes on from); and, for a fork that compensates
    first, that run's calls to undo before anything runs."""

    run_id: str
    steps: dict[str, StepState]
    undo: list[CompletedCall] = Field(default_factory=list)
    # A goal-only run's: where its agent goes on, the plan steps before taken over as done.
    agent: AgentCarry | None = None
    # A counterfactual fork's: the run's tool calls, answered from their recorded outputs.
    tools: list[RecordedCall] = Field(default_factory=list)


class RunInput(BaseModel):
    """Input of the run workflow: a validated, normalised plan and its context."""

    run_id: str
    goal: str
    plan: Plan | None = None
    agent: AgentSpec | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    config: RunConfig
    owner: str = "local"
    # The secrets the run may use ("*": all): its owner's grant when it started, at most its
    # parent's. None: a run started before runs carried grants, which may use those its
    # plan and checks named (longrun.grants).
    secrets: list[str] | None = None
    # The tenant of the key that started it (its children's too); None: no tenant.
    tenant: str | None = None
    budget: Budget = Field(default_factory=Budget)
    on_failure: Literal["stop", "compensate"] = "stop"
    carry: RunCarry | None = None
    reuse: Reuse | None = None
    # The MCP tools the run may call (its plan's steps or its agent's tools).
    mcp_tools: list[McpTool] = Field(default_factory=list)
    # A child run: the run whose step started it, which it reports to, and how many
    # levels of child runs it is below the run a person started.
    parent_run_id: str | None = None
    depth: int = 0


class RunResult(BaseModel):
    """What a completed run returns: the outputs of its final steps."""

    outputs: dict[str, Any] = Field(default_factory=dict)


class KeepRequest(BaseModel):
    """Input of `artifacts.keep`: outputs to store whole, by name."""

    run_id: str
    outputs: dict[str, Any]
