"""Runs: submit, inspect, list, approve and cancel."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Annotated, Any, cast

import httpx
from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryRejectedError,
)
from temporalio.common import (
    QueryRejectCondition,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.mcp import McpHub
from activities.tools.builtin import destination_refusal
from activities.tools.toolbox import toolbox
from api.archive import archived, final_record
from api.attempts import show_retries
from api.auth import Approver, Operator, Principal, Reader, Submitter
from api.deps import Ended, Gateway, McpHubDep, PolicyDep, SettingsDep, TemporalClient
from api.mcp_tools import request_mcp_tools
from api.pages import unwrap_token, wrap_token
from api.schemas import (
    Accepted,
    CancelRequest,
    DecisionRequest,
    Links,
    ReasonRequest,
    RunCreated,
    RunDetail,
    RunList,
    RunSummary,
    answers,
)
from longrun import secrets, wire
from longrun.attributes import (
    RETRY_OF_ATTRIBUTE,
    STATUS_ATTRIBUTE,
    start_attributes,
    start_memo,
)
from longrun.contracts import (
    FINAL_RUN_STATUSES,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    RUN_ID_PATTERN,
    AgentSpec,
    ApprovalDecision,
    AuditEntry,
    AuditTrail,
    BudgetChange,
    CancelNote,
    ControlRequest,
    Limits,
    RequestOutcome,
    RoleModels,
    RunConfig,
    RunInput,
    RunRequest,
    RunState,
    RunStatusName,
    StepQuery,
    StepState,
    ToolCheck,
)
from longrun.plans import (
    PlanError,
    acceptance_of,
    check_limits,
    child_run_errors,
    effective_budget,
    normalize_plan,
    validate_agent,
    validate_plan,
)
from longrun.policy import Policy
from longrun.settings import Role, Settings
from longrun.temporal import described, latest_execution

# A label filter: a label key and value as runs carry them, joined by a colon.
LabelFilter = Annotated[
    str, StringConstraints(pattern=LABEL_KEY_PATTERN[:-1] + ":" + LABEL_VALUE_PATTERN[1:])
]

log = logging.getLogger("longrun.api")
router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))

RUN_ID = re.compile(RUN_ID_PATTERN)
IDEMPOTENCY_NAMESPACE = uuid.UUID("6c0f8a3e-4a51-4d0c-9a8e-2f1b7f3d5e11")
# How long a query may go unanswered before the API says 503: longer than a worker's
# sticky-queue timeout (10 s), so the first query after a worker dies is answered by another
# worker instead of timing out.
QUERY_WAIT_S = 20.0
# One try of a query. A worker can drop a query it had buffered (when it evicts the run as the
# run closes, say); the server then holds that query until its timeout, so a query is asked
# again after this long rather than waited on for all of QUERY_WAIT_S. Long enough for a
# worker that lost its cache to replay a segment.
QUERY_TRY_S = 8.0
# How long a request to a run (a decision, a pause...) may take to be taken or refused.
REQUEST_WAIT_S = 20.0
REQUEST_POLL_S = 0.05
MAX_RETRIES_LISTED = 100  # of one run, in its audit
WORKFLOW_TYPE = wire.RUN_WORKFLOW

# Visibility filters for each run status. Final states come from Temporal's own status, so a
# run terminated from outside still lists as failed; live ones from the run's search attribute.
STATUS_FILTERS: dict[str, str] = {
    "running": "ExecutionStatus = 'Running' AND LongrunStatus = 'running'",
    "paused": "ExecutionStatus = 'Running' AND LongrunStatus = 'paused'",
    "waiting_approval": "ExecutionStatus = 'Running' AND LongrunStatus = 'waiting_approval'",
    "completed": "ExecutionStatus = 'Completed'",
    "failed": "ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')",
    "cancelled": "ExecutionStatus = 'Canceled'",
}


def run_links(settings: Settings, run_id: str) -> Links:
    ui = settings.temporal_ui_url.rstrip("/")
    return Links(
        self=f"/v1/runs/{run_id}",
        temporal_ui=f"{ui}/namespaces/{settings.temporal_namespace}/workflows/{run_id}",
    )


def run_status(status: WorkflowExecutionStatus | None, live: str | None) -> RunStatusName:
    """A run's status from Temporal's and, while it lives, its status search attribute."""
    if status == WorkflowExecutionStatus.COMPLETED:
        return "completed"
    if status == WorkflowExecutionStatus.CANCELED:
        return "cancelled"
    if status in (
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    ):
        return "failed"
    # A run that recorded its end stores its final status and sends webhooks, then closes.
    if live in FINAL_RUN_STATUSES or live in ("waiting_approval", "paused"):
        return cast(RunStatusName, live)
    return "running"


async def describe_run(
    client: Client, run_id: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The run's handle and description; 404 for anything that is not one of our runs."""
    if not RUN_ID.match(run_id):
        raise HTTPException(404, f"no run '{run_id}'")
    desc = await described(client, run_id)
    if desc is None or desc.workflow_type != WORKFLOW_TYPE:
        raise HTTPException(404, f"no run '{run_id}'")
    return client.get_workflow_handle(run_id), desc


