"""Schedules: a plan or goal run on a cron expression or at an interval, through Temporal
Schedules. Each run a schedule starts is an ordinary run, linked to its schedule."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from api import access
from api.access import Reader, ScheduleChanger, Submitter
from api.admission import (
    fresh_id,
    run_details,
    run_input,
    run_memo,
    run_search_attributes,
    under_policy,
)
from api.auth import Principal
from api.deps import Gateway, McpHubDep, PolicyDep, SettingsDep, TemporalClient
from api.pages import unwrap_token, wrap_token
from api.reading import fail_validation, run_links
from api.schemas import Links, answers
from longrun import wire
from longrun.contracts import LabelKey, LabelValue, RunInput, RunRequest
from longrun.policy import Policy
from longrun.settings import Settings

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], responses=answers(401, 403))

SCHEDULE_ID_PATTERN = r"^sch-[0-9a-f]{32}$"
SCHEDULE_ID = re.compile(SCHEDULE_ID_PATTERN)
IDEMPOTENCY_NAMESPACE = uuid.UUID("6f1b0f64-8d3c-4b55-9c1e-2f6a3d9b7e21")
Overlap = Literal["skip", "buffer_one", "allow"]
OVERLAP = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow": ScheduleOverlapPolicy.ALLOW_ALL,
}
OVERLAP_NAMES = {policy: name for name, policy in OVERLAP.items()}
RECENT_RUNS = 10
# Temporal keeps a schedule's note under 1 KB: 200 characters of four bytes and the author.
NOTE_CHARS = 200


class ScheduleNote(BaseModel):
    """Optional body of pause and resume: why, kept as the schedule's note."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str | None = Field(None, max_length=NOTE_CHARS)


class ScheduleRequest(BaseModel):
    """A run to start on a cron expression or every so many seconds."""

    model_config = ConfigDict(extra="forbid", strict=True)

    run: RunRequest = Field(description="the run each firing starts, as POST /v1/runs takes it")
    cron: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description='a cron expression in UTC, e.g. "0 6 * * 1-5"; or give every_s',
    )
    every_s: float | None = Field(
        None, ge=1, le=366 * 86400, description="seconds between runs; or give cron"
    )
    overlap: Overlap = Field(
        "skip",
        description="when a run is still going at the next time: skip that time, buffer one "
        "run to start after it, or allow both",
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=20)
    paused: bool = Field(False, description="create it paused")
    note: str | None = Field(None, max_length=NOTE_CHARS, description="why it exists")

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleRequest:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("give exactly one of cron and every_s")
        return self


class ScheduledRun(BaseModel):
    """A run a schedule started."""

    run_id: str
    scheduled_at: datetime
    started_at: datetime
    links: Links


class ScheduleDetail(BaseModel):
    """A schedule: what it runs, when, and what it started lately."""

    schedule_id: str
    goal: str
    cron: str | None
    every_s: float | None
    overlap: Overlap
    labels: dict[str, str]
    paused: bool
    note: str | None
    owner: str
    created_at: datetime | None
    next_runs: list[datetime] = Field(description="the next times it will start a run")
    recent_runs: list[ScheduledRun] = Field(description=f"the latest {RECENT_RUNS} it started")


class ScheduleList(BaseModel):
    """A page of schedules."""

    schedules: list[ScheduleDetail]
    next_page_token: str | None = None


