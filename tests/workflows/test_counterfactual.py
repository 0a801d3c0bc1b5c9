"""A counterfactual fork: the same goal again on another model, with the tool calls the
first run made answered from their recorded outputs (no request reaches the fixture, no
approval is asked), and any other call following policy as usual; `longrun compare` shows
both runs. Real HTTP to the eval fixture, a real Temporal server, the stand-in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker
from typer.testing import CliRunner

from api.app import create_app
from longrun.cli import app as cli
from longrun.dev.stack import ServerThread
from longrun.evals.fixture import Fixture, fixture_app
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, allow
from tests.workflows.test_agent import act, plan, start

MARKER = "counterfactual"


@pytest.fixture
def fixture(settings: Settings) -> Iterator[tuple[Fixture, str]]:
    found = Fixture()
    with ServerThread(fixture_app(found)) as server:
        allow(settings, server.url)
        yield found, server.url


def _get(url: str) -> tuple[str, dict[str, Any]]:
    return ("http_request", {"method": "GET", "url": url})


def _post(url: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("http_request", {"method": "POST", "url": url, "body": body})


def _waiting(run: dict[str, Any]) -> bool:
    return bool(run["pending_approvals"]) or run["status"] not in ("running", "paused")


async def _approve_next(api: httpx.AsyncClient, wait_run: Poll, run_id: str, yes: bool) -> Any:
    run = await wait_run(run_id, _waiting)
    [asked] = run["pending_approvals"]
    decision = "approve" if yes else "reject"
    answer = await api.post(
        f"/v1/runs/{run_id}/approvals/{asked['approval_id']}", json={"decision": decision}
    )
    assert answer.status_code == 202, answer.text
    return asked


async def test_a_counterfactual_fork_replays_tool_calls_and_compare_shows_both(
    api: httpx.AsyncClient,
    settings: Settings,
    worker: Worker,
    standin: StandIn,
    wait_run: Poll,
    fixture: tuple[Fixture, str],
) -> None:
    seen, url = fixture
    prices, order = f"{url}/data/prices", f"{url}/effects/order"
    standin.scenario(
        [
            {"match": MARKER, "role": "plan", "json": plan(("buy", "buy the cheapest fruit"))},
            act(MARKER, _get(prices)),
            act(MARKER, _post(order, {"item": "apple"})),
            act(MARKER, reply="bought an apple"),
        ]
    )
    goal = f"{MARKER}: read the prices and order the cheapest fruit"
    original = await start(api, goal=goal, tools=["http_request"])
    asked = await _approve_next(api, wait_run, original, yes=True)  # the POST, by policy
    assert "effects/order" in asked["summary"]
    first = await wait_run(original)
    assert first["status"] == "completed", first["error"]
    before = seen.report()
    assert before.requests == {"GET /data/prices": 1, "POST /effects/order": 1}

    # The other model reads the same prices and places the same order (both answered from
    # the recording), then orders once more, which runs under policy: a person rejects it.
    standin.scenario(
        [
            act(MARKER, _get(prices)),
            act(MARKER, _post(order, {"item": "apple"})),
            act(MARKER, _post(order, {"item": "plum"})),
            act(MARKER, reply="ordered"),
        ]
    )
    acts_before = len(standin.calls(MARKER, role="act"))
    body = {"model": "other-model", "replay_tools": True}
    forked = await api.post(f"/v1/runs/{original}/fork", json=body)
    assert forked.status_code == 202, forked.text
    assert forked.json()["replays"] == 2
    fork_id = forked.json()["run_id"]
    asked = await _approve_next(api, wait_run, fork_id, yes=False)  # the new order only
    assert "plum" in asked["summary"]
    second = await wait_run(fork_id)
    assert second["status"] == "completed", second["error"]

    after = seen.report()
    assert after.requests == before.requests  # replayed calls reached nobody
    assert [e.body for e in after.effects] == [{"item": "apple"}]
    assert second["figures"]["replayed_calls"] == 2
    outputs = [s["output"] for s in second["steps"] if s["status"] == "completed"]
    assert outputs == [s["output"] for s in first["steps"] if s["status"] == "completed"]
    assert [a["decision"] for a in second["approvals"]] == ["reject"]
    models = {c["model"] for c in standin.calls(MARKER, role="act")[acts_before:]}
    assert models == {"other-model"}
    audit = (await api.get(f"/v1/runs/{fork_id}/audit")).json()
    replayed = [e["detail"] for e in audit["entries"] if e["action"] == "replayed"]
    assert len(replayed) == 2 and all(original in d for d in replayed)

    with ServerThread(create_app(settings)) as server:
        runner = CliRunner()
        args = ["compare", original, fork_id, "--api-url", server.url]
        shown = await asyncio.to_thread(runner.invoke, cli, [*args, "--json"])
        table = await asyncio.to_thread(runner.invoke, cli, args)
    assert shown.exit_code == 0, shown.output
    runs = json.loads(shown.output)["runs"]
    assert [(r["run_id"], r["status"], r["replayed_calls"]) for r in runs] == [
        (original, "completed", 0),
        (fork_id, "completed", 2),
    ]
    assert runs[0]["tool_calls"] == 2 and runs[1]["tool_calls"] == 0  # the plum: rejected
    assert table.exit_code == 0 and "replayed calls" in table.output


async def test_a_fork_asks_for_a_change_or_a_step_and_models_only_for_agents(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    steps = [{"id": "a", "tool": "echo", "args": {"value": 1}}]
    response = await api.post("/v1/runs", json={"goal": "fork refusals", "plan": {"steps": steps}})
    run_id = response.json()["run_id"]
    assert (await wait_run(run_id))["status"] == "completed"
    for body, says in [
        ({}, "from_step"),
        ({"models": {"actor": "m"}}, "goal-only"),
        ({"replay_tools": "yes"}, "bool"),
        ({"model": ""}, "at least 1"),
    ]:
        refused = await api.post(f"/v1/runs/{run_id}/fork", json=body)
        assert refused.status_code == 422 and says in refused.text, (body, refused.text)
    again = await api.post(f"/v1/runs/{run_id}/fork", json={"replay_tools": True})
    assert again.status_code == 202 and again.json()["replays"] == 1
    run = await wait_run(again.json()["run_id"])
    assert run["status"] == "completed" and run["figures"]["replayed_calls"] == 1
    assert run["steps"][0]["output"] == {"value": 1}
