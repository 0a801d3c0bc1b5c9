"""Schedules start ordinary runs linked to them, on Temporal Schedules; bad requests change
nothing. (Temporal's time-skipping test server does not implement schedules, so these run
on the dev server in real time, at an interval of a second.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow
from temporalio.worker import Worker

from api.routes.schedules import readmit_schedules
from longrun.contracts import RunInput
from longrun.policy import Policy
from tests.helpers import Poll

PLAN = {"goal": "scheduled echo", "plan": {"steps": [{"id": "e", "tool": "echo"}]}}


async def _runs_of(api: httpx.AsyncClient, schedule_id: str, at_least: int) -> list[str]:
    for _ in range(100):
        schedule = (await api.get(f"/v1/schedules/{schedule_id}")).json()
        runs = [r["run_id"] for r in schedule["recent_runs"]]
        if len(runs) >= at_least:
            return runs
        await asyncio.sleep(0.2)
    raise AssertionError(f"{schedule_id} started {len(runs)} runs, not {at_least}")


async def test_a_schedule_starts_linked_runs_until_paused_and_is_deleted(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    body = {"run": {**PLAN, "labels": {"team": "ops"}}, "every_s": 1, "labels": {"k": "v"}}
    created = await api.post("/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    schedule = created.json()
    schedule_id = schedule["schedule_id"]
    assert schedule["every_s"] == 1 and schedule["overlap"] == "skip"
    assert schedule["paused"] is False and schedule["next_runs"]

    first, second = (await _runs_of(api, schedule_id, 2))[:2]
    assert first != second
    for run_id in (first, second):
        run = await wait_run(run_id)
        assert run["status"] == "completed", run
        assert run["schedule_id"] == schedule_id
        assert [s["status"] for s in run["steps"]] == ["completed"]
    listed = (await api.get("/v1/runs", params={"label": "team:ops"})).json()["runs"]
    assert {first, second} <= {r["run_id"] for r in listed}
    assert all(r["schedule_id"] == schedule_id for r in listed if r["run_id"] in (first, second))

    paused = await api.post(f"/v1/schedules/{schedule_id}/pause", json={"reason": "quiet"})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert "quiet" in paused.json()["note"]
    before = len((await api.get(f"/v1/schedules/{schedule_id}")).json()["recent_runs"])
    await asyncio.sleep(2.5)
    after = (await api.get(f"/v1/schedules/{schedule_id}")).json()
    assert len(after["recent_runs"]) == before, "a paused schedule started a run"

    listing = (await api.get("/v1/schedules")).json()["schedules"]
    assert schedule_id in [s["schedule_id"] for s in listing]
    assert (await api.delete(f"/v1/schedules/{schedule_id}")).status_code == 204
    assert (await api.get(f"/v1/schedules/{schedule_id}")).status_code == 404
    assert (await api.delete(f"/v1/schedules/{schedule_id}")).status_code == 404
    assert (await api.get(f"/v1/runs/{first}")).json()["status"] == "completed"  # runs stay


async def test_a_cron_schedule_says_when_it_runs_next(
    api: httpx.AsyncClient, client: Client
) -> None:
    body = {"run": PLAN, "cron": "0 6 * * 1-5", "overlap": "buffer_one", "paused": True}
    created = await api.post("/v1/schedules", json=body, headers={"Idempotency-Key": "cron-1"})
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["cron"] == "0 6 * * 1-5" and schedule["overlap"] == "buffer_one"
    assert schedule["paused"] is True and schedule["recent_runs"] == []
    for at in schedule["next_runs"]:
        when = datetime.fromisoformat(at).astimezone(UTC)
        assert (when.hour, when.minute, when.weekday() < 5) == (6, 0, True)
    again = await api.post("/v1/schedules", json=body, headers={"Idempotency-Key": "cron-1"})
    assert again.status_code == 201 and again.json()["schedule_id"] == schedule["schedule_id"]
    other = {**body, "cron": "0 7 * * *"}
    clash = await api.post("/v1/schedules", json=other, headers={"Idempotency-Key": "cron-1"})
    assert clash.status_code == 409
    resumed = await api.post(f"/v1/schedules/{schedule['schedule_id']}/resume")
    assert resumed.json()["paused"] is False
    await api.delete(f"/v1/schedules/{schedule['schedule_id']}")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"run": PLAN}, "body"),  # neither cron nor every_s
        ({"run": PLAN, "cron": "0 6 * * *", "every_s": 60}, "body"),
        ({"run": PLAN, "every_s": 0.5}, "every_s"),
        ({"run": PLAN, "cron": "not a cron"}, "cron"),
        ({"run": PLAN, "cron": "99 99 * * *"}, "cron"),
        ({"run": PLAN, "every_s": 60, "overlap": "sometimes"}, "overlap"),
        (
            {"run": {"goal": "x", "plan": {"steps": [{"id": "a", "tool": "nope"}]}}, "every_s": 60},
            "run",
        ),
        ({"run": PLAN, "every_s": 60, "extra": 1}, "extra"),
    ],
)
async def test_a_bad_schedule_is_refused_and_nothing_is_created(
    api: httpx.AsyncClient, client: Client, body: dict[str, Any], field: str
) -> None:
    before = {s.id async for s in await client.list_schedules()}
    refused = await api.post("/v1/schedules", json=body)
    assert refused.status_code == 422, refused.text
    assert field in str(refused.json()["detail"])
    assert {s.id async for s in await client.list_schedules()} == before


async def test_unknown_schedules_are_404(api: httpx.AsyncClient) -> None:
    for path in ("sch-" + "0" * 32, "nope", "sch-XYZ"):
        assert (await api.get(f"/v1/schedules/{path}")).status_code == 404
        assert (await api.post(f"/v1/schedules/{path}/pause")).status_code in (404, 405)


async def _scheduled_input(client: Client, schedule_id: str) -> RunInput:
    desc = await client.get_schedule_handle(schedule_id).describe()
    action = desc.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    [inp] = await client.data_converter.decode(list(action.args), [RunInput])
    assert isinstance(inp, RunInput)
    return inp


async def test_a_schedules_runs_follow_the_policy_in_force(
    api: httpx.AsyncClient, client: Client
) -> None:
    steps = [{"id": "e", "tool": "echo"}, {"id": "sh", "tool": "shell", "args": {"argv": ["true"]}}]
    body = {"run": {"goal": "nightly", "plan": {"steps": steps}}, "every_s": 3600, "paused": True}
    created = await api.post("/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    schedule_id = created.json()["schedule_id"]
    assert (await api.post(f"/v1/schedules/{schedule_id}/resume")).status_code == 200

    # A policy that gates echo now: the schedule's runs start under it (the workflow
    # evaluates its rules at each call).
    gated = Policy.model_validate({"tools": {"echo": {"approval": "always"}}})
    assert schedule_id in await readmit_schedules(client, gated)
    assert (await _scheduled_input(client, schedule_id)).config.policy == gated
    assert schedule_id not in await readmit_schedules(client, gated)  # nothing more to do
    assert (await api.get(f"/v1/schedules/{schedule_id}")).json()["paused"] is False

    # A policy that forbids shell: the schedule stops, saying why.
    forbidding = Policy.model_validate({"tools": {"shell": {"allowed": False}}})
    assert schedule_id in await readmit_schedules(client, forbidding)
    schedule = (await api.get(f"/v1/schedules/{schedule_id}")).json()
    assert schedule["paused"] is True
    assert "the policy in force refuses its run: step sh" in schedule["note"]
    assert (await api.delete(f"/v1/schedules/{schedule_id}")).status_code == 204