def _fingerprint(body: ScheduleRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


async def _handle(
    client: Client, schedule_id: str, caller: Principal, action: access.Action
) -> tuple[ScheduleHandle, ScheduleDescription]:
    """The schedule's handle and description, which `caller` may `action`; 404 for anything
    that is not one of ours (or not the caller's to see)."""
    handle, desc = await _described(client, schedule_id)
    access.check(caller, action, await _holder(desc), f"schedule '{schedule_id}'")
    return handle, desc


async def _holder(desc: ScheduleDescription) -> access.Holder:
    return access.holder_in(await desc.memo(), unowned="")


async def _described(
    client: Client, schedule_id: str
) -> tuple[ScheduleHandle, ScheduleDescription]:
    """The schedule's handle and description; 404 for anything that is not one of ours."""
    if not SCHEDULE_ID.match(schedule_id):
        raise HTTPException(404, f"no schedule '{schedule_id}'")
    handle = client.get_schedule_handle(schedule_id)
    try:
        return handle, await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise HTTPException(404, f"no schedule '{schedule_id}'") from None
        raise


async def _detail(
    schedule_id: str, desc: ScheduleDescription, settings: Settings
) -> ScheduleDetail:
    # The request's own words (cron, every_s) are kept in the memo: Temporal keeps its
    # normal form of them.
    memo = await desc.memo()
    state = desc.schedule.state
    recent = []
    for action in desc.info.recent_actions[-RECENT_RUNS:]:
        run_id = getattr(action.action, "workflow_id", None)
        if run_id:
            recent.append(
                ScheduledRun(
                    run_id=run_id,
                    scheduled_at=action.scheduled_at,
                    started_at=action.started_at,
                    links=run_links(settings, run_id),
                )
            )
    return ScheduleDetail(
        schedule_id=schedule_id,
        goal=memo.get("goal") or "",
        cron=memo.get("cron"),
        every_s=memo.get("every_s"),
        overlap=OVERLAP_NAMES.get(desc.schedule.policy.overlap, "skip"),
        labels=memo.get("labels") or {},
        paused=state.paused,
        note=state.note or None,
        owner=memo.get("owner") or "",
        created_at=desc.info.created_at,
        next_runs=list(desc.info.next_action_times[:5]),
        recent_runs=list(reversed(recent)),
    )


@router.post("", status_code=201, responses=answers(409))
async def create_schedule(
    body: ScheduleRequest,
    gateway: Gateway,
    settings: SettingsDep,
    policy: PolicyDep,
    hub: McpHubDep,
    caller: Submitter,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
) -> ScheduleDetail:
    """Start a run on a cron expression or every so many seconds; a repeated
    `Idempotency-Key` returns the same schedule."""
    try:  # 422 before Temporal is asked anything
        inp = await run_input(body.run, settings, policy, hub, caller)
    except RequestValidationError as exc:  # its fields are under `run` here
        errors = [{**e, "loc": ("body", "run", *e["loc"][1:])} for e in exc.errors()]
        raise RequestValidationError(errors) from None
    client = await gateway.client()
    schedule_id = fresh_id("sch", IDEMPOTENCY_NAMESPACE, caller.name, idempotency_key)
    fingerprint = _fingerprint(body)
    run = inp.model_copy(update={"run_id": "", **caller.as_owner()})
    # Temporal names each run it starts after this id and the time it was due; the run
    # takes that name as its run id (workflows/run.py).
    action = ScheduleActionStartWorkflow(
        wire.RUN_WORKFLOW,
        run,
        id=f"run-{uuid.uuid4().hex}",
        task_queue=settings.task_queue,
        typed_search_attributes=run_search_attributes(run),
        memo=run_memo(run, schedule_id=schedule_id),
        static_summary=run.goal,
        static_details=run_details(run),
    )
    spec = (
        ScheduleSpec(cron_expressions=[body.cron])
        if body.cron is not None
        else ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=body.every_s or 0))]
        )
    )
    schedule = Schedule(
        action=action,
        spec=spec,
        policy=SchedulePolicy(overlap=OVERLAP[body.overlap]),
        state=ScheduleState(paused=body.paused, note=body.note or ""),
    )
    try:
        handle = await client.create_schedule(
            schedule_id,
            schedule,
            memo={
                "goal": body.run.goal,
                "labels": body.labels,
                "owner": caller.name,
                "tenant": caller.tenant,
                "cron": body.cron,
                "every_s": body.every_s,
                "request_sha256": fingerprint,
            },
        )
    except ScheduleAlreadyRunningError:
        handle, desc = await _described(client, schedule_id)
        if await desc.memo_value("request_sha256", None) != fingerprint:
            raise HTTPException(
                409, "this Idempotency-Key was already used for a different schedule"
            ) from None
        return await _detail(schedule_id, desc, settings)
    except RPCError as exc:
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            raise fail_validation(("body", "cron"), f"Temporal refused it: {exc.message}") from None
        raise
    return await _detail(schedule_id, await handle.describe(), settings)


