"""Retry: a new run of a failed or cancelled plan run that takes over the steps it completed
(their recorded outputs; not run again, not charged again) and goes on from the first step
that did not complete."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle

from activities.artifacts import store_for
from api.auth import Submitter
from api.deps import SettingsDep, TemporalClient
from api.routes.runs import describe_run, run_links, run_status_of, start_run, stored_part
from api.schemas import RunCreated, answers
from longrun import refs, wire
from longrun.contracts import Reuse, RunInput, StepQuery, StepState
from longrun.settings import Settings

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))

RETRYABLE = ("failed", "cancelled")
DONE = ("completed", "skipped")


class RetryCreated(RunCreated):
    """The new run a retry started."""

    retry_of: str = Field(description="the run it retries")
    reused: list[str] = Field(description="the steps it takes over, done, from that run")


@router.post("/{run_id}/retry", status_code=202, responses=answers(404, 409))
async def retry_run(
    run_id: str, client: TemporalClient, settings: SettingsDep, caller: Submitter
) -> RetryCreated:
    """Start a new run of a failed or cancelled plan run: the steps it completed count as
    done with their recorded outputs, and the new run goes on from the first that did not."""
    handle, desc = await describe_run(client, run_id)
    status = run_status_of(desc)
    if status not in RETRYABLE:
        raise HTTPException(409, f"run '{run_id}' is {status}: only a failed or cancelled run")
    inp = await _input_of(client, handle)
    if inp.plan is None:
        raise HTTPException(
            422, "a goal-only run plans again from its goal: submit the goal as a new run"
        )
    done = await _done_steps(settings, run_id, desc, handle, [s.id for s in inp.plan.steps])
    new_id = f"run-{uuid.uuid4().hex}"
    await run_in_threadpool(_copy_artifacts, settings, run_id, new_id, done)
    retry = inp.model_copy(
        update={
            "run_id": new_id,
            "owner": caller.name,
            "carry": None,
            "reuse": Reuse(run_id=run_id, steps=done),
        }
    )
    await start_run(client, settings, retry, {"retry_of": run_id})
    return RetryCreated(
        run_id=new_id,
        status="running",
        links=run_links(settings, new_id),
        retry_of=run_id,
        reused=list(done),
    )


async def _input_of(client: Client, handle: WorkflowHandle[Any, Any]) -> RunInput:
    """The input the run's latest history segment started with: its plan and config."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [inp] = await client.data_converter.decode(payloads, [RunInput])
            if isinstance(inp, RunInput):
                return inp
        break
    raise HTTPException(409, f"run '{handle.id}' has no input longrun can read")


async def _done_steps(
    settings: Settings,
    run_id: str,
    desc: WorkflowExecutionDescription,
    handle: WorkflowHandle[Any, Any],
    step_ids: list[str],
) -> dict[str, StepState]:
    """The steps the run completed or skipped, whole: from its final record, or (a run that
    stored none) each from the `step` query."""
    recorded = await stored_part(settings, run_id, desc, "steps")
    if recorded is not None:
        states = [StepState.model_validate(recorded[i]) for i in step_ids if i in recorded]
    else:
        states = []
        for step_id in step_ids:
            state = await handle.query(wire.STEP, StepQuery(step_id=step_id), result_type=StepState)
            if state is not None:
                states.append(state)
    return {s.id: s for s in states if s.status in DONE}


def _copy_artifacts(
    settings: Settings, source: str, target: str, done: dict[str, StepState]
) -> None:
    """Copy into the new run the stored values the taken-over outputs refer to (blocking:
    store reads and writes): a reference names an artifact of the run it is in."""
    outputs = [s.output for s in done.values()]
    names = set(_ref_names(outputs))
    names |= {m.group(1) for m in refs.MARKER.finditer(json.dumps(outputs))}
    store = store_for(settings)
    for name in sorted(names):
        store.put(target, store.get(source, name))


def _ref_names(value: Any) -> list[str]:
    if refs.is_ref(value):
        return [value["artifact"]]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _ref_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _ref_names(v)]
    return []
