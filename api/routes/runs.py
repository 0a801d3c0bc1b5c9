"""Runs: submit, list, and read a run's status, steps and audit."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api import access
from api.access import Holder, Reader, Submitter
from api.admission import (
    IDEMPOTENCY_NAMESPACE,
    fresh_id,
    request_digest,
    run_input,
    start_run,
)
from api.archive import archived
from api.attempts import show_retries
from api.auth import Principal
from api.deps import Ended, Gateway, McpHubDep, PolicyDep, SettingsDep, TemporalClient
from api.pages import unwrap_token, wrap_token
from api.reading import (
    RUN_ID,
    STATUS_FILTERS,
    WORKFLOW_TYPE,
    LabelFilter,
    ListedStatus,
    as_detail,
    describe_run,
    fail_validation,
    open_state,
    query_run,
    query_state,
    run_links,
    run_status,
    run_status_of,
    stored_part,
)
from api.schemas import (
    RunCreated,
    RunDetail,
    RunList,
    RunSummary,
    answers,
)
from longrun import wire
from longrun.attributes import (
    RETRY_OF_ATTRIBUTE,
    STATUS_ATTRIBUTE,
)
from longrun.contracts import (
    FINAL_RUN_STATUSES,
    AuditEntry,
    AuditTrail,
    RunRequest,
    RunStatusName,
    StepQuery,
    StepState,
)
from longrun.settings import BUILD_ID_PATTERN
from longrun.temporal import latest_execution
from longrun.versions import VERSION_KEY, build_of, version_clause

# A label filter: a label key and value as runs carry them, joined by a colon.

log = logging.getLogger("longrun.api")
router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))

MAX_RETRIES_LISTED = 100  # of one run, in its audit


@router.post("", status_code=202, responses=answers(409))
async def create_run(
    body: RunRequest,
    gateway: Gateway,
    settings: SettingsDep,
    policy: PolicyDep,
    hub: McpHubDep,
    caller: Submitter,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
) -> RunCreated:
    """Start a run of an explicit plan, or of a goal the agent plans itself; a repeated
    `Idempotency-Key` returns the same run."""
    inp = await run_input(body, settings, policy, hub, caller)  # 422 while Temporal is down
    client = await gateway.client()
    fingerprint = request_digest(body)
    run_id = fresh_id("run", IDEMPOTENCY_NAMESPACE, caller.name, idempotency_key)
    try:
        await start_run(
            client,
            settings,
            inp.model_copy(update={"run_id": run_id, **caller.as_owner()}),
            request_sha256=fingerprint,
        )
        status: RunStatusName = "running"
    except WorkflowAlreadyStartedError:
        _, desc = await describe_run(client, run_id)
        if await desc.memo_value("request_sha256", None) != fingerprint:
            raise HTTPException(
                409, "this Idempotency-Key was already used for a different request"
            ) from None
        status = run_status_of(desc)
    return RunCreated(run_id=run_id, status=status, links=run_links(settings, run_id))


@router.get("")
async def list_runs(
    client: TemporalClient,
    settings: SettingsDep,
    caller: Reader,
    status: Annotated[
        ListedStatus | None, Query(description="a run status, or open: any not ended")
    ] = None,
    label: Annotated[
        list[LabelFilter] | None, Query(max_length=20, description="key:value, e.g. team:ops")
    ] = None,
    version: Annotated[
        str | None,
        Query(pattern=BUILD_ID_PATTERN, description="runs on this worker version (build id)"),
    ] = None,
    page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> RunList:
    """List runs, newest first: live runs by start time, then ended runs by end time.
    `?status=open&version=…` lists the runs still on a version: when none are left, its
    workers may stop."""
    # No ORDER BY: SQL visibility (the dev server, PostgreSQL) rejects it, and its native order
    # is already newest first, live runs before ended ones.
    clauses = [f"WorkflowType = '{WORKFLOW_TYPE}'"]
    if status is not None:
        clauses.append(f"({STATUS_FILTERS[status]})")
    for item in label or []:  # key:value, each side checked against its pattern
        clauses.append(f"LongrunLabels = '{item}'")
    if version is not None:
        clauses.append(version_clause(settings, version))
    query = access.with_visible(caller, " AND ".join(clauses))
    token: bytes | None = None
    if page_token:
        token = unwrap_token(query, page_token)
        if token is None:
            raise fail_validation(
                ("query", "page_token"), "not a page token of this listing (same filters)"
            )
    listing = client.list_workflows(query, page_size=page_size, next_page_token=token)
    try:
        await listing.fetch_next_page()
    except RPCError as exc:
        refused = (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.INTERNAL, RPCStatusCode.UNKNOWN)
        if token is not None and exc.status in refused:
            raise fail_validation(("query", "page_token"), "not a valid page token") from None
        raise
    runs = []
    for wf in listing.current_page or []:
        runs.append(
            RunSummary(
                run_id=wf.id,
                goal=await wf.memo_value("goal", ""),
                status=run_status(wf.status, wf.typed_search_attributes.get(STATUS_ATTRIBUTE)),
                labels=await wf.memo_value("labels", {}),
                started_at=wf.start_time,
                closed_at=wf.close_time,
                links=run_links(settings, wf.id),
                schedule_id=await wf.memo_value("schedule_id", None),
                version=build_of(wf.typed_search_attributes.get(VERSION_KEY)),
            )
        )
    next_token = listing.next_page_token
    return RunList(
        runs=runs,
        next_page_token=wrap_token(query, next_token) if next_token else None,
    )


@router.get("/{run_id}", response_model=RunDetail, responses=answers(404))
async def get_run(
    run_id: str, client: TemporalClient, settings: SettingsDep, ended: Ended, caller: Reader
) -> Response:
    """A run's status, steps, approvals, usage and result: of a live run from a workflow
    query, of an ended one as it stored it when it ended (no replay)."""
    if not RUN_ID.match(run_id):
        raise HTTPException(404, f"no run '{run_id}'")
    if run_id in ended:
        # Still the execution whose answer was kept (a reset starts another)?
        execution = await latest_execution(client, run_id)
        kept = None if execution is None else ended.body(run_id, execution)
        if kept is not None:
            access.check(caller, "read", Holder(*kept[1]), f"run '{run_id}'")
            return Response(kept[0], media_type="application/json")
        ended.forget(run_id)  # gone, or another execution of it: read afresh
    queried: RunDetail | BaseException | None
    known = access.known_run(caller, "read", run_id)
    if known is not None:
        # A run this process knows, at rest (waiting for a person, or paused), answers from
        # its query alone: nothing of it runs, so nothing retries, and what its description
        # would add never changes.
        try:
            queried = await open_state(client, run_id)
        except Exception as exc:  # as gathered below: said only if the run is live
            queried = exc
        if isinstance(queried, RunDetail) and at_rest(queried):
            queried.links = run_links(settings, run_id)
            queried.schedule_id = known.schedule_id
            return Response(queried.model_dump_json().encode(), media_type="application/json")
        handle, desc, known = await access.described_run(client, caller, "read", run_id)
    else:
        # Both at once, so a live run costs one round trip; a closed run refuses the query
        # at once instead of replaying its history.
        described, queried = await asyncio.gather(
            access.described_run(client, caller, "read", run_id),
            open_state(client, run_id),
            return_exceptions=True,
        )
        if isinstance(described, BaseException):
            raise described
        handle, desc, known = described
    final = run_status_of(desc)
    stored = await stored_part(settings, run_id, desc, "status")
    detail = None if stored is None else as_detail(stored)
    if detail is None and isinstance(queried, RunDetail):
        detail = queried  # open: live, or storing its final status
    if detail is None:
        if isinstance(queried, BaseException) and final not in FINAL_RUN_STATUSES:
            raise queried
        # Closed without a stored status (from before, ended from outside), or closed
        # between the two calls: the query replays it.
        detail = await query_state(handle)
    detail.links = run_links(settings, run_id)
    detail.schedule_id = known.schedule_id
    if final in FINAL_RUN_STATUSES and detail.status != final:
        # Ended from outside the workflow (terminated, timed out): Temporal has the last word.
        detail.status = final
        detail.error = (
            detail.error or f"run ended by Temporal: {desc.status.name if desc.status else '?'}"
        )
    elif final not in FINAL_RUN_STATUSES:
        show_retries(detail, desc)
    # Serialized once here: the detail is validated already, and a long run's status is
    # big enough that FastAPI's second validation and encoding would double the cost.
    body = detail.model_dump_json().encode()
    if desc.close_time is not None:
        holder = known.holder
        ended.keep(run_id, desc.run_id or "", body, (holder.owner, holder.tenant))
    return Response(body, media_type="application/json")


def at_rest(detail: RunDetail) -> bool:
    """Whether nothing of a live run is under way: it waits for a person or is paused,
    and no step runs (so no call of it is in flight, or retried)."""
    waits = detail.status in ("waiting_approval", "paused")
    return waits and not any(step.status == "running" for step in detail.steps)


@router.get("/{run_id}/steps/{step_id}", responses=answers(404))
async def get_step(
    run_id: str, step_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> StepState:
    """One step in full, its whole output included (status previews big outputs)."""
    handle, desc = await access.run_for(client, caller, "read", run_id)
    steps = await stored_part(settings, run_id, desc, "steps")
    state: StepState | None
    if steps is not None:
        state = StepState.model_validate(steps[step_id]) if step_id in steps else None
    else:
        state = await query_run(handle, wire.STEP, StepState, StepQuery(step_id=step_id))
    if state is None:
        raise HTTPException(404, f"run '{run_id}' has no step '{step_id}' (or no longer keeps it)")
    return state


@router.get("/{run_id}/audit", responses=answers(404))
async def get_audit(
    run_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> AuditTrail:
    """Every decision about the run, oldest first: who, when, what and why."""
    handle, desc = await access.run_for(client, caller, "read", run_id)
    stored = await stored_part(settings, run_id, desc, "audit")
    trail: AuditTrail = (
        AuditTrail.model_validate(stored)
        if stored is not None
        else await query_run(handle, wire.AUDIT, AuditTrail)
    )
    if trail.archived:  # a long run stored its earlier entries away
        earlier = await run_in_threadpool(archived, settings, run_id, trail.archived, "audit")
        trail.entries = [AuditEntry.model_validate(e) for e in earlier] + trail.entries
    trail.entries += await _started_again(client, caller, run_id)
    return trail


async def _started_again(client: Client, caller: Principal, run_id: str) -> list[AuditEntry]:
    """The retries and forks of a run, as its audit names them: the run is closed by then,
    so they are found by the attribute each sets at its start, not in its history."""
    query = access.with_visible(caller, f"{RETRY_OF_ATTRIBUTE.name} = '{run_id}'")
    entries = []
    try:
        async for wf in client.list_workflows(query, limit=MAX_RETRIES_LISTED):
            fork = await wf.memo_value("fork_of", None) is not None
            entries.append(
                AuditEntry(
                    at=wf.start_time,
                    actor=await wf.memo_value("owner", "local"),
                    action="forked" if fork else "retried",
                    detail=f"as {wf.id}",
                )
            )
    except RPCError as exc:  # a namespace without the attribute: the new runs still say it
        log.warning("retries of %s not listed: %s", run_id, exc)
    return sorted(entries, key=lambda e: e.at)
