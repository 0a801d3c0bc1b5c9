"""Runs of explicit plans end to end: real Temporal, real worker, API, stand-in over HTTP."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from longrun.attributes import (
    COST_ATTRIBUTE,
    PENDING_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    STATUS_ATTRIBUTE,
    STEPS_DONE_ATTRIBUTE,
    STEPS_TOTAL_ATTRIBUTE,
)
from longrun.contracts import ToolCall
from longrun.dev.stack import ServerThread
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, allow, sleep_for, sleeping, submit
from tests.workflows.test_replay import replays_and_is_kept


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


async def test_a_decision_that_ends_the_run_is_answered_before_the_run_ends(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    """The API asks the run for the decision's outcome, which Temporal delivers once the
    workflow task that took it has completed. Were the run to end in that task, a worker
    would replay its whole history to answer; so it ends in a later one."""
    for decision, status in [("approve", "completed"), ("reject", "failed")]:
        run_id = await submit(api, [{"id": "gate", "approval": {"message": "go on?"}}])
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
        said = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": decision})
        assert said.status_code == 202, said.text
        assert (await wait_run(run_id))["status"] == status
        events = [e async for e in client.get_workflow_handle(run_id).fetch_history_events()]
        kinds = [e.event_type for e in events]
        signalled = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
        completed = kinds.index(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, signalled)
        after = kinds[completed + 1 :]
        # The task that took the decision started a timer; the run ended in a later one.
        assert EventType.EVENT_TYPE_TIMER_FIRED in after, after
        took = after[: after.index(EventType.EVENT_TYPE_TIMER_FIRED)]
        assert EventType.EVENT_TYPE_TIMER_STARTED in took, after
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in took, after
        await replays_and_is_kept(client, run_id, f"decision_ends_the_run_{decision}")


async def _attributes(client: Client, run_id: str) -> dict[str, object]:
    desc = await client.get_workflow_handle(run_id).describe()
    found = desc.typed_search_attributes
    return {
        "status": found.get(STATUS_ATTRIBUTE),
        "phase": found.get(PHASE_ATTRIBUTE),
        "done": found.get(STEPS_DONE_ATTRIBUTE),
        "total": found.get(STEPS_TOTAL_ATTRIBUTE),
        "pending": found.get(PENDING_ATTRIBUTE),
        "cost": found.get(COST_ATTRIBUTE),
    }


async def test_the_web_ui_can_filter_runs_by_progress(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps: list[dict[str, object]] = [
        {"id": f"s{i}", "tool": "echo", "args": {"value": i}} for i in range(30)
    ]
    steps.append({"id": "gate", "tool": "write_file", "args": {"path": "x", "content": "x"}})
    steps[-1]["requires_approval"] = True
    run_id = await submit(api, steps)
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    # Status and pending approvals are published at once, with the progress so far.
    assert await _attributes(client, run_id) == {
        "status": "waiting_approval",
        "phase": "acting",
        "done": 30,
        "total": 31,
        "pending": 1,
        "cost": 0.0,
    }
    query = f"WorkflowId = '{run_id}' AND LongrunPendingApprovals > 0 AND LongrunStepsDone >= 30"
    for _ in range(100):  # visibility follows the run's own record shortly after
        if await client.count_workflows(query) and (await client.count_workflows(query)).count:
            break
        await asyncio.sleep(0.1)
    assert (await client.count_workflows(query)).count == 1

    response = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    assert response.status_code == 202, response.text
    assert (await wait_run(run_id))["status"] == "completed"
    ended = await _attributes(client, run_id)
    assert ended["status"] == "completed"
    assert (ended["done"], ended["total"], ended["pending"]) == (31, 31, 0)
    # 31 steps published in a few upserts, not one per step: each is a history event.
    upserts = [
        list(fields)
        async for e in client.get_workflow_handle(run_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "LongrunStepsDone"
        in (
            fields
            := e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        )
    ]
    assert 2 <= len(upserts) <= 6, upserts


async def test_a_run_starts_showing_its_progress_and_records_no_patch_marker(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps = [{"id": f"s{i}", "tool": "echo", "args": {"value": i}} for i in range(3)]
    run_id = await submit(api, steps)
    handle = client.get_workflow_handle(run_id)
    described = await handle.describe()
    assert "progress-at-start" in await described.memo_value("started_with", [])
    assert (await wait_run(run_id))["status"] == "completed"
    events = [e async for e in handle.fetch_history_events()]
    first = events[0].workflow_execution_started_event_attributes.search_attributes
    assert set(first.indexed_fields) >= {
        "LongrunStatus",
        "LongrunPhase",
        "LongrunStepsDone",
        "LongrunStepsTotal",
        "LongrunCostUsd",
        "LongrunPendingApprovals",
    }
    # Started with the baseline (its memo says so): no marker, no TemporalChangeVersion.
    markers = [e.marker_recorded_event_attributes.marker_name for e in events]
    assert "core_patch" not in markers, markers
    upserted = [
        set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    # What it started showing is not published again: only what changed, at its end.
    assert upserted and all("LongrunStepsTotal" not in fields for fields in upserted), upserted
    assert all("TemporalChangeVersion" not in fields for fields in upserted), upserted
    assert await _attributes(client, run_id) == {
        "status": "completed",
        "phase": "acting",
        "done": 3,
        "total": 3,
        "pending": 0,
        "cost": 0.0,
    }


class Flaky:
    """A local HTTP service whose paths fail a set number of times before answering."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.keys: dict[str, list[str]] = {}
        app = FastAPI()

        @app.api_route("/{name}/{failures}/{final}", methods=["GET", "POST"])
        async def flaky(name: str, failures: int, final: int, request: Request) -> Response:
            count = self.hits[name] = self.hits.get(name, 0) + 1
            self.keys.setdefault(name, []).append(request.headers.get("idempotency-key", ""))
            status = 503 if count <= failures else final
            return JSONResponse({"name": name, "hit": count}, status_code=status)

        self.server = ServerThread(app)


