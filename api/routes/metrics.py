"""Task metrics: how runs that ended in a window fared, from what each run recorded (its
figures, kept in its memo when it ends), never estimated."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from temporalio.client import WorkflowExecution

from api import access
from api.access import Reader
from api.deps import TemporalClient
from api.reading import WORKFLOW_TYPE, LabelFilter, fail_validation, run_status
from api.schemas import answers
from longrun.contracts import RunFigures

router = APIRouter(prefix="/v1/metrics", tags=["metrics"], responses=answers(401, 403, 503))

ENDED = "ExecutionStatus IN ('Completed', 'Failed', 'Canceled', 'Terminated', 'TimedOut')"
MAX_RUNS = 10_000
DEFAULT_WINDOW = timedelta(days=7)
# A date, optionally with a time and a zone, as ISO 8601 writes it.
ISO_TIME = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$"
FIRST_YEAR, LAST_YEAR = 1970, 9999


class Spread(BaseModel):
    """Mean and percentiles of one figure over the runs that recorded it."""

    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    total: float = 0.0


class Drift(BaseModel):
    """How far runs strayed from doing what they claimed."""

    failed_verifications_per_verified_step: float | None = Field(
        None, description="failed verifications / verifications (goal-only runs)"
    )
    premature_completions_per_run: float | None = None
    replans_per_run: float | None = None
    stalls_per_run: float | None = Field(
        None, description="times the watchdog held a run that made no progress, per run"
    )
    restarts_per_run: float | None = Field(
        None, description="agent steps that went nowhere and were started afresh, per run"
    )


class Metrics(BaseModel):
    """How the runs that ended between `since` and `until` fared."""

    since: datetime
    until: datetime
    runs: dict[str, int] = Field(description="ended runs by outcome, and `live` now")
    success_rate: float | None = Field(None, description="completed / ended")
    recovery_rate: float | None = Field(
        None,
        description="of the runs that met a failure (a retried step, a budget or model "
        "pause, a replan, a stall), the share that still completed",
    )
    met_failure: int = 0
    interventions_per_run: float | None = Field(
        None, description="approvals decided, budget changes and resumes, per ended run"
    )
    interventions: dict[str, int] = Field(default_factory=dict)
    cost_usd: Spread
    duration_s: Spread
    drift: Drift
    runs_without_figures: int = Field(
        0, description="ended runs with no recorded figures (terminated, or from before)"
    )
    truncated: bool = Field(False, description=f"more than {MAX_RUNS} runs ended in the window")


@router.get("")
async def task_metrics(
    client: TemporalClient,
    caller: Reader,
    since: Annotated[
        str | None,
        Query(pattern=ISO_TIME, description="ISO 8601; default: 7 days before `until`"),
    ] = None,
    until: Annotated[
        str | None, Query(pattern=ISO_TIME, description="ISO 8601; default: now")
    ] = None,
    label: Annotated[
        list[LabelFilter] | None, Query(max_length=20, description="key:value, e.g. team:ops")
    ] = None,
) -> Metrics:
    """Success rate, recovery rate, human interventions, cost, duration and drift of the
    runs that ended in a window (by end time)."""
    end = _moment("until", until) if until else datetime.now(UTC)
    start = _moment("since", since) if since else end - DEFAULT_WINDOW
    if start > end:
        raise fail_validation(("query", "since"), "`since` is after `until`")
    labels = [f"LongrunLabels = '{item}'" for item in label or []]
    window = f"CloseTime BETWEEN '{_iso(start)}' AND '{_iso(end)}'"
    query = access.with_visible(
        caller, " AND ".join([f"WorkflowType = '{WORKFLOW_TYPE}'", ENDED, window, *labels])
    )
    ended = [wf async for wf in client.list_workflows(query, limit=MAX_RUNS + 1)]
    live_query = access.with_visible(
        caller,
        " AND ".join([f"WorkflowType = '{WORKFLOW_TYPE}'", "ExecutionStatus = 'Running'", *labels]),
    )
    live = (await client.count_workflows(live_query)).count
    return await _measure(ended[:MAX_RUNS], start, end, live, truncated=len(ended) > MAX_RUNS)


async def _measure(
    runs: list[WorkflowExecution], since: datetime, until: datetime, live: int, *, truncated: bool
) -> Metrics:
    outcomes = {"completed": 0, "failed": 0, "cancelled": 0}
    costs: list[float] = []
    durations: list[float] = []
    met = recovered = unrecorded = 0
    interventions = {"approvals": 0, "guidance": 0, "budget_changes": 0, "resumes": 0}
    verified = failed_verifications = premature = replans = stalls = restarts = 0
    recorded = 0
    for wf in runs:
        outcome = run_status(wf.status, None)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        figures_memo = await wf.memo_value("figures", None)
        if figures_memo is None:
            unrecorded += 1
            continue
        recorded += 1
        figures = RunFigures.model_validate(figures_memo)
        costs.append(float(await wf.memo_value("cost_usd", 0.0)))
        durations.append(float(await wf.memo_value("duration_s", 0.0)))
        if figures.met_failure():
            met += 1
            recovered += outcome == "completed"
        for name in interventions:
            interventions[name] += getattr(figures, name)
        verified += figures.verifications
        failed_verifications += figures.failed_verifications
        premature += figures.premature_completions
        replans += figures.replans
        stalls += figures.stalls
        restarts += figures.restarts
    total = len(runs)
    people = interventions["approvals"] + interventions["budget_changes"] + interventions["resumes"]
    return Metrics(
        since=since,
        until=until,
        runs={**outcomes, "ended": total, "live": live},
        success_rate=_ratio(outcomes["completed"], total),
        recovery_rate=_ratio(recovered, met),
        met_failure=met,
        interventions_per_run=_ratio(people, recorded),
        interventions=interventions,
        cost_usd=_spread(costs),
        duration_s=_spread(durations),
        drift=Drift(
            failed_verifications_per_verified_step=_ratio(failed_verifications, verified),
            premature_completions_per_run=_ratio(premature, recorded),
            replans_per_run=_ratio(replans, recorded),
            stalls_per_run=_ratio(stalls, recorded),
            restarts_per_run=_ratio(restarts, recorded),
        ),
        runs_without_figures=unrecorded,
        truncated=truncated,
    )


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _spread(values: list[float]) -> Spread:
    if not values:
        return Spread()
    ordered = sorted(values)
    return Spread(
        mean=round(sum(ordered) / len(ordered), 6),
        p50=_nearest_rank(ordered, 0.50),
        p95=_nearest_rank(ordered, 0.95),
        total=round(sum(ordered), 6),
    )


def _nearest_rank(ordered: list[float], share: float) -> float:
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _moment(name: str, text: str) -> datetime:
    """An ISO 8601 time from the query (naive: UTC), within what visibility can compare."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise fail_validation(("query", name), f"not an ISO 8601 time: {exc}") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if not FIRST_YEAR <= moment.astimezone(UTC).year <= LAST_YEAR:
        raise fail_validation(("query", name), f"a time between {FIRST_YEAR} and {LAST_YEAR}")
    return moment


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
