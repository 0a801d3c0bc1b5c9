"""Decisions about a run: approve or reject a gated step, cancel, pause, resume, change its
budget. Each is taken exactly once: the caller whose decision won gets 2xx, every other 409."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, HTTPException
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from api import access, standing
from api.access import Approver, Canceller, Operator
from api.auth import Principal
from api.deps import SettingsDep, TemporalClient
from api.reading import (
    fail_validation,
    invalid,
    polling,
    query_state,
    query_until,
    run_status_of,
)
from api.routes.grants import grant_for
from api.schemas import (
    Accepted,
    CancelRequest,
    DecisionRequest,
    ReasonRequest,
    RunDetail,
    answers,
)
from longrun import wire
from longrun.contracts import (
    FINAL_RUN_STATUSES,
    ApprovalDecision,
    BudgetChange,
    CancelNote,
    ControlRequest,
    GrantSpec,
    Limits,
    RequestOutcome,
)
from longrun.digests import bound_refusal
from longrun.plans import check_limits

# A label filter: a label key and value as runs carry them, joined by a colon.

# How a run's refusal of a request is answered; any other is a 409.
REFUSAL_STATUS = {"UnknownApproval": 404, "NeedsRole": 403}

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))


def request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


@router.post("/{run_id}/approvals/{approval_id}", status_code=202, responses=answers(404, 409))
async def decide_approval(
    run_id: str,
    approval_id: str,
    body: DecisionRequest,
    client: TemporalClient,
    settings: SettingsDep,
    caller: Approver,
) -> Accepted:
    """Approve or reject a gated step. Exactly one decision on a request is taken: every
    other caller gets 409 naming the decision that won."""
    # A run this process knows goes straight to the signal, which a run that has ended
    # refuses (then said as for one described as ended).
    run = access.known_run(caller, "decide", run_id)
    if run is None:
        handle, desc, run = await access.described_run(client, caller, "decide", run_id)
        if run_status_of(desc) in FINAL_RUN_STATUSES:
            await _ended_decision(handle, run_id, approval_id)
    else:
        handle = client.get_workflow_handle(run_id)
    if access.four_eyes(settings) and run.holder.owner == caller.name:
        raise HTTPException(403, "four-eyes rule: approve steps of runs you did not start")
    decision = ApprovalDecision(
        approval_id=approval_id,
        decision=body.decision,
        comment=body.comment,
        actor=caller.name,
        request_id=request_id(),
        digest=body.digest,
        roles=sorted(caller.roles),
    )
    ended = partial(_ended_decision, handle, run_id, approval_id)
    if body.grant is None:
        # Straight to the run, which takes it or says why not (another call's digest,
        # another role, decided already) in one round. One it has not asked for it
        # refuses, sent so: it may be a child run's, or shown by a worker that died
        # before recording it, which the run's status tells.
        try:
            unseen = decision.model_copy(update={"unseen": True})
            await _ask(handle, run_id, wire.DECIDE, unseen, ended=ended)
            return Accepted(run_id=run_id, detail=f"{body.decision} of '{approval_id}' taken")
        except _NotAsked:
            decision.request_id = request_id()
    # The run takes a decision on a request it has not asked for (yet) once it does; so an
    # approval the run never asked for is refused here.
    state = await query_state(handle)
    own = [a for a in [*state.pending_approvals, *state.approvals] if a.run_id is None]
    known = {a.approval_id for a in own}
    if approval_id not in known and approval_id not in state.approvals_archived:
        child = _asking_child(state, run_id, approval_id)
        return await decide_approval(child, approval_id, body, client, settings, caller)
    # The run refuses a decision for another call or by another role; said here at once
    # where the status read shows it.
    asked = next((a for a in state.pending_approvals if a.approval_id == approval_id), None)
    refusal = bound_refusal(asked, body.digest, caller.roles) if asked is not None else None
    if refusal is not None:
        kind, message = refusal
        raise HTTPException(REFUSAL_STATUS.get(kind, 409), message)
    grant = None
    if body.grant is not None:
        if body.decision != "approve" or asked is None or asked.tool is None:
            problem = "only the approval of a tool call the run waits on grants"
            raise fail_validation(("body", "grant"), problem)
        spec = GrantSpec(
            tool=asked.tool,
            run_id=None if body.grant.label else run_id,
            **body.grant.model_dump(exclude_unset=True),
        )
        grant = await grant_for(spec, client, settings, caller)
    if grant is None:
        await _ask(handle, run_id, wire.DECIDE, decision, ended=ended)
        return Accepted(run_id=run_id, detail=f"{body.decision} of '{approval_id}' taken")
    # The grant first, so that the run's next call finds it; taken back if the decision is not.
    await standing.add(client, settings, grant, caller.name)
    try:
        await _ask(handle, run_id, wire.DECIDE, decision, ended=ended)
    except HTTPException:
        await standing.revoke(client, settings, grant, caller.name)
        raise
    detail = f"approve of '{approval_id}' taken; {grant.tool} granted ({grant.grant_id})"
    return Accepted(run_id=run_id, detail=detail)


def _asking_child(state: RunDetail, run_id: str, approval_id: str) -> str:
    """The child run that asks for an approval its parent lists; 404 if none does, 409 if
    several do (decide it on the child run)."""
    asking = [
        a.run_id
        for a in state.pending_approvals
        if a.run_id is not None and a.approval_id == approval_id
    ]
    if not asking:
        raise HTTPException(404, f"run '{run_id}' has no approval '{approval_id}'")
    if len(asking) > 1:
        raise HTTPException(
            409,
            f"child runs {', '.join(asking)} each ask for '{approval_id}': "
            "decide it on the child run",
        )
    return asking[0]


async def _ended_decision(handle: WorkflowHandle[Any, Any], run_id: str, approval_id: str) -> None:
    """Refuse a decision on an ended run: 404 for an approval it never asked for, else
    409 naming the decision taken, if one was."""
    state = await query_state(handle)
    record = next((a for a in state.approvals if a.approval_id == approval_id), None)
    decided = ""
    if approval_id in state.approvals_archived:
        decided = f"approval '{approval_id}' was already decided (see the audit trail); "
    elif record is None:
        raise HTTPException(404, f"run '{run_id}' has no approval '{approval_id}'")
    elif record.decision is not None:
        decided = f"approval '{approval_id}' was already decided: {record.decision} by "
        decided += f"{record.decided_by}; "
    raise HTTPException(409, f"{decided}run '{run_id}' has already ended")


class _NotAsked(HTTPException):
    """The run refused a decision on an approval it has not asked for."""


async def _ask(
    handle: WorkflowHandle[Any, Any],
    run_id: str,
    signal: str,
    request: Any,
    *,
    ended: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Send a run a request (a signal carrying `request.request_id`) and wait until the run
    took or refused it: its refusal is 404 (no such approval) or 409, a run that ended
    before it 409 (or what `ended` raises), no worker taking it in time 503."""
    try:
        await handle.signal(signal, request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            if ended is not None:
                await ended()
            raise HTTPException(409, f"run '{run_id}' has already ended") from None
        raise
    async for left in polling():
        answered, outcome = await query_until(
            handle, wire.OUTCOME, RequestOutcome, request.request_id, wait_s=left
        )
        if answered and outcome is not None:
            if outcome.taken:
                return
            code = REFUSAL_STATUS.get(outcome.kind or "", 409)
            if outcome.kind == "UnknownApproval":
                raise _NotAsked(code, outcome.message or "refused")
            raise HTTPException(code, outcome.message or "refused")
    raise HTTPException(
        503,
        "the run has the request but no longrun worker took it in time (is a worker "
        "running?); it is taken or refused when one does: see the run's status",
    )


@router.post("/{run_id}/cancel", status_code=202, responses=answers(404, 409))
async def cancel_run(
    run_id: str, client: TemporalClient, caller: Canceller, body: CancelRequest | None = None
) -> Accepted:
    """Cancel a run; running activities are cancelled through their heartbeats."""
    handle, _ = await _live_run(client, run_id, caller, "cancel")
    compensate = body.compensate if body else False
    try:
        await handle.signal(wire.CANCELLING, CancelNote(actor=caller.name, compensate=compensate))
        await handle.cancel()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # it ended since we looked
            raise HTTPException(409, f"run '{run_id}' has already ended") from None
        raise
    return Accepted(run_id=run_id, detail="cancellation requested")


async def _live_run(
    client: Client, run_id: str, caller: Principal, action: access.Action
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """A run that has not ended, which `caller` may `action`."""
    handle, desc = await access.run_for(client, caller, action, run_id)
    if (status := run_status_of(desc)) in FINAL_RUN_STATUSES:
        raise HTTPException(409, f"run '{run_id}' has already ended ({status})")
    return handle, desc


@router.post("/{run_id}/pause", status_code=202, responses=answers(404, 409))
async def pause_run(
    run_id: str, client: TemporalClient, caller: Operator, body: ReasonRequest | None = None
) -> Accepted:
    """Pause a run: the call in flight finishes, then it waits for `resume`."""
    return await _control(client, run_id, caller, body, "pause", wire.PAUSE)


@router.post("/{run_id}/resume", status_code=202, responses=answers(404, 409))
async def resume_run(
    run_id: str, client: TemporalClient, caller: Operator, body: ReasonRequest | None = None
) -> Accepted:
    """Resume a run paused on request (a budget pause needs a bigger budget)."""
    return await _control(client, run_id, caller, body, "resume", wire.RESUME)


async def _control(
    client: Client,
    run_id: str,
    caller: Principal,
    body: ReasonRequest | None,
    action: str,
    signal: str,
) -> Accepted:
    handle, _ = await _live_run(client, run_id, caller, "pause")
    reason = body.reason if body else None
    request = ControlRequest(actor=caller.name, reason=reason, request_id=request_id())
    await _ask(handle, run_id, signal, request)
    return Accepted(run_id=run_id, detail=f"{action} taken")


@router.post("/{run_id}/budget", status_code=202, responses=answers(404, 409))
async def change_budget(
    run_id: str, body: Limits, client: TemporalClient, settings: SettingsDep, caller: Approver
) -> Accepted:
    """Change a run's limits (within the server's ceilings); a budget pause then lifts."""
    errors = check_limits(body, settings.budget_ceilings, ("body",))
    if errors:
        raise invalid(errors)
    handle, desc = await _live_run(client, run_id, caller, "budget")
    parent = await desc.memo_value("parent_run_id", None)
    if parent is not None:
        raise HTTPException(
            409,
            f"run '{run_id}' is a child run: its budget is carved out of its parent's; "
            f"change the budget of '{parent}' instead",
        )
    change = BudgetChange(limits=body, actor=caller.name, request_id=request_id())
    await _ask(handle, run_id, wire.SET_BUDGET, change)
    return Accepted(run_id=run_id, detail="budget change taken")
