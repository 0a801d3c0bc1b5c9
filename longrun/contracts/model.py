"""The model, verify and context activities' boundary: `model.complete`, `model.plan`,
`model.act`, `verify.step` and `verify.acceptance`, and `context.compact`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from longrun.contracts.agent import AgentPlan, Brief
from longrun.contracts.plans import ToolCheck
from longrun.contracts.tools import SecretGrant


class ModelRequest(BaseModel):
    """Input of the `model.complete` activity."""

    run_id: str
    step_id: str
    model: str
    prompt: str
    system: str | None = None
    json_schema: dict[str, Any] | None = None
    max_tokens: int | None = None  # the settings' default for model steps when unset
    previous_error: str | None = None  # why the last answer was not the JSON asked for


class ModelResult(BaseModel):
    """Output of the `model.complete` activity; a long text comes as an artifact reference."""

    text: str | dict[str, Any]
    json_value: Any = None
    json_error: str | None = None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    attempt: int = 1
    recorded: str | None = None  # the artifact with its calls, when the worker records
    recovering_s: float = 0.0  # as ModelUsage.recovering_s


class ModelUsage(BaseModel):
    """Tokens one model call consumed."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    # Seconds the call waited before the attempt that answered began: attempts lost to a
    # worker that died or a server that could not be reached, their backoff, and the wait
    # for a worker. Not the model's work: a run's time budget does not count it.
    recovering_s: float = 0.0

    def __add__(self, other: ModelUsage) -> ModelUsage:
        """Two calls' tokens, as one turn of the model spent them."""
        return ModelUsage(
            model=self.model,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            recovering_s=self.recovering_s + other.recovering_s,
        )


class PlanRequest(BaseModel):
    """Input of `model.plan`: ask for a plan (or a replan) as structured output."""

    run_id: str
    model: str
    goal: str
    criteria: list[str]
    tools: list[str]
    context: str | None = None
    previous_error: str | None = None
    max_steps: int | None = None  # the most steps the plan may have (the turns left)
    strategy: Literal["auto", "plan", "direct"] = "plan"  # the run's (AgentSpec.strategy)
    time_left_s: float | None = None  # of the run's time budget, when it has one


class PlanAttempt(BaseModel):
    """Output of `model.plan`: a valid plan, or why the answer was not one."""

    plan: AgentPlan | None = None
    repairs: list[str] = Field(default_factory=list)  # what was made right in the answer
    # `auto` only: the model plans badly on this worker; the run goes direct, unasked.
    direct: bool = False
    error: str | None = None
    usage: ModelUsage
    attempt: int = 1
    recorded: str | None = None  # the artifact with its calls, when the worker records


class ToolCallRequest(BaseModel):
    """A tool call the model asked for; `arguments` is the JSON text it sent."""

    id: str
    name: str
    arguments: str


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
    time_left_s: float | None = None  # of the run's time budget, when it has one


class ActResult(BaseModel):
    """Output of `model.act`: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: ModelUsage
    attempt: int = 1
    trimmed: list[str] = Field(default_factory=list, description="what the budget left out")
    recorded: str | None = None  # the artifact with its calls, when the worker records


class Verdict(BaseModel):
    """Whether a check passed, with the evidence a person can read."""

    passed: bool
    evidence: str
    usage: ModelUsage | None = None
    recorded: str | None = None  # the artifact with its calls, when the worker records


class Note(BaseModel):
    """One entry of a run's journal."""

    kind: str
    step: str
    text: str


class CheckRequest(BaseModel):
    """Input of `verify.step` and `verify.acceptance`."""

    run_id: str
    check_id: str
    goal: str
    tool_check: ToolCheck | None = None
    statement: str | None = None
    observations: str = ""
    judge_model: str
    grant: SecretGrant = Field(default_factory=SecretGrant)
    # What the step's tools returned: a judge's pass must quote one of them, or a file of
    # the workspace. None given, a pass needs no quote.
    outputs: list[str] = Field(default_factory=list)
    # Kept in the run's journal with the verdict: the step's summary when it passes, the
    # failed verification when it does not.
    journal: Note | None = None


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
    recorded: str | None = None  # the artifact with its calls, when the worker records
