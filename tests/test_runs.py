"""Runs of explicit plans end to end: real Temporal, real worker, API, stand-in over HTTP."""

from __future__ import annotations

import httpx
from temporalio.worker import Worker

from tests.helpers import Poll, StandIn, submit


async def test_plan_with_approval_completes(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="Summarize e2e", reply="all healthy")
    run_id = await submit(
        api,
        [
            {"id": "fetch", "tool": "echo", "args": {"value": {"status": "ok"}}},
            {
                "id": "summarize",
                "model": {"prompt": "Summarize e2e: {{steps.fetch.output.value.status}}"},
            },
            {
                "id": "publish",
                "tool": "write_file",
                "args": {"path": "report.md", "content": "{{steps.summarize.output.text}}"},
                "requires_approval": True,
            },
        ],
        labels={"team": "ops"},
    )
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    assert [s["status"] for s in run["steps"]] == ["completed", "completed", "waiting_approval"]
    [pending] = run["pending_approvals"]
    assert pending["step_id"] == "publish"
    assert "all healthy" in pending["summary"]

    response = await api.post(
        f"/v1/runs/{run_id}/approvals/{pending['approval_id']}",
        json={"decision": "approve", "comment": "looks right"},
    )
    assert response.status_code == 202, response.text
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["result"] == {"publish": run["steps"][2]["output"]}
    assert run["usage"]["model_calls"] == 1
    assert run["usage"]["input_tokens"] > 0
    [record] = run["approvals"]
    assert record["decision"] == "approve"
    assert record["comment"] == "looks right"
    assert record["decided_at"] is not None
    calls = standin.calls("Summarize e2e: ok")
    assert len(calls) == 1
