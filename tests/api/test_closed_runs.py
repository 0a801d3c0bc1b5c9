"""An ended run is read as it stored itself when it ended (status, steps, audit): no replay,
so it answers with no worker at all; one ended from outside (terminated) falls back to the
query; the API's kept answer for an ended run gives way to a new execution of it (reset)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, ResetReapplyType
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import Client
from temporalio.worker import Worker

from api import reading
from longrun import wire
from longrun.contracts import RunState
from longrun.settings import Settings
from longrun.temporal import described
from tests.helpers import Poll, start_worker, stop_processes, submit


def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    """A status without what the API adds. (An ended run's time used stops at its end, so
    it is the same however late it is read.)"""
    return {
        **run,
        "links": None,
        "retrying": None,
        "schedule_id": None,
    }


async def test_an_ended_run_answers_from_what_it_stored_without_a_worker(
    api: httpx.AsyncClient,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    wait_run: Poll,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The terminated run's status waits for a worker that never comes: 2 s, not the API's 20.
    monkeypatch.setattr(reading, "QUERY_WAIT_S", 2.0)
    worker = start_worker(settings, tmp_path)
    try:
        completed = await submit(api, [{"id": "a", "tool": "echo", "args": {"value": 1}}])
        failed = await submit(api, [{"id": "x", "tool": "read_file", "args": {"path": "no"}}])
        cancelled = await submit(api, [{"id": "w", "wait": {"seconds": 600}}])
        terminated = await submit(api, [{"id": "t", "wait": {"seconds": 600}}])
        await wait_run(cancelled, lambda r: r["steps"][0]["status"] == "running")
        assert (await api.post(f"/v1/runs/{cancelled}/cancel", json={})).status_code == 202
        await wait_run(terminated, lambda r: r["steps"][0]["status"] == "running")
        await client.get_workflow_handle(terminated).terminate("from outside")
        ended = {run_id: await wait_run(run_id) for run_id in (completed, failed, cancelled)}
        assert [r["status"] for r in ended.values()] == ["completed", "failed", "cancelled"]
        audits = {run_id: (await api.get(f"/v1/runs/{run_id}/audit")).json() for run_id in ended}
        step = (await api.get(f"/v1/runs/{completed}/steps/a")).json()
        assert step["output"] == {"value": 1}
        # What the API answers is what the run's own query answers.
        for run_id, run in ended.items():
            desc = await client.get_workflow_handle(run_id).describe()
            assert await desc.memo_value(wire.FINAL_RECORD_MEMO, None)
            queried = await client.get_workflow_handle(run_id).query(
                wire.STATUS, result_type=RunState
            )
            as_queried = {**queried.model_dump(mode="json"), "links": None, "retrying": None}
            assert _comparable(run) == _comparable(as_queried)
        pages = {
            run_id: (await api.get(f"/v1/runs/{run_id}/events/page")).json() for run_id in ended
        }
    finally:
        stop_processes(worker)

    # No worker: an ended run's events come from its record, and the stream ends.
    for run_id, page in pages.items():
        assert page["ended"] and page["events"][-1]["type"] == "run.ended"
        async with asyncio.timeout(30):
            again = (await api.get(f"/v1/runs/{run_id}/events/page")).json()
            streamed = await api.get(f"/v1/runs/{run_id}/events")
        assert again == page
        ids = [int(line[3:]) for line in streamed.text.splitlines() if line.startswith("id:")]
        assert ids == [e["id"] for e in page["events"]]
        later = (await api.get(f"/v1/runs/{run_id}/events/page?after=2")).json()
        assert [e["id"] for e in later["events"]] == ids[2:] and later["ended"]

    # No worker: an ended run's status needs none, a terminated one's needs the query.
    for run_id, run in ended.items():
        again = await api.get(f"/v1/runs/{run_id}")
        assert again.status_code == 200, again.text
        assert _comparable(again.json()) == _comparable(run)
        trail = await api.get(f"/v1/runs/{run_id}/audit")
        assert trail.status_code == 200 and trail.json() == audits[run_id]
        assert "cancel" in [e["action"] for e in audits[cancelled]["entries"]]
    assert (await api.get(f"/v1/runs/{completed}/steps/a")).json() == step
    assert (await api.get(f"/v1/runs/{completed}/steps/zz")).status_code == 404
    unstored = await api.get(f"/v1/runs/{terminated}")
    assert unstored.status_code == 503


async def test_a_reset_run_is_read_afresh_not_as_it_was_kept(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # The API keeps an ended run's answer; Temporal can still reset the run to an earlier
    # point, which starts a new execution of it: that one is read, not the kept answer.
    run_id = await submit(api, [{"id": "gate", "approval": {"message": "go?"}}])
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    decided = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    assert decided.status_code == 202, decided.text
    ended = await wait_run(run_id)
    assert ended["status"] == "completed"
    assert (await api.get(f"/v1/runs/{run_id}")).json() == ended  # as kept: the same answer

    handle = client.get_workflow_handle(run_id)
    first_task = next(
        e.event_id
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id),
            reason="test: back to the gate",
            workflow_task_finish_event_id=first_task,
            request_id=str(uuid.uuid4()),
            reset_reapply_type=ResetReapplyType.RESET_REAPPLY_TYPE_NONE,  # not the approval
        )
    )
    again = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    assert [a["approval_id"] for a in again["pending_approvals"]] == ["apr-gate"]


async def test_a_deleted_run_is_gone_though_its_answer_was_kept(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(api, [{"id": "a", "tool": "echo", "args": {"value": 1}}])
    assert (await wait_run(run_id))["status"] == "completed"
    assert (await api.get(f"/v1/runs/{run_id}")).status_code == 200  # kept from here on
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=run_id)
        )
    )
    # Temporal deletes in the background (seconds on a busy machine); once it has, the
    # kept answer gives way at the next read.
    for _ in range(600):
        if await described(client, run_id) is None:
            break
        await asyncio.sleep(0.1)
    answer = await api.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 404 and run_id in answer.json()["detail"]
