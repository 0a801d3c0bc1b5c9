"""Budgets, pauses and the audit trail: a run stops before it overspends, waits for a person,
and every decision about it is on record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from api.app import create_app
from longrun.contracts import Limits, Price
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, submit


def ask(step_id: str, text: str) -> dict[str, Any]:
    return {"id": step_id, "model": {"prompt": text}}


@pytest.fixture
async def priced(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API with a price table and budget ceilings."""
    configured = settings.model_copy(
        update={
            "prices": {"test-model": Price(input=1.0, output=1.0)},
            "budget_ceilings": Limits(max_model_calls=10),
        }
    )
    transport = httpx.ASGITransport(app=create_app(configured))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


@pytest.mark.parametrize(
    ("limit", "value", "raised"),
    [
        ("max_model_calls", 1, 5),
        ("max_input_tokens", 1, 100_000),
        ("max_output_tokens", 1, 100_000),
        ("max_cost_usd", 0.000001, 1.0),
        ("max_tool_calls", 1, 5),
    ],
)
async def test_each_limit_pauses_before_the_next_call_until_raised(
    priced: httpx.AsyncClient,
    worker: Worker,
    standin: StandIn,
    wait_run: Poll,
    limit: str,
    value: float,
    raised: float,
) -> None:
    marker = f"budget-{limit}"
    if limit == "max_tool_calls":
        steps = [{"id": "one", "tool": "echo"}, ask("two", f"{marker} second")]
    else:
        steps = [ask("one", f"{marker} first"), ask("two", f"{marker} second")]
    run_id = await submit(priced, steps, budget={limit: value})
    run = await wait_run(run_id, lambda r: r["status"] != "running", http=priced)
    assert run["status"] == "paused", run
    assert run["pause_reason"] == "budget"
    assert limit in run["exhausted"]
    assert run["budget"]["limits"][limit]["limit"] == value
    assert run["budget"]["limits"][limit]["used"] >= value
    assert [s["status"] for s in run["steps"]] == ["completed", "pending"]
    await asyncio.sleep(0.5)
    assert standin.calls(f"{marker} second") == []  # nothing was called while paused

    response = await priced.post(f"/v1/runs/{run_id}/budget", json={limit: raised})
    assert response.status_code == 202, response.text
    run = await wait_run(run_id, http=priced)
    assert run["status"] == "completed", run
    assert len(standin.calls(f"{marker} second")) == 1


