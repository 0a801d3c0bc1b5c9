"""Quick tools (short, read-only, safe to run again: `echo`, `read_file`) run as local
activities in runs started with that change: no task-queue round trip, no activity events,
and a worker lost in the middle of them costs the calls since its last workflow task."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from longrun import wire
from longrun.attributes import STATUS_ATTRIBUTE
from longrun.catalogue import CATALOGUE
from longrun.contracts import Plan, RunConfig, RunInput, Step
from longrun.plans import normalize_plan
from longrun.settings import Settings
from tests.helpers import Poll, start_worker, stop_processes, submit
from workflows import RunWorkflow

pytestmark = pytest.mark.long

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


async def _events(client: Client, run_id: str) -> list[EventType.ValueType]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [e.event_type for e in history.events]


async def _scheduled_tools(client: Client, run_id: str) -> list[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == SCHEDULED
    ]


async def test_quick_tools_run_as_local_activities(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "w", "tool": "write_file", "args": {"path": "q.txt", "content": "quick"}},
            {"id": "r", "tool": "read_file", "args": {"path": "q.txt"}, "depends_on": ["w"]},
            {"id": "e", "tool": "echo", "args": {"value": "{{steps.r.output.content}}"}},
            {"id": "gate", "approval": {"message": "go on?"}, "depends_on": ["e"]},
            {"id": "again", "tool": "echo", "args": {"value": 2}, "depends_on": ["gate"]},
        ],
    )
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    steps = {s["id"]: s for s in run["steps"]}
    assert steps["r"]["output"]["content"] == "quick"
    assert steps["e"]["output"] == {"value": "quick"}
    assert steps["again"]["output"] == {"value": 2}
    assert all(s["attempts"] == 1 for s in steps.values() if s["id"] != "gate")
    # Only the write went through the task queue; the reads are markers in the history.
    assert await _scheduled_tools(client, run_id) == ["tool.write_file"]
    assert (await _events(client, run_id)).count(MARKER) >= 3


async def test_a_failing_quick_tool_fails_its_step_saying_why(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(api, [{"id": "bad", "tool": "read_file", "args": {"path": "none"}}])
    run = await wait_run(run_id)
    assert run["status"] == "failed", run
    assert "no file 'none'" in run["error"], run
    assert await _scheduled_tools(client, run_id) == []


async def test_runs_started_before_the_change_keep_calling_them_as_activities(
    client: Client, worker: Worker, settings: Settings
) -> None:
    # Started with no memo naming the change (as every run started before it was).
    run_id = f"run-{uuid.uuid4().hex}"
    plan = Plan(steps=[Step(id=f"s{i}", tool="echo", args={"value": i}) for i in range(3)])
    inp = RunInput(
        run_id=run_id,
        goal="echo three times",
        plan=normalize_plan(plan, CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    await client.execute_workflow(
        RunWorkflow.run,
        inp,
        id=run_id,
        task_queue=settings.task_queue,
        search_attributes=TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "running")]),
    )
    assert await _scheduled_tools(client, run_id) == ["tool.echo"] * 3
    assert "quick-tools-local" in wire.STARTED_WITH


async def test_a_worker_killed_among_quick_steps_runs_them_again_and_applies_nothing_twice(
    api: httpx.AsyncClient, client: Client, settings: Settings, wait_run: Poll, tmp_path: Path
) -> None:
    reads = 400
    steps: list[dict[str, object]] = [
        {"id": "w", "tool": "write_file", "args": {"path": "k.txt", "content": "kept"}}
    ]
    before = "w"
    for i in range(reads):
        steps.append(
            {"id": f"r{i}", "tool": "read_file", "args": {"path": "k.txt"}, "depends_on": [before]}
        )
        before = f"r{i}"
    steps.append(
        {
            "id": "last",
            "tool": "write_file",
            "args": {"path": "done.txt", "content": f"{{{{steps.r{reads - 1}.output.content}}}}"},
            "depends_on": [before],
        }
    )
    first = start_worker(settings, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    try:
        run_id = await submit(api, steps)
        # Killed once the reads have begun: after the first write's result came back.
        handle = client.get_workflow_handle(run_id)
        for _ in range(1200):
            history = await handle.fetch_history()
            if any(
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED for e in history.events
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the first write never completed")
        await asyncio.sleep(random.uniform(0, 0.3))
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = start_worker(settings, tmp_path)
        run = await wait_run(run_id, timeout_s=180)
    finally:
        stop_processes(first, second)
    assert run["status"] == "completed", run
    outputs = {s["id"]: s["output"] for s in run["steps"]}
    assert all(outputs[f"r{i}"]["content"] == "kept" for i in range(reads))
    # The killed worker's open workflow task timed out: its reads were run again by the next.
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT in await _events(client, run_id)
    # Each write (the only calls that change anything) was scheduled once.
    assert await _scheduled_tools(client, run_id) == ["tool.write_file"] * 2
    workspace = settings.workspaces_dir / run_id / "workspace"
    assert (workspace / "done.txt").read_text() == "kept"
