"""What a caller writes in `POST /v1/runs` and the run workflow carries: an explicit plan's
steps, a goal-only run's acceptance criteria and their checks, and models per role.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from longrun.contracts.budget import Limits
from longrun.contracts.common import Role, StepId, StepKind, _Strict


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
    max_tokens: int | None = Field(
        None, ge=16, le=1_000_000, description="the most tokens the answer may take"
    )


class WaitSpec(_Strict):
    """A durable timer: the run sleeps in Temporal, not in a process."""

    seconds: float = Field(ge=0, le=366 * 24 * 3600)


class ApprovalSpec(_Strict):
    """A gate with no action: a person must approve before dependents run."""

    message: str = Field(min_length=1, max_length=4000)


class RunSpec(_Strict):
    """A child run: its own plan, or a goal its agent plans, with a budget carved out of the
    parent's (the parent's remaining limits bound it)."""

    goal: str = Field(min_length=1, max_length=4000)
    plan: Plan | None = None
    acceptance: list[Criterion] | None = Field(None, max_length=50)
    tools: list[str] | None = Field(None, max_length=100)
    budget: Limits | None = Field(
        None, description="the most the child may use; unset limits: what the parent has left"
    )


class ForEachSpec(_Strict):
    """One child run or tool call per item of a list; `{{item}}` (or `{{item.<field>}}`)
    in the child's goal and plan, or in the tool's args, stands for the item."""

    items: list[Any] | str = Field(
        description="a list, or one reference to an earlier step's list output "
        "({{steps.<id>.output.<field>}})"
    )
    max_parallel: int = Field(1, ge=1, le=50)
    run: RunSpec | None = None
    tool: str | None = Field(None, min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_action(self) -> ForEachSpec:
        if (self.run is None) == (self.tool is None):
            raise ValueError("for_each needs exactly one of run, tool")
        if self.args and self.tool is None:
            raise ValueError("'args' only applies to a for_each over a tool")
        if isinstance(self.items, list) and len(self.items) > MAX_ITEMS:
            raise ValueError(f"at most {MAX_ITEMS} items")
        return self


MAX_ITEMS = 1000
# What an agent run names in `tools` to let its agent hand a sub-goal to a child run.
DELEGATE = "delegate"
OnTimeout = Literal["reject", "skip", "fail", "remind", "escalate"]
APPROVAL_TIMEOUT_MAX_S = 365 * 24 * 3600


class Step(_Strict):
    """One step of a plan: exactly one of `tool`, `model`, `wait`, `approval`, `run` (a
    child run) or `for_each`."""

    id: StepId
    tool: str | None = Field(None, min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    model: ModelSpec | None = None
    wait: WaitSpec | None = None
    approval: ApprovalSpec | None = None
    run: RunSpec | None = None
    for_each: ForEachSpec | None = None
    depends_on: list[StepId] | None = Field(None, max_length=1000)
    requires_approval: bool | None = None
    on_reject: Literal["fail", "skip", "compensate"] = "fail"
    retry: RetrySpec | None = None
    timeout_s: float | None = Field(None, gt=0, le=24 * 3600)
    approval_timeout_s: float | None = Field(
        None,
        gt=0,
        le=APPROVAL_TIMEOUT_MAX_S,
        description="how long the step's approval may wait for a person (default: the "
        "server's LONGRUN_APPROVAL_TIMEOUT_S, or forever)",
    )
    on_timeout: OnTimeout | None = Field(
        None,
        description="when that time is up: reject (then on_reject applies), skip, fail, "
        "remind (webhooks again, and wait as long again), or escalate (from then on only "
        "`escalate_to` may decide it); default: the server's",
    )
    escalate_to: Role | None = Field(
        None, description="with on_timeout escalate: the role that decides it then (admin)"
    )
    on_failure: Literal["fail", "skip", "compensate"] | None = Field(
        None,
        description="run and for_each steps: when the child run (or an item) fails, fail the "
        "run (default), skip it (a for_each goes on with the other items), or fail the run "
        "and undo what it did",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        kinds = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(
                f"a step needs exactly one of {', '.join(STEP_KINDS)} (found: {found})"
            )
        if self.args and self.tool is None:
            raise ValueError("'args' only applies to tool steps")
        if self.on_failure is not None and self.run is None and self.for_each is None:
            raise ValueError("'on_failure' only applies to run and for_each steps")
        return self

    @property
    def kind(self) -> StepKind:
        """Which kind of step this is."""
        return next(k for k in STEP_KINDS if getattr(self, k) is not None)


STEP_KINDS: tuple[StepKind, ...] = ("tool", "model", "wait", "approval", "run", "for_each")


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

    # Room for a whole goal (4,000) and the words of the default criterion around it.
    judge: str = Field(min_length=1, max_length=4100)


class Criterion(_Strict):
    """One acceptance criterion of a goal-only run."""

    id: StepId
    check: ToolCheck | JudgeCheck


class RoleModels(_Strict):
    """Models per role of a goal-only run; unset roles use the run's `model`."""

    planner: str | None = Field(None, min_length=1, max_length=200)
    actor: str | None = Field(None, min_length=1, max_length=200)
    judge: str | None = Field(None, min_length=1, max_length=200)


# A child run's plan holds steps that may start child runs: built once every name exists.
for _model in (RunSpec, ForEachSpec, Step, Plan):
    _model.model_rebuild()