async def test_time_budget_pauses_or_fails_as_the_run_says(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    steps = [{"id": "nap", "wait": {"seconds": 1.2}}, {"id": "after", "tool": "echo"}]
    paused = await submit(api, steps, budget={"max_duration_s": 1})
    # A run that fails at its time budget fails while it waits, for a timer or a person.
    fail = {"max_duration_s": 1, "on_budget_exhausted": "fail"}
    long_nap = [{"id": "nap", "wait": {"seconds": 600}}, {"id": "after", "tool": "echo"}]
    failed = await submit(api, long_nap, budget=fail)
    gate = [{"id": "gate", "approval": {"message": "ok?"}}]
    gated = await submit(api, gate, budget=fail)
    raised = await submit(api, gate, budget={**fail, "max_duration_s": 3})
    assert (await api.post(f"/v1/runs/{raised}/budget", json={"max_duration_s": 3600})).is_success
    run = await wait_run(paused, lambda r: r["status"] == "paused")
    assert run["exhausted"] == ["max_duration_s"]
    run = await wait_run(failed)
    assert (run["status"], run["error"]) == ("failed", "the run's time budget (1 s) is used up")
    assert [s["status"] for s in run["steps"]] == ["cancelled", "cancelled"]
    assert run["steps"][1]["error"] == "not started: the run's time budget (1 s) is used up"
    run = await wait_run(gated)
    assert (run["status"], run["error"]) == ("failed", "the run's time budget (1 s) is used up")
    assert run["pending_approvals"] == []
    await asyncio.sleep(3.5)  # past the first limit: the raised one holds
    decided = await api.post(f"/v1/runs/{raised}/approvals/apr-gate", json={"decision": "approve"})
    assert decided.status_code == 202, decided.text
    assert (await wait_run(raised))["status"] == "completed"
    await api.post(f"/v1/runs/{paused}/budget", json={"max_duration_s": 3600})
    assert (await wait_run(paused))["status"] == "completed"


async def test_budgets_above_the_ceiling_are_refused(
    priced: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    steps = [{"id": "a", "tool": "echo"}]
    response = await priced.post(
        "/v1/runs", json={"goal": "g", "plan": {"steps": steps}, "budget": {"max_model_calls": 11}}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "budget", "max_model_calls"]
    # Without a limit of its own, a run gets the ceiling.
    run_id = await submit(priced, steps)
    run = await wait_run(run_id, http=priced)
    assert run["budget"]["limits"]["max_model_calls"]["limit"] == 10
    raised = await priced.post(f"/v1/runs/{run_id}/budget", json={"max_model_calls": 99})
    assert raised.status_code == 422


async def test_pause_waits_for_the_call_in_flight_then_resume_continues(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="pause-slow", delay_s=1)
    run_id = await submit(api, [ask("slow", "pause-slow first"), ask("next", "pause-next")])
    await wait_run(run_id, lambda r: r["steps"][0]["status"] == "running")
    assert (await api.post(f"/v1/runs/{run_id}/pause", json={"reason": "lunch"})).status_code == 202
    run = await wait_run(run_id, lambda r: r["status"] == "paused")
    assert run["pause_reason"] == "requested"
    assert run["steps"][0]["status"] == "completed"  # the call in flight finished
    await asyncio.sleep(0.5)
    assert standin.calls("pause-next") == []
    assert (await api.post(f"/v1/runs/{run_id}/resume")).status_code == 202
    assert (await wait_run(run_id))["status"] == "completed"
    assert len(standin.calls("pause-next")) == 1


async def test_audit_trail_is_complete_and_ordered(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "gate", "approval": {"message": "go?"}},
            {"id": "a", "tool": "echo"},
            {"id": "b", "tool": "echo"},
            {"id": "c", "approval": {"message": "never answered"}},
        ],
        budget={"max_tool_calls": 1},
    )
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    await api.post(
        f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve", "comment": "fine"}
    )
    await wait_run(run_id, lambda r: r["status"] == "paused")
    await api.post(f"/v1/runs/{run_id}/budget", json={"max_tool_calls": 2})
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    await api.post(f"/v1/runs/{run_id}/cancel")
    await wait_run(run_id)

    trail = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    actions = [(e["actor"], e["action"]) for e in trail]
    assert actions == [
        ("local", "submitted"),
        ("local", "approve"),
        ("longrun", "paused"),
        ("local", "budget"),
        ("local", "cancel"),
        ("longrun", "cancelled"),
    ]
    assert "fine" in trail[1]["detail"]
    assert "max_tool_calls" in trail[2]["detail"] and "max_tool_calls" in trail[3]["detail"]
    times = [e["at"] for e in trail]
    assert times == sorted(times)
    # The trail is the same once the run has ended.
    assert (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"] == trail


async def test_an_answer_that_must_be_retried_still_counts(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="ledger-json", reply="not json at all", times=1)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    run_id = await submit(
        api,
        [{"id": "ask", "model": {"prompt": "ledger-json please", "json_schema": schema}}],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["steps"][0]["output"]["json"] == {"ok": False}
    assert run["steps"][0]["attempts"] == 2
    calls = standin.calls("ledger-json")
    assert run["usage"]["model_calls"] == len(calls) == 2
    # Both answers count, as the server reported them (the second was told what was wrong).
    assert run["usage"]["input_tokens"] == sum(c["prompt_tokens"] for c in calls)
    assert calls[0]["prompt_tokens"] == len("ledger-json please") // 4


async def test_parallel_calls_cannot_overshoot_a_limit_together(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    steps = [{**ask(f"p{i}", f"parallel-{i}"), "depends_on": []} for i in range(4)]
    run_id = await submit(api, steps, budget={"max_model_calls": 1})
    run = await wait_run(run_id, lambda r: r["status"] == "paused")
    await asyncio.sleep(0.5)
    assert sum(len(standin.calls(f"parallel-{i}")) for i in range(4)) == 1
    assert run["usage"]["model_calls"] == 1