def run_status_of(desc: WorkflowExecutionDescription) -> RunStatusName:
    return run_status(desc.status, desc.typed_search_attributes.get(STATUS_ATTRIBUTE))


async def query_run(
    handle: WorkflowHandle[Any, Any],
    query: str,
    result_type: type,
    *args: Any,
    reject_condition: QueryRejectCondition | None = None,
) -> Any:
    """Ask the run's workflow; 503 when no worker answers in time."""
    answered, result = await _query_until(
        handle, query, result_type, *args, reject_condition=reject_condition, wait_s=QUERY_WAIT_S
    )
    if not answered:
        raise HTTPException(503, "no longrun worker answered the query; is a worker running?")
    return result


async def _query_until(
    handle: WorkflowHandle[Any, Any],
    query: str,
    result_type: type,
    *args: Any,
    reject_condition: QueryRejectCondition | None = None,
    wait_s: float,
) -> tuple[bool, Any]:
    """Ask the run's workflow, again each QUERY_TRY_S it goes unanswered, for at most
    `wait_s`: whether a worker answered, and its answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while (left := deadline - loop.time()) > 0:
        try:
            return True, await handle.query(
                query,
                *args,
                result_type=result_type,
                reject_condition=reject_condition,
                rpc_timeout=timedelta(seconds=min(left, QUERY_TRY_S)),
            )
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise
    return False, None


async def query_state(handle: WorkflowHandle[Any, Any]) -> RunDetail:
    """The run's `status` query as the API answers it (links left for the caller)."""
    return _detail(await query_run(handle, wire.STATUS, RunState))


async def _open_state(client: Client, run_id: str) -> RunDetail | None:
    """The `status` query of a run that is open; None if it is closed (Temporal refuses
    the query rather than have a worker replay the run)."""
    handle = client.get_workflow_handle(run_id)
    try:
        state = await query_run(
            handle, wire.STATUS, RunState, reject_condition=QueryRejectCondition.NOT_OPEN
        )
    except WorkflowQueryRejectedError:
        return None
    return _detail(state)


async def stored_part(
    settings: Settings, run_id: str, desc: WorkflowExecutionDescription, part: str
) -> Any:
    """One part of the record an ended run stored as it ended (workflows/final.py); None
    if the run is live, has no record or none with that part, or the store cannot give
    it: then the run's query answers."""
    if run_status_of(desc) not in FINAL_RUN_STATUSES:
        return None
    artifact = await desc.memo_value(wire.FINAL_RECORD_MEMO, None)
    if not isinstance(artifact, str):
        return None
    record = await run_in_threadpool(final_record, settings, run_id, artifact)
    return None if record is None else record.get(part)


def _detail(state: RunState | dict[str, Any]) -> RunDetail:
    """A run's status as the API answers it (links left for the caller)."""
    fields = state.model_dump() if isinstance(state, RunState) else state
    return RunDetail.model_validate({**fields, "links": {"self": "", "temporal_ui": ""}})


def _invalid(errors: list[PlanError]) -> RequestValidationError:
    """A 422 listing every problem, each with its field path."""
    return RequestValidationError(
        [{"type": "value_error", "loc": e.loc, "msg": e.msg, "input": None} for e in errors]
    )


def fail_validation(loc: tuple[str | int, ...], msg: str) -> RequestValidationError:
    """A 422 about one field, shaped as FastAPI's own."""
    return _invalid([PlanError(loc=loc, msg=msg)])