@pytest.fixture(scope="module")
def flaky() -> Iterator[Flaky]:
    service = Flaky()
    with service.server:
        yield service


@pytest.fixture(autouse=True)
def _flaky_allowed(settings: Settings, flaky: Flaky) -> None:
    """Runs of every test here may reach the flaky service."""
    allow(settings, flaky.server.url)


FAST_RETRY = {"max_attempts": 5, "initial_interval_s": 0.1, "backoff": 1.0}


async def test_transient_failures_are_retried_until_success(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, flaky: Flaky, wait_run: Poll
) -> None:
    standin.rule(match="flaky model", status=500, times=1)
    standin.rule(match="flaky model", status=429, retry_after=1, times=1)
    url = f"{flaky.server.url}/transient/2/200"
    run_id = await submit(
        api,
        [
            {"id": "call", "tool": "http_request", "args": {"url": url}, "retry": FAST_RETRY},
            {"id": "ask", "model": {"prompt": "flaky model, please"}, "retry": FAST_RETRY},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert [s["attempts"] for s in run["steps"]] == [3, 3]
    assert flaky.hits["transient"] == 3
    # One idempotency key for every attempt of the step.
    assert flaky.keys["transient"] == [f"{run_id}:call"] * 3
    calls = standin.calls("flaky model")
    assert [c["outcome"] for c in calls] == ["500", "429", "ok"]
    # Retry-After (1s) overrides the 0.1s retry interval.
    assert calls[2]["at"] - calls[1]["at"] >= 1.0
    assert run["usage"]["model_calls"] == 1


async def test_non_retryable_errors_fail_the_step_after_one_attempt(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, flaky: Flaky, wait_run: Poll
) -> None:
    url = f"{flaky.server.url}/missing/0/404"
    run_id = await submit(
        api,
        [
            {"id": "call", "tool": "http_request", "args": {"url": url}},
            {"id": "after", "tool": "echo"},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    call, after = run["steps"]
    assert call["status"] == "failed"
    assert call["attempts"] == 1
    assert "answered 404" in call["error"]
    assert flaky.hits["missing"] == 1
    assert after["status"] == "cancelled"
    assert "step 'call' failed" in run["error"]

    standin.rule(match="refused prompt", status=400, message="model 'x' does not exist")
    run_id = await submit(api, [{"id": "ask", "model": {"prompt": "refused prompt"}}])
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert run["steps"][0]["attempts"] == 1
    assert "model 'x' does not exist" in run["steps"][0]["error"]
    assert len(standin.calls("refused prompt")) == 1


async def test_rejection_fails_the_run_unless_the_step_says_skip(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    steps = [
        {"id": "maybe", "tool": "echo", "args": {"value": 1}, "requires_approval": True},
        {"id": "after", "tool": "echo", "depends_on": ["maybe"]},
    ]
    rejected = await submit(api, steps)
    skipped = await submit(api, [{**steps[0], "on_reject": "skip"}, steps[1]])
    for run_id in (rejected, skipped):
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
        response = await api.post(
            f"/v1/runs/{run_id}/approvals/apr-maybe",
            json={"decision": "reject", "comment": "not today"},
        )
        assert response.status_code == 202

    run = await wait_run(rejected)
    assert run["status"] == "failed"
    assert [s["status"] for s in run["steps"]] == ["failed", "cancelled"]
    assert "not today" in run["steps"][0]["error"]
    assert run["approvals"][0]["decision"] == "reject"

    run = await wait_run(skipped)
    assert run["status"] == "completed"
    assert [s["status"] for s in run["steps"]] == ["skipped", "completed"]


async def test_steps_without_mutual_dependencies_run_in_parallel(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    # Each step waits for the other's flag file: the run completes only if both run at once.
    def meet(mine: str, theirs: str) -> str:
        return (
            "import pathlib, time\n"
            f"pathlib.Path('{mine}').touch()\n"
            "for _ in range(300):\n"
            f"    if pathlib.Path('{theirs}').exists(): break\n"
            "    time.sleep(0.05)\n"
            "else: raise SystemExit('never met')\n"
        )

    run_id = await submit(
        api,
        [
            {"id": "left", "tool": "python", "args": {"code": meet("l", "r")}, "depends_on": []},
            {"id": "right", "tool": "python", "args": {"code": meet("r", "l")}, "depends_on": []},
            {"id": "join", "tool": "echo", "depends_on": ["left", "right"]},
        ],
    )
    # python steps are irreversible, so each asks for approval first.
    await wait_run(run_id, lambda r: len(r["pending_approvals"]) == 2)
    for step in ("left", "right"):
        await api.post(f"/v1/runs/{run_id}/approvals/apr-{step}", json={"decision": "approve"})
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert list(run["result"]) == ["join"]


async def test_cancel_stops_the_running_tool(
    api: httpx.AsyncClient, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    duration = sleep_for()
    script = f"echo started > pid; sleep {duration}; touch finished"
    run_id = await submit(
        api,
        [
            {
                "id": "slow",
                "tool": "shell",
                "args": {"argv": ["sh", "-c", script]},
                "requires_approval": False,
            },
            {"id": "never", "tool": "echo"},
        ],
    )
    workspace = settings.workspaces_dir / run_id / "workspace"
    await wait_run(
        run_id, lambda r: (workspace / "pid").exists() and r["steps"][0]["status"] == "running"
    )
    [pid] = sleeping(duration)  # its pid on this host, not the one it has in its sandbox
    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "cancelled"
    assert [s["status"] for s in run["steps"]] == ["cancelled", "cancelled"]
    for _ in range(100):  # the kill follows the next heartbeat
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the cancelled command is still running")
    assert not (workspace / "finished").exists()
    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 409


async def test_a_reference_to_a_missing_field_fails_the_step_clearly(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "a", "tool": "echo", "args": {"value": {"x": 1}}},
            {"id": "b", "tool": "echo", "args": {"value": "{{steps.a.output.value.y}}"}},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert "no field 'y'" in run["steps"][1]["error"]


async def test_malformed_and_slow_model_answers_are_retried(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="garbled", malformed=True, times=1)
    standin.rule(match="sluggish", delay_s=5, times=1)
    run_id = await submit(
        api,
        [
            {"id": "garbled", "model": {"prompt": "garbled answer"}, "retry": FAST_RETRY},
            {
                "id": "sluggish",
                "model": {"prompt": "sluggish answer"},
                "retry": FAST_RETRY,
                "timeout_s": 1,
            },
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert [s["attempts"] for s in run["steps"]] == [2, 2]
    assert [c["outcome"] for c in standin.calls("garbled")] == ["malformed", "ok"]
    assert len(standin.calls("sluggish")) == 2


async def test_references_render_as_text_where_text_is_needed(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "a", "tool": "echo", "args": {"value": {"n": 5, "tag": "textual"}}},
            {"id": "gate", "approval": {"message": "{{steps.a.output.value.n}}"}},
            {"id": "ask", "model": {"prompt": "{{steps.a.output.value}}"}},
        ],
    )
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    [pending] = run["pending_approvals"]
    assert pending["summary"] == "5"
    await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    run = await wait_run(run_id)
    assert run["status"] == "completed"
    [call] = standin.calls("textual")
    assert call["messages"][-1]["content"] == '{"n": 5, "tag": "textual"}'


async def test_an_ended_run_waits_for_nobody(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "gate", "approval": {"message": "never answered"}},
            {"id": "slow", "wait": {"seconds": 0.5}, "depends_on": []},
            {"id": "bad", "tool": "read_file", "args": {"path": "absent"}},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert run["pending_approvals"] == []
    assert run["approvals"][0]["decision"] is None


async def test_status_previews_big_outputs_and_the_step_endpoint_has_them_whole(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    # 5,000 characters: under the artifact threshold, over what status lists per step.
    run_id = await submit(
        api,
        [
            {"id": "big", "tool": "echo", "args": {"value": "y" * 5000}},
            {"id": "small", "tool": "echo", "args": {"value": 1}},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    big, small = run["steps"]
    assert big["output"]["truncated"] is True
    assert big["output"]["chars"] > 5000
    assert small["output"] == {"value": 1}
    whole = await api.get(f"/v1/runs/{run_id}/steps/big")
    assert whole.status_code == 200
    assert whole.json()["output"] == {"value": "y" * 5000}
    assert (await api.get(f"/v1/runs/{run_id}/steps/nope")).status_code == 404
    assert (await api.get("/v1/runs/no-such-run/steps/big")).status_code == 404


async def test_a_runs_later_tool_calls_know_its_workspace_was_used(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps = [
        {"id": "a", "tool": "write_file", "args": {"path": "a", "content": "a"}},
        {"id": "b", "tool": "write_file", "args": {"path": "b", "content": "b"}},
    ]
    run_id = await submit(api, steps)
    assert (await wait_run(run_id))["status"] == "completed"
    used = []
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "tool.write_file":
                [call] = await client.data_converter.decode(scheduled.input.payloads, [ToolCall])
                used.append(call.workspace_used)
    # The second may not find itself on a worker without the workspace the first made.
    assert used == [False, True]
