"""Reading runs: find one of longrun's runs, ask it a query (again when a worker dropped
it), read what an ended run stored, and say its status as the API does."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any, Literal, cast

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from api.archive import final_record
from api.schemas import (
    Links,
    RunDetail,
)
from longrun import wire
from longrun.attributes import STATUS_ATTRIBUTE
from longrun.contracts import (
    FINAL_RUN_STATUSES,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    RUN_ID_PATTERN,
    RunState,
    RunStatusName,
)
from longrun.plans import PlanError
from longrun.settings import Settings
from longrun.temporal import described

# A label filter: a label key and value as runs carry them, joined by a colon.
LabelFilter = Annotated[
    str, StringConstraints(pattern=LABEL_KEY_PATTERN[:-1] + ":" + LABEL_VALUE_PATTERN[1:])
]

RUN_ID = re.compile(RUN_ID_PATTERN)
WORKFLOW_TYPE = wire.RUN_WORKFLOW
# How long a query may go unanswered before the API says 503: longer than a worker's
# sticky-queue timeout (10 s), so the first query after a worker dies is answered by another
# worker instead of timing out.
QUERY_WAIT_S = 20.0
# One try of a query. A worker can drop a query it had buffered (when it evicts the run as the
# run closes, say); the server then holds that query until its timeout, so a query is asked
# again after this long rather than waited on for all of QUERY_WAIT_S. Long enough for a
# worker that lost its cache to replay a segment.
QUERY_TRY_S = 8.0

# Visibility filters for each run status. Final states come from Temporal's own status, so a
# run terminated from outside still lists as failed; live ones from the run's search attribute.
STATUS_FILTERS: dict[str, str] = {
    "running": "ExecutionStatus = 'Running' AND LongrunStatus = 'running'",
    "paused": "ExecutionStatus = 'Running' AND LongrunStatus = 'paused'",
    "waiting_approval": "ExecutionStatus = 'Running' AND LongrunStatus = 'waiting_approval'",
    "completed": "ExecutionStatus = 'Completed'",
    "failed": "ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')",
    "cancelled": "ExecutionStatus = 'Canceled'",
    "open": "ExecutionStatus = 'Running'",  # any of the live ones
}
ListedStatus = RunStatusName | Literal["open"]


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
    answered, result = await query_until(
        handle, query, result_type, *args, reject_condition=reject_condition, wait_s=QUERY_WAIT_S
    )
    if not answered:
        raise HTTPException(
            503,
            f"no longrun worker answered the run's query within {QUERY_WAIT_S:g} s: none is "
            "running, or all are busy; ask again",
            headers={"Retry-After": "5"},
        )
    return result


# How long a request (a decision, a pause, a grant...) may take to be taken or refused.
REQUEST_WAIT_S = 20.0
# Its outcome is asked for at once, then after waits that double from the first to the
# last: under load a busy worker is not asked ever faster for what it has not done yet.
REQUEST_POLL_S = (0.05, 0.8)


async def polling(wait_s: float = REQUEST_WAIT_S) -> AsyncIterator[float]:
    """The time left, at once and then after each wait of REQUEST_POLL_S, until `wait_s`
    is up: when to ask again for a request's outcome."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    pause, longest = REQUEST_POLL_S
    while (left := deadline - loop.time()) > 0:
        yield left
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)


async def query_until(
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
    return as_detail(await query_run(handle, wire.STATUS, RunState))


async def open_state(client: Client, run_id: str) -> RunDetail | None:
    """The `status` query of a run that is open; None if it is closed (Temporal refuses
    the query rather than have a worker replay the run)."""
    handle = client.get_workflow_handle(run_id)
    try:
        state = await query_run(
            handle, wire.STATUS, RunState, reject_condition=QueryRejectCondition.NOT_OPEN
        )
    except WorkflowQueryRejectedError:
        return None
    return as_detail(state)


async def stored_part(
    settings: Settings, run_id: str, desc: WorkflowExecutionDescription, part: str
) -> Any:
    """One part of the record an ended run stored as it ended (workflows/final_record.py); None
    if the run is live, has no record or none with that part, or the store cannot give
    it: then the run's query answers."""
    if run_status_of(desc) not in FINAL_RUN_STATUSES:
        return None
    artifact = await desc.memo_value(wire.FINAL_RECORD_MEMO, None)
    if not isinstance(artifact, str):
        return None
    record = await run_in_threadpool(final_record, settings, run_id, artifact)
    return None if record is None else record.get(part)


def as_detail(state: RunState | dict[str, Any]) -> RunDetail:
    """A run's status as the API answers it (links left for the caller)."""
    fields = state.model_dump() if isinstance(state, RunState) else state
    return RunDetail.model_validate({**fields, "links": {"self": "", "temporal_ui": ""}})


def invalid(errors: list[PlanError]) -> RequestValidationError:
    """A 422 listing every problem, each with its field path."""
    return RequestValidationError(
        [{"type": "value_error", "loc": e.loc, "msg": e.msg, "input": None} for e in errors]
    )


def fail_validation(loc: tuple[str | int, ...], msg: str) -> RequestValidationError:
    """A 422 about one field, shaped as FastAPI's own."""
    return invalid([PlanError(loc=loc, msg=msg)])
