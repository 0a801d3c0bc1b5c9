"""Approval deadlines: an approval nobody decides in time is rejected, skipped, failed or
reminded about, as the step says, by a durable timer; the audit says `timeout` decided."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from longrun.contracts import EventPage, EventsQuery, RunEvent
from longrun.settings import ApiKey, Settings, hash_key
from tests.helpers import Poll, api_app, submit


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


async def test_an_unanswered_approval_escalates_to_the_second_role(
    settings: Settings, client: Client, worker: Worker
) -> None:
    keys = {"sam": ["submitter", "viewer"], "ana": ["approver"], "olu": ["admin"]}
    keyed = settings.model_copy(
        update={
            "api_keys": [
                ApiKey(name=name, sha256=hash_key(f"key-{name}"), roles=roles)
                for name, roles in keys.items()
            ]
        }
    )

    def who(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer key-{name}"}

    async with api_app(keyed) as api:
        steps = gated("escalate", escalate_to="admin")
        created = await api.post(
            "/v1/runs", json={"goal": "g", "plan": {"steps": steps}}, headers=who("sam")
        )
        assert created.status_code == 202, created.text
        run_id = created.json()["run_id"]
        handle = client.get_workflow_handle(run_id)
        escalated: list[RunEvent] = []
        for _ in range(100):
            page = await handle.query("events", EventsQuery(), result_type=EventPage)
            escalated = [e for e in page.events if e.type == "approval.escalated"]
            if escalated:
                break
            await asyncio.sleep(0.2)
        assert escalated and escalated[0].data["role"] == "admin", escalated
        run = (await api.get(f"/v1/runs/{run_id}", headers=who("ana"))).json()
        assert run["status"] == "waiting_approval"
        [asked] = run["pending_approvals"]
        assert asked["role"] == "admin" and escalated[0].data["digest"] == asked["digest"]
        # The approver it went to first no longer decides it; the admin does.
        refused = await api.post(
            f"/v1/runs/{run_id}/approvals/apr-gate",
            json={"decision": "approve"},
            headers=who("ana"),
        )
        assert refused.status_code == 403 and "escalated" in refused.text, refused.text
        taken = await api.post(
            f"/v1/runs/{run_id}/approvals/apr-gate",
            json={"decision": "approve", "digest": asked["digest"]},
            headers=who("olu"),
        )
        assert taken.status_code == 202, taken.text
        await handle.result()
        run = (await api.get(f"/v1/runs/{run_id}", headers=who("olu"))).json()
        assert run["status"] == "completed", run
        audit = (await api.get(f"/v1/runs/{run_id}/audit", headers=who("olu"))).json()
        actions = [(e["actor"], e["action"]) for e in audit["entries"]]
        assert ("timeout", "escalate") in actions and ("olu", "approve") in actions
