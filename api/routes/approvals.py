"""The approvals inbox: what waits for a person, across the runs a caller may see."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from api import access
from api.access import Reader
from api.deps import SettingsDep, TemporalClient
from api.reading import WORKFLOW_TYPE, LabelFilter, query_state, run_links
from api.schemas import Links, answers
from longrun.contracts import ApprovalKind, Role

router = APIRouter(prefix="/v1/approvals", tags=["approvals"], responses=answers(401, 403, 503))

# Runs that may hold an undecided approval: one waits for it, or is paused with it open.
WAITING = (
    f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
    "AND LongrunStatus IN ('waiting_approval', 'paused')"
)
PARALLEL_QUERIES = 8


class InboxItem(BaseModel):
    """One approval a person still has to decide, with its run."""

    run_id: str
    parent_run_id: str | None = Field(None, description="for a child run's approval")
    goal: str
    labels: dict[str, str]
    approval_id: str
    step_id: str
    kind: ApprovalKind
    summary: str = Field(description="what the step will do, and the policy rule that gates it")
    arguments: Any = Field(None, description="exactly what will run once approved")
    digest: str | None = Field(
        None, description="the call's digest: name it in the decision to bind it to this call"
    )
    role: Role = Field("approver", description="who may decide it (escalated: another role)")
    requested_at: datetime
    links: Links


class Inbox(BaseModel):
    """Pending approvals, oldest request first."""

    approvals: list[InboxItem]
    runs_waiting: int = Field(description="runs looked at (waiting for approval, or paused)")
    runs_unanswered: int = Field(0, description="of those, runs no worker answered for")
    truncated: bool = Field(False, description="more runs wait than `max_runs` looked at")


@router.get("")
async def list_approvals(
    client: TemporalClient,
    settings: SettingsDep,
    caller: Reader,
    label: Annotated[
        list[LabelFilter] | None, Query(max_length=20, description="key:value, e.g. team:ops")
    ] = None,
    max_runs: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Inbox:
    """Approvals waiting for a person across runs, oldest first: each with its run, goal,
    what will run and why it is gated. Decide one with
    `POST /v1/runs/{run_id}/approvals/{approval_id}`."""
    query = access.with_visible(
        caller, " AND ".join([WAITING, *(f"LongrunLabels = '{item}'" for item in label or [])])
    )
    listing = client.list_workflows(query, page_size=max_runs, limit=max_runs + 1)
    runs = [wf async for wf in listing]
    truncated = len(runs) > max_runs
    runs = runs[:max_runs]
    gate = asyncio.Semaphore(PARALLEL_QUERIES)

    async def pending(run_id: str) -> list[InboxItem] | None:
        async with gate:
            try:
                state = await query_state(client.get_workflow_handle(run_id))
            except (HTTPException, RPCError, WorkflowQueryFailedError):  # no answer: counted
                return None
        # A child's approvals are listed with the child, which waits too.
        return [
            InboxItem(
                run_id=run_id,
                parent_run_id=state.parent_run_id,
                goal=state.goal,
                labels=state.labels,
                links=run_links(settings, run_id),
                **a.model_dump(exclude={"run_id"}),
            )
            for a in state.pending_approvals
            if a.run_id is None
        ]

    answers_ = await asyncio.gather(*(pending(wf.id) for wf in runs))
    items = [item for found in answers_ if found is not None for item in found]
    items.sort(key=lambda item: (item.requested_at, item.run_id, item.approval_id))
    return Inbox(
        approvals=items,
        runs_waiting=len(runs),
        runs_unanswered=sum(1 for found in answers_ if found is None),
        truncated=truncated,
    )
