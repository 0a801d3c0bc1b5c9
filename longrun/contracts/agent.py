"""A goal-only run's agent: its spec in the workflow input, the planner's plan as validated,
where model-made steps and acceptance criteria stand, the loop's hand-over to the next history
segment, and the brief an actor's prompt is assembled from.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator

from longrun.contracts.common import StepId, StepStatusName, _Strict
from longrun.contracts.plans import Criterion, ToolCheck


class Watchdog(_Strict):
    """When a goal-only run counts as stalled: it then pauses (`pause_reason: stalled`) with
    what was seen, for a person to guide it on or reject; left alone it fails."""

    repeats: int = Field(
        3,
        ge=2,
        le=100,
        description="the same tool call (name and arguments) this many times in one step, "
        "or the same tool output this many times in a row",
    )
    invalid_answers: int = Field(
        3, ge=1, le=100, description="model answers in a row that call no allowed tool rightly"
    )
    turns_without_progress: int = Field(
        30, ge=1, le=10_000, description="model turns with no plan step verified"
    )
    phase_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="of the time budget (max_duration_s) that one phase may take",
    )
    decide_within_s: float = Field(
        24 * 3600,
        gt=0,
        le=365 * 24 * 3600,
        description="how long a stalled run waits for a person before it fails: stalled",
    )
    restarts: int = Field(
        2,
        ge=0,
        le=20,
        description="times a step that goes round in circles is set aside and started "
        "afresh (told why) before the run is held for a person",
    )


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
    # Runs started before the watchdog have none (workflows/agent/watchdog.py).
    watchdog: Watchdog = Field(default_factory=Watchdog)
    # LONGRUN_AGENT_STRATEGY when the run started; runs started before it planned.
    strategy: Literal["auto", "plan", "direct"] = "plan"


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
    restarts: int = 0  # times the step was set aside, stalled, and started afresh


class CriterionState(BaseModel):
    """An acceptance criterion and its latest result."""

    id: str
    kind: Literal["tool", "judge"]
    status: Literal["pending", "passed", "failed"] = "pending"
    evidence: str | None = None

    @classmethod
    def pending(cls, criterion: Criterion) -> CriterionState:
        """A criterion not checked yet."""
        kind: Literal["tool", "judge"] = (
            "tool" if isinstance(criterion.check, ToolCheck) else "judge"
        )
        return cls(id=criterion.id, kind=kind)


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
    effects: int = 0  # tool calls that changed something (not read-only), completed
    rejected: int = 0  # tool calls a person rejected
    rejected_calls: list[str] = Field(default_factory=list)  # the latest of them, as keys
    progress: list[str] = Field(default_factory=list)
    summary: str = ""
    turns_at_progress: int = 0  # `turns` when a plan step was last verified
    phase_seconds: dict[str, float] = Field(default_factory=dict)  # time spent in each phase


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


class Delegation(_Strict):
    """What an agent asks for with the `delegate` tool: a sub-goal, run as a child run,
    and what a judge must confirm of it."""

    goal: str = Field(min_length=1, max_length=4000)
    acceptance: list[Annotated[str, StringConstraints(min_length=1, max_length=2000)]] = Field(
        default_factory=list, max_length=10
    )
