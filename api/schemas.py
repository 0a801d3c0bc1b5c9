"""Response and request bodies that only the REST API uses."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from longrun.contracts import Decision, RunState, RunStatusName
from longrun.contracts.standing import GrantTerms
from longrun.digests import DIGEST_PATTERN
from longrun.versions import VersionStatus


class Links(BaseModel):
    """Where to look at a run."""

    self: str
    temporal_ui: str


class RunCreated(BaseModel):
    """Answer to `POST /v1/runs`."""

    run_id: str
    status: RunStatusName
    links: Links


class RetryingCall(BaseModel):
    """A call of a live run that has failed at least once and is being tried again."""

    call: str = Field(description="what the call is for, e.g. 'step fetch: tool http'")
    attempt: int = Field(description="the attempt now running or next to run")
    last_error: str | None = None
    next_attempt_at: datetime | None = None


class RunDetail(RunState):
    """A run's full status."""

    links: Links
    retrying: list[RetryingCall] = Field(
        default_factory=list,
        description="calls retrying now; their steps show the attempt and last error too",
    )
    schedule_id: str | None = Field(None, description="the schedule that started it, if any")


class RunSummary(BaseModel):
    """One run in a listing."""

    run_id: str
    goal: str
    status: RunStatusName
    labels: dict[str, str]
    started_at: datetime | None
    closed_at: datetime | None
    links: Links
    schedule_id: str | None = Field(None, description="the schedule that started it, if any")
    version: str | None = Field(
        None, description="the worker version (build id) it is on, or ended on"
    )


class RunList(BaseModel):
    """A page of runs, newest first."""

    runs: list[RunSummary]
    next_page_token: str | None = None


class DecisionRequest(BaseModel):
    """Body of `POST /v1/runs/{run_id}/approvals/{approval_id}`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Decision
    comment: str | None = Field(None, max_length=4000)
    digest: str | None = Field(
        None,
        pattern=DIGEST_PATTERN,
        description="the approval's digest as you saw it: the decision is taken only if the "
        "run still asks for that exact call (409 if not)",
    )
    grant: GrantTerms | None = Field(
        None,
        description="with approve: let later calls of the same tool matching these terms run "
        "without asking (a standing approval, as POST /v1/approvals/grants makes)",
    )


class CancelRequest(BaseModel):
    """Optional body of cancel: undo completed reversible steps, newest first."""

    model_config = ConfigDict(extra="forbid", strict=True)

    compensate: bool = False


class ReasonRequest(BaseModel):
    """Optional body of pause and resume: why, for the audit trail."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str | None = Field(None, max_length=2000)


class Accepted(BaseModel):
    """A request was accepted and handed to the run."""

    run_id: str
    detail: str


class Problem(BaseModel):
    """Why a request was refused, in words (422s list each problem with its field)."""

    detail: str


_ANSWERS = {
    401: "no valid API key (when keys are configured)",
    403: "the caller's role, or the four-eyes rule, does not allow it",
    404: "no such run (or approval, step or artifact of it)",
    409: "the run's state does not allow it: ended, already decided, not paused, reused key",
    503: "Temporal, or a worker to answer for the run, did not answer in time",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI descriptions of error answers a route gives besides 422."""
    return {code: {"model": Problem, "description": _ANSWERS[code]} for code in codes}


class WorkerVersion(BaseModel):
    """A version of the workers' deployment (longrun/versions.py)."""

    build_id: str
    status: VersionStatus = Field(
        description="Temporal's: current takes new runs; draining still has runs on it"
    )
    open_runs: int = Field(description="runs on it now; at 0 its workers may stop")
    workers: int = Field(description="workers polling as this version")
    stranded: bool = Field(description="runs are on it and no worker serves them")


class ProcessTools(BaseModel):
    """How process tools (shell, python, commands in checks) run."""

    mode: Literal["bwrap", "unconfined", "unavailable"] = Field(
        description="bwrap: confined by bubblewrap; unconfined: as the worker's user (an "
        "operator's choice); unavailable: refused, see detail"
    )
    detail: str
    bounds: dict[str, str] = Field(
        default_factory=dict,
        description="how each bound of a step is enforced here: memory, processes, tmp, file, "
        "workspace",
    )
