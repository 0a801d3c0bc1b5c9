"""The approvals inbox and the tool catalogue over the API."""

from __future__ import annotations

import uuid

import httpx
from temporalio.worker import Worker

from tests.helpers import Poll, submit


async def test_the_inbox_lists_what_waits_for_a_person_across_runs(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    tag = uuid.uuid4().hex[:12]
    post = {
        "id": "notify",
        "tool": "http_request",
        "args": {"method": "POST", "url": "http://127.0.0.1:9/hook", "body": {"n": 1}},
    }
    # One after the other, so their requests are in a known order (oldest first).
    gated = await submit(api, [post], labels={"inbox": tag})
    await wait_run(gated, lambda r: r["status"] == "waiting_approval")
    message = await submit(
        api, [{"id": "ok", "approval": {"message": "ship it?"}}], labels={"inbox": tag}
    )
    elsewhere = await submit(api, [{"id": "ok", "approval": {"message": "other"}}])
    for run_id in (gated, message, elsewhere):
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval")

    inbox = (await api.get("/v1/approvals", params={"label": f"inbox:{tag}"})).json()
    assert [(a["run_id"], a["approval_id"]) for a in inbox["approvals"]] == [
        (gated, "apr-notify"),
        (message, "apr-ok"),
    ]
    first = inbox["approvals"][0]
    assert first["goal"] == "test" and first["labels"] == {"inbox": tag}
    assert first["arguments"]["body"] == {"n": 1}  # exactly what will run
    assert "http_request" in first["summary"]
    assert inbox["runs_waiting"] == 2 and not inbox["truncated"]

    decided = await api.post(f"/v1/runs/{message}/approvals/apr-ok", json={"decision": "approve"})
    assert decided.status_code == 202
    await wait_run(message)
    inbox = (await api.get("/v1/approvals", params={"label": f"inbox:{tag}"})).json()
    assert [a["run_id"] for a in inbox["approvals"]] == [gated]
    everyone = (await api.get("/v1/approvals")).json()
    assert {gated, elsewhere} <= {a["run_id"] for a in everyone["approvals"]}
    assert (await api.get("/v1/approvals", params={"label": "bad label"})).status_code == 422
    for run_id in (gated, elsewhere):
        assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202


async def test_the_tool_catalogue_lists_arguments_and_side_effects(
    api: httpx.AsyncClient,
) -> None:
    tools = {t["name"]: t for t in (await api.get("/v1/tools")).json()["tools"]}
    assert {"echo", "http_request", "shell", "write_file"} <= set(tools)
    assert tools["write_file"]["side_effect"] == "reversible" and tools["write_file"]["reversible"]
    assert tools["http_request"]["side_effect"] is None  # by method
    assert tools["shell"]["side_effect"] == "irreversible" and tools["shell"]["allowed"]
    assert "argv" in tools["shell"]["args_schema"]["properties"]
    assert tools["shell"]["description"].startswith("Run a command")