@router.get("")
async def list_schedules(
    client: TemporalClient,
    settings: SettingsDep,
    caller: Reader,
    page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> ScheduleList:
    """List schedules."""
    token: bytes | None = None
    if page_token:
        token = unwrap_token("schedules", page_token)
        if token is None:
            raise fail_validation(("query", "page_token"), "not a page token of this listing")
    listing = await client.list_schedules(page_size=page_size, next_page_token=token)
    await listing.fetch_next_page()
    found = []
    for item in listing.current_page or []:
        if SCHEDULE_ID.match(item.id):
            _, desc = await _described(client, item.id)
            if access.sees(caller, await _holder(desc)):
                found.append(await _detail(item.id, desc, settings))
    next_token = listing.next_page_token
    return ScheduleList(
        schedules=found,
        next_page_token=wrap_token("schedules", next_token) if next_token else None,
    )


@router.get("/{schedule_id}", responses=answers(404))
async def get_schedule(
    schedule_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> ScheduleDetail:
    """A schedule, its next times and the runs it started lately."""
    _, desc = await _handle(client, schedule_id, caller, "read")
    return await _detail(schedule_id, desc, settings)


@router.post("/{schedule_id}/pause", responses=answers(404))
async def pause_schedule(
    schedule_id: str,
    client: TemporalClient,
    settings: SettingsDep,
    caller: ScheduleChanger,
    body: ScheduleNote | None = None,
) -> ScheduleDetail:
    """Stop starting runs until it is resumed; runs already started go on."""
    return await _set_paused(client, settings, schedule_id, True, caller, body)


@router.post("/{schedule_id}/resume", responses=answers(404))
async def resume_schedule(
    schedule_id: str,
    client: TemporalClient,
    settings: SettingsDep,
    caller: ScheduleChanger,
    body: ScheduleNote | None = None,
) -> ScheduleDetail:
    """Start runs again at its times."""
    return await _set_paused(client, settings, schedule_id, False, caller, body)


async def _set_paused(
    client: Client,
    settings: Settings,
    schedule_id: str,
    paused: bool,
    caller: Principal,
    body: ScheduleNote | None,
) -> ScheduleDetail:
    handle, _ = await _handle(client, schedule_id, caller, "change_schedule")
    reason = (
        body.reason if body is not None and body.reason else ("paused" if paused else "resumed")
    )
    note = f"{reason} (by {caller.name})"
    await (handle.pause(note=note) if paused else handle.unpause(note=note))
    return await _detail(schedule_id, await handle.describe(), settings)


async def readmit_schedules(client: Client, policy: Policy) -> list[str]:
    """Bring the run of every schedule under the policy in force, so that the runs it starts
    from now on are checked against it, not against the policy it was created under; a
    schedule whose run that policy refuses is paused, saying why. The schedules changed."""
    changed: list[str] = []

    async def readmitted(given: ScheduleUpdateInput) -> ScheduleUpdate | None:
        schedule = given.description.schedule
        action = schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or len(action.args) != 1:
            return None
        [inp] = await client.data_converter.decode(list(action.args), [RunInput])
        if not isinstance(inp, RunInput) or inp.config.policy == policy:
            return None
        admitted, refused = under_policy(inp, None, policy)
        action.args = [admitted]
        if refused and not schedule.state.paused:
            schedule.state.paused = True
            schedule.state.note = "paused: the policy in force refuses its run: " + "; ".join(
                refused
            )
        changed.append(given.description.id)
        return ScheduleUpdate(schedule=schedule)

    async for item in await client.list_schedules():
        if SCHEDULE_ID.match(item.id):
            await client.get_schedule_handle(item.id).update(readmitted)
    return changed


@router.delete("/{schedule_id}", status_code=204, responses=answers(404))
async def delete_schedule(
    schedule_id: str, client: TemporalClient, caller: ScheduleChanger
) -> Response:
    """Delete the schedule; the runs it started are kept and go on."""
    handle, _ = await _handle(client, schedule_id, caller, "change_schedule")
    await handle.delete()
    return Response(status_code=204)
