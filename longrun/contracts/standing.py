"""Standing approvals: what an approver grants ahead of time (this tool, with arguments
matching so, for this run or runs with a label, for so long or so many uses), the grants
workflow's requests and answers, and what a run asks it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from longrun.contracts.common import LABEL_KEY_PATTERN, RUN_ID_PATTERN, _Strict

GRANT_ID_PATTERN = r"^grant-[0-9a-f]{16}$"
MAX_GRANT_HOURS = 24 * 365
MAX_GRANT_USES = 100_000


class Equals(_Strict):
    """An argument that must be exactly this value."""

    equals: Any


class Prefix(_Strict):
    """An argument that must be a string starting with this (end a URL's with `/`)."""

    prefix: str = Field(min_length=1, max_length=2000)


# What one argument of a granted call must be; `{"prefix": …}` or `{"equals": …}`.
ArgMatch = Prefix | Equals


class GrantTerms(_Strict):
    """What a grant given with a decision covers besides its call's tool: the arguments
    (by name; an argument not named may be anything), where, and for how long."""

    args: dict[str, ArgMatch] = Field(default_factory=dict, max_length=50)
    label: str | None = Field(
        None,
        pattern=LABEL_KEY_PATTERN.removesuffix("$") + r":[A-Za-z0-9_.-]{1,63}$",
        description="runs with this label (key:value) instead of this run",
    )
    hours: float | None = Field(None, gt=0, le=MAX_GRANT_HOURS)
    uses: int | None = Field(None, ge=1, le=MAX_GRANT_USES)

    @model_validator(mode="after")
    def _bounded(self) -> GrantTerms:
        if self.hours is None and self.uses is None:
            raise ValueError("a grant needs an end: `hours`, `uses` or both")
        return self


class GrantSpec(GrantTerms):
    """Body of `POST /v1/approvals/grants`: calls of `tool` that may run without asking, in
    one run (`run_id`) or in runs with a label (`label`)."""

    tool: str = Field(min_length=1, max_length=200)
    run_id: str | None = Field(None, pattern=RUN_ID_PATTERN)

    @model_validator(mode="after")
    def _one_scope(self) -> GrantSpec:
        if (self.run_id is None) == (self.label is None):
            raise ValueError("a grant covers exactly one of `run_id` or `label`")
        return self


class Grant(GrantSpec):
    """A standing approval as the grants workflow keeps it."""

    grant_id: str = Field(pattern=GRANT_ID_PATTERN)
    granted_by: str
    granted_at: datetime | None = None  # dated by the grants workflow's clock
    tenant: str | None = None
    # Four eyes were on when it was given: it never covers a run of the one who gave it.
    four_eyes: bool = False
    expires_at: datetime | None = None
    uses_left: int | None = None
    used: int = 0
    revoked_at: datetime | None = None
    revoked_by: str | None = None


class GrantUse(BaseModel):
    """A run's question: may this call run under a standing approval?"""

    run_id: str
    tool: str
    args: dict[str, Any]
    labels: dict[str, str] = Field(default_factory=dict)
    tenant: str | None = None
    owner: str = "local"


class GrantRequest(BaseModel):
    """Signal payload to the grants workflow: add or revoke a grant (from the API, which
    reads the outcome back), or use one (from a run, which is answered by a signal)."""

    request_id: str = Field(min_length=1, max_length=100)
    action: Literal["add", "revoke", "use"]
    grant: Grant | None = None
    grant_id: str | None = None
    actor: str = "local"
    tenant: str | None = None
    use: GrantUse | None = None
    reply_to: str | None = Field(None, description="the run to answer a use by signal")


class GrantOutcome(BaseModel):
    """What became of a request: taken or not (and why), the grant it used or made."""

    request_id: str
    taken: bool
    grant_id: str | None = None
    message: str | None = None


class GrantList(BaseModel):
    """The grants the workflow keeps: live ones and those ended lately."""

    grants: list[Grant]


class GrantsInput(BaseModel):
    """What one segment of the grants workflow starts with."""

    grants: list[Grant] = Field(default_factory=list)
    outcomes: list[GrantOutcome] = Field(default_factory=list)
