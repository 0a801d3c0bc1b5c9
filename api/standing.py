"""The API's side of standing approvals: requests to the grants workflow of its task queue
(workflows/grants.py), started with the first one, and the grants it keeps."""

from __future__ import annotations

import uuid

from fastapi import HTTPException
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from api.auth import Principal
from api.reading import polling
from longrun import wire
from longrun.contracts import Grant, GrantList, GrantOutcome, GrantRequest, GrantsInput, GrantSpec
from longrun.settings import Settings


def _handle(client: Client, settings: Settings) -> WorkflowHandle[object, None]:
    return client.get_workflow_handle(wire.grants_workflow_id(settings.task_queue))


def new_grant(spec: GrantSpec, caller: Principal, four_eyes: bool) -> Grant:
    """A grant of `spec` by `caller` (its tenant's), before the workflow dates it."""
    return Grant(
        **spec.model_dump(exclude_unset=False),
        grant_id=f"grant-{uuid.uuid4().hex[:16]}",
        granted_by=caller.name,
        tenant=caller.tenant,
        four_eyes=four_eyes,
    )


async def send(client: Client, settings: Settings, request: GrantRequest) -> GrantOutcome:
    """Send the grants workflow a request (starting it if it is not running) and wait for
    its outcome; 503 if no worker takes it in time."""
    await client.start_workflow(
        wire.GRANTS_WORKFLOW,
        GrantsInput(),
        id=wire.grants_workflow_id(settings.task_queue),
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal=wire.GRANT,
        start_signal_args=[request],
    )
    handle = _handle(client, settings)
    async for _ in polling():
        try:
            outcome: GrantOutcome | None = await handle.query(
                wire.GRANT_OUTCOME, request.request_id, result_type=GrantOutcome
            )
        except RPCError:
            outcome = None
        if outcome is not None:
            return outcome
    raise HTTPException(503, "no longrun worker took the request in time (is one running?)")


async def add(client: Client, settings: Settings, grant: Grant, actor: str) -> GrantOutcome:
    """Ask the grants workflow to keep `grant`; its outcome."""
    request = GrantRequest(request_id=request_id(), action="add", grant=grant, actor=actor)
    return await send(client, settings, request)


async def revoke(client: Client, settings: Settings, grant: Grant, actor: str) -> GrantOutcome:
    """Ask the grants workflow to revoke `grant` (of its tenant); its outcome."""
    request = GrantRequest(
        request_id=request_id(),
        action="revoke",
        grant_id=grant.grant_id,
        actor=actor,
        tenant=grant.tenant,
    )
    return await send(client, settings, request)


async def listed(client: Client, settings: Settings) -> list[Grant]:
    """Every grant the workflow keeps; none if it was never started."""
    try:
        found: GrantList = await _handle(client, settings).query(wire.GRANTS, result_type=GrantList)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return []
        raise HTTPException(503, f"the grants could not be read: {exc.message}") from exc
    return found.grants


def request_id() -> str:
    """A new request's id."""
    return f"req-{uuid.uuid4().hex}"
