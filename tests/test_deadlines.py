"""Approval deadlines: an approval nobody decides in time is rejected, skipped, failed or
reminded about, as the step says, by a durable timer; the audit says `timeout` decided."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from longrun.contracts import EventPage, EventsQuery, RunEvent
from tests.helpers import Poll, submit


def gated(on_timeout: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": "gate",
            "tool": "echo",
            "requires_approval": True,
            "approval_timeout_s": 1,
            "on_timeout": on_timeout,
            **extra,
        },
        {"id": "after", "tool": "echo", "depends_on": ["gate"]},
    ]


async def test_an_approval_nobody_decides_in_time_ends_as_the_step_says(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    skipped = await submit(api, gated("skip"))
    failed = await submit(api, gated("fail"))
    rejected = await submit(api, gated("reject", on_reject="skip"))
    run = await wait_run(skipped)
    assert run["status"] == "completed"
    assert [s["status"] for s in run["steps"]] == ["skipped", "completed"]
    [decided] = run["approvals"]
    assert decided["decided_by"] == "timeout" and decided["decision"] == "reject"
    assert "no decision within 1 s" in decided["comment"]
    run = await wait_run(failed)
    assert run["status"] == "failed" and "no decision within 1 s" in run["error"]
    run = await wait_run(rejected)
    assert run["status"] == "completed" and run["steps"][0]["status"] == "skipped"
    audit = (await api.get(f"/v1/runs/{skipped}/audit")).json()["entries"]
    assert any(e["actor"] == "timeout" and e["action"] == "reject" for e in audit)
    assert run["figures"]["approvals"] == 0  # a timer is not a person


async def test_a_reminder_keeps_the_approval_open_until_a_person_decides(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(api, gated("remind"))
    handle = client.get_workflow_handle(run_id)
    reminders: list[RunEvent] = []
    for _ in range(100):  # reminders come every second; the approval stays open
        page = await handle.query("events", EventsQuery(), result_type=EventPage)
        reminders = [e for e in page.events if e.type == "approval.reminder"]
        if len(reminders) >= 2:
            break
        await asyncio.sleep(0.2)
    assert len(reminders) >= 2 and reminders[0].data["approval_id"] == "apr-gate"
    assert (await api.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting_approval"
    decided = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    assert decided.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed"
    assert run["approvals"][0]["decided_by"] == "local"