def _fingerprint(body: RunRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def _request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


def secrets_named(body: RunRequest) -> list[str]:
    """Every secret the request's steps and checks name."""
    args = [step.args for step in body.plan.steps] if body.plan is not None else []
    args += [c.check.args for c in body.acceptance or [] if isinstance(c.check, ToolCheck)]
    return secrets.named(args)


def _webhook_problems(body: RunRequest, settings: Settings) -> list[PlanError]:
    """Why the run's webhooks cannot be delivered: a URL runs may not reach, or no secret
    to sign with."""
    errors = []
    for i, url in enumerate(body.webhooks or []):
        try:
            refusal = destination_refusal(settings, httpx.URL(url))
        except httpx.InvalidURL as exc:
            refusal = f"not a URL: {exc}"
        if refusal is not None:
            errors.append(PlanError(loc=("body", "webhooks", i), msg=refusal))
    if body.webhooks and settings.webhook_secret is None:
        errors.append(
            PlanError(
                loc=("body", "webhooks"),
                msg="this server has no LONGRUN_WEBHOOK_SECRET to sign webhooks with",
            )
        )
    return errors


async def run_input(body: RunRequest, settings: Settings, policy: Policy, hub: McpHub) -> RunInput:
    """The workflow input for a request, or 422 with every problem found (503 when an MCP
    server it names cannot list its tools)."""
    mcp_tools = await request_mcp_tools(body, hub, policy)
    tools = toolbox(mcp_tools)
    errors = validate_agent(body, tools, policy)
    if body.plan is not None:
        errors = validate_plan(body.plan, tools, policy) + errors
    if body.budget is not None:
        errors += check_limits(body.budget, settings.budget_ceilings, ("body", "budget"))
    errors += _webhook_problems(body, settings)
    if body.plan is not None and not errors:
        errors += child_run_errors(body.plan, settings.max_child_runs)
    if errors:
        raise _invalid(errors)
    model = body.model or settings.model
    config = RunConfig(
        default_model=model,
        prices=settings.prices,
        policy=policy,
        continue_as_new_every=settings.continue_as_new_every,
        prompt_token_budget=settings.prompt_token_budget,
        model_retry_window_s=settings.model_retry_window_s,
        webhooks=list(dict.fromkeys([*settings.webhooks, *(body.webhooks or [])])),
        approval_timeout_s=settings.approval_timeout_s,
        on_timeout=settings.approval_on_timeout,
        max_child_runs=settings.max_child_runs,
    )
    budget = effective_budget(body.budget, settings.budget_defaults, settings.budget_ceilings)
    common = {
        "run_id": "",
        "goal": body.goal,
        "labels": body.labels,
        "config": config,
        "on_failure": body.on_failure,
        "mcp_tools": mcp_tools,
    }
    if body.plan is not None:
        plan = normalize_plan(body.plan, tools, policy)
        return RunInput(**common, plan=plan, budget=budget)
    roles = body.models or RoleModels()
    agent = AgentSpec(
        acceptance=acceptance_of(body),
        tools=list(
            dict.fromkeys(body.tools if body.tools is not None else filter(policy.allows, tools))
        ),
        planner_model=roles.planner or model,
        actor_model=roles.actor or model,
        judge_model=roles.judge or model,
        max_steps=body.max_steps or settings.max_steps,
    )
    return RunInput(**common, agent=agent, budget=budget)


def run_details(inp: RunInput) -> str:
    """Static details for the Web UI: what the run was asked to do."""
    if inp.plan is not None:
        ids = [s.id for s in inp.plan.steps]
        more = f" and {len(ids) - 20} more" if len(ids) > 20 else ""
        return f"{len(ids)} steps: {', '.join(ids[:20])}{more}"
    assert inp.agent is not None
    criteria = ", ".join(c.id for c in inp.agent.acceptance)
    return f"goal-only run; acceptance: {criteria}; tools: {', '.join(inp.agent.tools)}"


def run_search_attributes(inp: RunInput) -> TypedSearchAttributes:
    """What a run is found by from its start: its status (running), its labels, the run
    it retries or forks."""
    return start_attributes(inp.labels, inp.reuse.run_id if inp.reuse else None)


def run_memo(inp: RunInput, **more: Any) -> dict[str, Any]:
    """What a run's memo holds from its start: its goal, labels and owner (and `more`)."""
    return start_memo(inp.goal, inp.labels, inp.owner, **more)


def fresh_id(prefix: str, namespace: uuid.UUID, caller: str, key: str | None) -> str:
    """A new id, or (with an `Idempotency-Key`) the one this caller's key always names:
    scoped to the caller, so two clients using the same key get two."""
    if key is None:
        return f"{prefix}-{uuid.uuid4().hex}"
    scoped = f"{caller}\n{key}"
    return f"{prefix}-{uuid.uuid5(namespace, scoped).hex}"


async def start_run(client: Client, settings: Settings, inp: RunInput, **memo: Any) -> None:
    """Start the run `inp` (its run id set) as the API starts every run: its status and
    labels searchable, its goal, labels and owner in its memo (with `memo`)."""
    await client.start_workflow(
        wire.RUN_WORKFLOW,
        inp,
        id=inp.run_id,
        task_queue=settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=run_search_attributes(inp),
        memo=run_memo(inp, **memo),
        static_summary=inp.goal,
        static_details=run_details(inp),
    )


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
    inp = await run_input(body, settings, policy, hub)  # 422 while Temporal is down
    caller.check_granted(secrets_named(body))
    client = await gateway.client()
    fingerprint = _fingerprint(body)
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
    status: RunStatusName | None = None,
    label: Annotated[
        list[LabelFilter] | None, Query(max_length=20, description="key:value, e.g. team:ops")
    ] = None,
    page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> RunList:
    """List runs, newest first: live runs by start time, then ended runs by end time."""
    # No ORDER BY: SQL visibility (the dev server, PostgreSQL) rejects it, and its native order
    # is already newest first, live runs before ended ones.
    clauses = [f"WorkflowType = '{WORKFLOW_TYPE}'"]
    if status is not None:
        clauses.append(f"({STATUS_FILTERS[status]})")
    for item in label or []:  # key:value, each side checked against its pattern
        clauses.append(f"LongrunLabels = '{item}'")
    query = " AND ".join(clauses)
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
        body = None if execution is None else ended.body(run_id, execution)
        if body is not None:
            return Response(body, media_type="application/json")
        ended.forget(run_id)  # gone, or another execution of it: read afresh
    # Both at once, so a live run costs one round trip; a closed run refuses the query
    # at once instead of replaying its history.
    described, queried = await asyncio.gather(
        describe_run(client, run_id), _open_state(client, run_id), return_exceptions=True
    )
    if isinstance(described, BaseException):
        raise described
    handle, desc = described
    final = run_status_of(desc)
    stored = await stored_part(settings, run_id, desc, "status")
    detail = None if stored is None else _detail(stored)
    if detail is None and isinstance(queried, RunDetail):
        detail = queried  # open: live, or storing its final status
    if detail is None:
        if isinstance(queried, BaseException) and final not in FINAL_RUN_STATUSES:
            raise queried
        # Closed without a stored status (from before, ended from outside), or closed
        # between the two calls: the query replays it.
        detail = await query_state(handle)
    detail.links = run_links(settings, run_id)
    detail.schedule_id = await desc.memo_value("schedule_id", None)
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
        ended.keep(run_id, desc.run_id or "", body)
    return Response(body, media_type="application/json")


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
    handle, desc = await describe_run(client, run_id)
    if run_status_of(desc) in FINAL_RUN_STATUSES:
        await _ended_decision(handle, run_id, approval_id)
    # Without API keys everyone is the same local caller, so four eyes cannot apply.
    four_eyes = settings.four_eyes and bool(settings.api_keys)
    if four_eyes and await desc.memo_value("owner", None) == caller.name:
        raise HTTPException(403, "four-eyes rule: approve steps of runs you did not start")
    decision = ApprovalDecision(
        approval_id=approval_id,
        decision=body.decision,
        comment=body.comment,
        actor=caller.name,
        request_id=_request_id(),
    )
    # The run takes a decision on a request it has not asked for (yet) once it does; so an
    # approval the run never asked for is refused here.
    state = await query_state(handle)
    own = [a for a in [*state.pending_approvals, *state.approvals] if a.run_id is None]
    known = {a.approval_id for a in own}
    if approval_id not in known and approval_id not in state.approvals_archived:
        child = _asking_child(state, run_id, approval_id)
        return await decide_approval(child, approval_id, body, client, settings, caller)
    ended = partial(_ended_decision, handle, run_id, approval_id)
    await _ask(handle, run_id, wire.DECIDE, decision, ended=ended)
    return Accepted(run_id=run_id, detail=f"{body.decision} of '{approval_id}' taken")


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
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REQUEST_WAIT_S
    while (left := deadline - loop.time()) > 0:
        answered, outcome = await _query_until(
            handle, wire.OUTCOME, RequestOutcome, request.request_id, wait_s=left
        )
        if answered and outcome is not None:
            if outcome.taken:
                return
            code = 404 if outcome.kind == "UnknownApproval" else 409
            raise HTTPException(code, outcome.message or "refused")
        await asyncio.sleep(REQUEST_POLL_S)
    raise HTTPException(
        503,
        "the run has the request but no longrun worker took it in time (is a worker "
        "running?); it is taken or refused when one does: see the run's status",
    )


@router.post("/{run_id}/cancel", status_code=202, responses=answers(404, 409))
async def cancel_run(
    run_id: str, client: TemporalClient, caller: Submitter, body: CancelRequest | None = None
) -> Accepted:
    """Cancel a run; running activities are cancelled through their heartbeats."""
    handle, _ = await _live_run(client, run_id, caller, "cancel", others="admin")
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
    client: Client, run_id: str, caller: Principal, action: str, others: Role
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """A run that has not ended, which `caller` may `action`: as its owner, or holding the
    role `others` that acts on anyone's runs."""
    handle, desc = await describe_run(client, run_id)
    if not caller.may(others) and await desc.memo_value("owner", None) != caller.name:
        raise HTTPException(403, f"submitters may {action} only the runs they started")
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
    handle, _ = await _live_run(client, run_id, caller, action, others="approver")
    reason = body.reason if body else None
    request = ControlRequest(actor=caller.name, reason=reason, request_id=_request_id())
    await _ask(handle, run_id, signal, request)
    return Accepted(run_id=run_id, detail=f"{action} taken")


@router.post("/{run_id}/budget", status_code=202, responses=answers(404, 409))
async def change_budget(
    run_id: str, body: Limits, client: TemporalClient, settings: SettingsDep, caller: Approver
) -> Accepted:
    """Change a run's limits (within the server's ceilings); a budget pause then lifts."""
    errors = check_limits(body, settings.budget_ceilings, ("body",))
    if errors:
        raise _invalid(errors)
    handle, desc = await _live_run(
        client, run_id, caller, "change the budget of", others="approver"
    )
    parent = await desc.memo_value("parent_run_id", None)
    if parent is not None:
        raise HTTPException(
            409,
            f"run '{run_id}' is a child run: its budget is carved out of its parent's; "
            f"change the budget of '{parent}' instead",
        )
    change = BudgetChange(limits=body, actor=caller.name, request_id=_request_id())
    await _ask(handle, run_id, wire.SET_BUDGET, change)
    return Accepted(run_id=run_id, detail="budget change taken")


@router.get("/{run_id}/steps/{step_id}", responses=answers(404))
async def get_step(
    run_id: str, step_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> StepState:
    """One step in full, its whole output included (status previews big outputs)."""
    handle, desc = await describe_run(client, run_id)
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
    handle, desc = await describe_run(client, run_id)
    stored = await stored_part(settings, run_id, desc, "audit")
    trail: AuditTrail = (
        AuditTrail.model_validate(stored)
        if stored is not None
        else await query_run(handle, wire.AUDIT, AuditTrail)
    )
    if trail.archived:  # a long run stored its earlier entries away
        earlier = await run_in_threadpool(archived, settings, run_id, trail.archived, "audit")
        trail.entries = [AuditEntry.model_validate(e) for e in earlier] + trail.entries
    trail.entries += await _started_again(client, run_id)
    return trail


async def _started_again(client: Client, run_id: str) -> list[AuditEntry]:
    """The retries and forks of a run, as its audit names them: the run is closed by then,
    so they are found by the attribute each sets at its start, not in its history."""
    query = f"{RETRY_OF_ATTRIBUTE.name} = '{run_id}'"
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
