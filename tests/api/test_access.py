"""Who may do what to which run, schedule, approval and artifact (api/access.py), route by
route: the owner, another key of its tenant, a key of another tenant (with every role but
admin), a viewer and an approver of the tenant, and no key. A new route joins the matrix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from longrun.settings import ApiKey, Settings, hash_key
from tests.helpers import Poll

KEYS: dict[str, tuple[list[Any], str | None]] = {
    "owner": (["submitter"], "acme"),
    "peer": (["submitter"], "acme"),
    "rival": (["viewer", "submitter", "approver"], "globex"),
    "viewer": (["viewer"], "acme"),
    "approver": (["approver"], "acme"),
    "admin": (["admin"], None),
    "loner": (["viewer"], None),
}
WHO = ["owner", "peer", "rival", "viewer", "approver", None]
GATED = {"goal": "gated", "plan": {"steps": [{"id": "gate", "approval": {"message": "ok?"}}]}}
FAILING = {
    "goal": "fails",
    "plan": {"steps": [{"id": "x", "tool": "read_file", "args": {"path": "no"}}]},
}
WRITES = {
    "goal": "report",
    "plan": {
        "steps": [{"id": "w", "tool": "write_file", "args": {"path": "out/r.md", "content": "r"}}]
    },
}
READ = {"owner": 200, "peer": 200, "rival": 404, "viewer": 200, "approver": 200, None: 401}


def key(name: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer key-of-{name}"} if name else {}


@pytest.fixture
async def http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    keys = [
        ApiKey(name=n, sha256=hash_key(f"key-of-{n}"), roles=roles, tenant=tenant)
        for n, (roles, tenant) in KEYS.items()
    ]
    app = create_app(settings.model_copy(update={"api_keys": keys}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def start(http: httpx.AsyncClient, body: dict[str, Any], who: str = "owner") -> str:
    response = await http.post("/v1/runs", json=body, headers=key(who))
    assert response.status_code == 202, response.text
    run_id: str = response.json()["run_id"]
    return run_id


async def expect(
    http: httpx.AsyncClient, method: str, url: str, table: dict[str | None, int], **kw: Any
) -> None:
    """Each caller of `table` gets its status for one request."""
    for who, status in table.items():
        response = await http.request(method, url, headers=key(who), **kw)
        assert response.status_code == status, (method, url, who, response.text)


async def test_the_access_matrix(
    http: httpx.AsyncClient, worker: Worker, wait_run: Poll, client: Client
) -> None:
    gated = await start(http, GATED)
    failed = await start(http, FAILING)
    ended = await start(http, WRITES)
    for run_id in (gated, failed, ended):
        await wait_run(
            run_id,
            lambda r: r["status"] in ("waiting_approval", "failed", "completed"),
            http=http,
            headers=key("owner"),
        )

    # Reading: everyone of the tenant, nobody of another (404: it does not exist for them).
    for path in ("", "/steps/gate", "/audit", "/events/page", "/artifacts"):
        await expect(http, "GET", f"/v1/runs/{gated}{path}", READ)
    await expect(http, "GET", f"/v1/runs/{ended}/artifacts/out/r.md", READ)
    for path in ("/v1/runs", "/v1/approvals", "/v1/metrics", "/v1/schedules"):
        await expect(http, "GET", path, {**READ, "rival": 200})
    listed = (await http.get("/v1/runs", headers=key("rival"))).json()["runs"]
    assert not {gated, failed, ended} & {r["run_id"] for r in listed}
    inbox = (await http.get("/v1/approvals", headers=key("rival"))).json()
    assert gated not in str(inbox)
    assert gated in str((await http.get("/v1/approvals", headers=key("viewer"))).json())
    await expect(http, "GET", "/metrics", {"rival": 403, "admin": 200, None: 401})

    # Refusals change nothing.
    decide = {"json": {"decision": "approve"}}
    refused = {"peer": 403, "rival": 404, "viewer": 403, None: 401}
    await expect(
        http, "POST", f"/v1/runs/{gated}/approvals/apr-gate", {**refused, "owner": 403}, **decide
    )
    await expect(http, "POST", f"/v1/runs/{gated}/cancel", {**refused, "approver": 403})
    await expect(http, "POST", f"/v1/runs/{gated}/pause", refused)
    await expect(
        http,
        "POST",
        f"/v1/runs/{gated}/budget",
        {**refused, "owner": 403},
        json={"max_tool_calls": 9},
    )
    await expect(http, "POST", f"/v1/runs/{failed}/retry", {**refused, "approver": 403})
    fork = {"json": {"from_step": "w", "compensate": True}}
    await expect(http, "POST", f"/v1/runs/{ended}/fork", {**refused, "approver": 403}, **fork)
    await expect(
        # Admin only: a caller holding no role that may is told so before anything is found.
        http,
        "DELETE",
        f"/v1/runs/{ended}/artifacts",
        {**refused, "rival": 403, "owner": 403, "approver": 403},
    )
    assert (
        await http.get(f"/v1/runs/{ended}/artifacts/out/r.md", headers=key("owner"))
    ).text == "r"

    # What each may do, done.
    await expect(http, "POST", f"/v1/runs/{gated}/pause", {"owner": 202})
    await expect(http, "POST", f"/v1/runs/{gated}/resume", {"approver": 202})
    await expect(
        http, "POST", f"/v1/runs/{gated}/budget", {"approver": 202}, json={"max_tool_calls": 9}
    )
    await expect(http, "POST", f"/v1/runs/{gated}/approvals/apr-gate", {"approver": 202}, **decide)
    await expect(http, "POST", f"/v1/runs/{failed}/retry", {"owner": 202})
    await expect(http, "POST", f"/v1/runs/{ended}/fork", {"owner": 202}, **fork)
    await expect(http, "DELETE", f"/v1/runs/{ended}/artifacts", {"admin": 200})
    other = await start(http, GATED)
    await expect(http, "POST", f"/v1/runs/{other}/cancel", {"owner": 202})

    # Standing approvals: given and revoked by an approver of the tenant, for runs it sees;
    # read by the tenant.
    grant = {"json": {"tool": "echo", "run_id": other, "uses": 1}}
    await expect(http, "POST", "/v1/approvals/grants", {**refused, "owner": 403}, **grant)
    made = await http.post("/v1/approvals/grants", headers=key("approver"), **grant)
    assert made.status_code == 201, made.text
    grant_id = made.json()["grant_id"]
    await expect(http, "GET", "/v1/approvals/grants", {**READ, "rival": 200})
    assert grant_id not in (await http.get("/v1/approvals/grants", headers=key("rival"))).text
    assert grant_id in (await http.get("/v1/approvals/grants", headers=key("viewer"))).text
    revoke = f"/v1/approvals/grants/{grant_id}"
    await expect(http, "DELETE", revoke, {**refused, "owner": 403})
    await expect(http, "DELETE", revoke, {"approver": 200})

    # Schedules: read by the tenant, changed by their owner.
    body = {"run": GATED, "every_s": 3600, "paused": True}
    created = await http.post("/v1/schedules", json=body, headers=key("owner"))
    assert created.status_code == 201, created.text
    schedule = f"/v1/schedules/{created.json()['schedule_id']}"
    await expect(http, "GET", schedule, READ)
    changes = {**refused, "approver": 403}
    for action in ("pause", "resume"):
        await expect(http, "POST", f"{schedule}/{action}", changes)
    await expect(http, "DELETE", schedule, changes)
    listed_schedules = (await http.get("/v1/schedules", headers=key("rival"))).json()
    assert created.json()["schedule_id"] not in str(listed_schedules)
    await expect(http, "POST", f"{schedule}/resume", {"owner": 200})
    await expect(http, "POST", f"{schedule}/pause", {"owner": 200})
    await expect(http, "DELETE", schedule, {"owner": 204})


async def test_a_tenants_runs_are_its_own_from_the_start(
    http: httpx.AsyncClient, client: Client, worker: Worker
) -> None:
    run_id = await start(http, GATED, who="rival")
    desc = await client.get_workflow_handle(run_id).describe()
    assert await desc.memo_value("tenant") == "globex"
    await expect(http, "GET", f"/v1/runs/{run_id}", {"rival": 200, "owner": 404, "admin": 200})
    # A key of no tenant sees the runs of no tenant.
    untenanted = await start(http, GATED, who="admin")
    seen: set[str] = set()
    for _ in range(100):  # a new run reaches the listing when visibility has indexed it
        listed = (await http.get("/v1/runs", headers=key("loner"))).json()["runs"]
        seen = {r["run_id"] for r in listed}
        if untenanted in seen:
            break
        await asyncio.sleep(0.1)
    assert untenanted in seen and run_id not in seen
    await expect(http, "GET", f"/v1/runs/{run_id}", {"loner": 404})
    for each in (run_id, untenanted):
        await client.get_workflow_handle(each).terminate("test")
