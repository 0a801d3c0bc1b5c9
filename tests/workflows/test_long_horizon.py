"""Long goal-only runs: prompts stay small, the journal brings back what a step needs, old
progress is compacted and the loop continues as new, with a real Temporal server and the
stand-in model over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from longrun.settings import Settings
from tests.helpers import Poll, StandIn

pytestmark = pytest.mark.long


def api_with(settings: Settings, **changes: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(settings.model_copy(update=changes)))
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


@pytest.fixture
async def short(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API with history segments of two agent steps."""
    async with api_with(settings, continue_as_new_every=2) as http:
        yield http


def user_message(call: dict[str, Any]) -> str:
    content: str = call["messages"][1]["content"]
    return content


async def segments(client: Client, run_id: str) -> list[Any]:
    return [wf async for wf in client.list_workflows(f"WorkflowId = '{run_id}'")]


async def test_a_fact_noted_at_step_5_is_in_the_prompt_at_step_800(
    settings: Settings, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "long-horizon"
    steps = [
        {"id": f"s{i:03}", "intent": f"Routine chore number {i}", "expected_evidence": "done"}
        for i in range(1, 811)
    ]
    steps[4]["intent"] = "Find the vault code and keep it"
    steps[799]["intent"] = "Open the vault with the vault code"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": {"steps": steps}},
            {
                "match": [marker, "Your step now: Find the vault code"],
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "note", "arguments": {"text": "The vault code is 4711"}}],
            },
        ]
    )
    async with api_with(settings, continue_as_new_every=200) as api:
        response = await api.post(
            "/v1/runs",
            json={"goal": f"{marker}: open the vault", "tools": ["note"], "max_steps": 1000},
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        run = await wait_run(run_id, timeout_s=900, http=api)
    assert run["status"] == "completed", run["error"]
    assert [p["status"] for p in run["plan"]] == ["completed"] * 810

    acts = standin.calls(marker, role="act")
    at_800 = [user_message(c) for c in acts if "Your step now: Open the vault" in user_message(c)]
    at_700 = [
        user_message(c)
        for c in acts
        if "Your step now: Routine chore number 700\n" in user_message(c)
    ]
    assert at_800 and at_700
    assert "The vault code is 4711" in at_800[0]  # recalled from the journal...
    assert "4711" not in at_700[0]  # ...where it matters, not carried everywhere
    assert "Progress summary:" in at_800[0]  # older progress was compacted
    assert len(standin.calls("Finished steps to merge in", role="complete")) >= 80  # every 9 steps

    found = await segments(client, run_id)
    assert len(found) >= 4  # 810 steps in segments of 200
    for segment in found:
        desc = await client.get_workflow_handle(run_id, run_id=segment.run_id).describe()
        info = desc.raw_description.workflow_execution_info
        assert info.history_length < 10_240
        assert info.history_size_bytes < 10 * 1024 * 1024
        # What a segment was handed stays under Temporal's warning size for one payload.
        history = await client.get_workflow_handle(run_id, run_id=segment.run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert sum(len(p.data) for p in started.input.payloads) < 512 * 1024


async def test_an_agent_run_continues_as_new_and_its_approvals_work_after(
    short: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-segments"
    steps = [{"id": f"a{i}", "intent": f"part {i}", "expected_evidence": "done"} for i in range(6)]
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": {"steps": steps}},
            {
                "match": [marker, "Your step now: part 5"],
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "shell", "arguments": {"argv": ["echo", "deployed"]}}],
            },
        ]
    )
    response = await short.post(
        "/v1/runs", json={"goal": f"{marker}: deploy", "tools": ["shell"], "max_steps": 20}
    )
    run_id = response.json()["run_id"]
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=short)
    assert len(await segments(client, run_id)) >= 3  # a0..a4 in segments of two
    [pending] = run["pending_approvals"]
    assert "shell" in pending["summary"]
    assert [p["status"] for p in run["plan"]] == ["completed"] * 5 + ["running"]
    assert run["steps"][-1]["status"] == "waiting_approval"  # the tool call it asked for
    response = await short.post(
        f"/v1/runs/{run_id}/approvals/{pending['approval_id']}", json={"decision": "approve"}
    )
    assert response.status_code == 202
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run["error"]
    assert run["usage"]["tool_calls"] == 1
    # Every model call of every segment is on the ledger: 1 plan, 7 act turns, 6 checks,
    # 1 acceptance check (the stand-in judges it).
    assert run["usage"]["model_calls"] == len(standin.calls(marker))
    trail = [e["action"] for e in (await short.get(f"/v1/runs/{run_id}/audit")).json()["entries"]]
    assert trail.count("continued as new") >= 2
    assert "approve" in trail[trail.index("continued as new") :]
    assert trail[-1] == "completed"


async def test_a_small_prompt_budget_cuts_older_tool_results_of_a_step(
    settings: Settings, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "tight-budget"
    results = [f"result {i} " + "z" * 900 for i in range(4)]
    standin.scenario(
        [
            {
                "match": marker,
                "role": "plan",
                "json": {"steps": [{"id": "a", "intent": "gather", "expected_evidence": "x"}]},
            },
            *[
                {
                    "match": marker,
                    "role": "act",
                    "times": 1,
                    "tool_calls": [{"name": "echo", "arguments": {"value": r}}],
                }
                for r in results
            ],
        ]
    )
    async with api_with(settings, prompt_token_budget=1000) as api:
        response = await api.post("/v1/runs", json={"goal": f"{marker}: gather", "tools": ["echo"]})
        run = await wait_run(response.json()["run_id"], http=api)
    assert run["status"] == "completed", run["error"]
    last_turn = standin.calls(marker, role="act")[4]["messages"]
    tool_results = [m["content"] for m in last_turn if m["role"] == "tool"]
    assert len(tool_results) == 4
    assert all("older result cut" in r for r in tool_results[:2])
    assert [results[2] in tool_results[2], results[3] in tool_results[3]] == [True, True]


async def test_an_agent_lists_its_latest_hundred_tool_calls_and_counts_the_rest(
    short: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "many-calls"
    plan = [{"id": f"p{i}", "intent": f"part {i}", "expected_evidence": "x"} for i in range(3)]
    many = [{"name": "echo", "arguments": {"value": i}} for i in range(101)]
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": {"steps": plan}},
            {"match": [marker, "step now: part 0"], "role": "act", "times": 1, "tool_calls": many},
            {
                "match": [marker, "step now: part 1"],
                "role": "act",
                "times": 1,
                "tool_calls": many[:1],
            },
            {
                "match": [marker, "step now: part 2"],
                "role": "act",
                "times": 1,
                "tool_calls": many[:2],
            },
        ]
    )
    response = await short.post(
        "/v1/runs", json={"goal": f"{marker}: call a lot", "tools": ["echo"]}
    )
    run_id = response.json()["run_id"]
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run["error"]
    assert run["usage"]["tool_calls"] == 104
    # p0 and p1 made 102 calls before the hand-over, which carried the latest 100 and
    # counted 2; p2 made 2 more, so status lists 100 of the 102 it holds and counts 2 more.
    assert len(await segments(client, run_id)) == 2
    assert run["steps_omitted"] == 4
    assert len(run["steps"]) == 100
    assert run["steps"][-1]["id"] == "p2-t104"
