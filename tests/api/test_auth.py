"""API keys and roles on every endpoint, the four-eyes rule, and loopback-only without keys."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.worker import Worker

from api.app import create_app
from longrun.settings import ApiKey, Settings, hash_key
from tests.helpers import Poll

KEYS = {
    "viewer": ["viewer"],
    "sub": ["submitter"],
    "sub2": ["submitter"],
    "approver": ["approver"],
    "admin": ["admin"],
}
GATED = {"goal": "g", "plan": {"steps": [{"id": "gate", "approval": {"message": "ok?"}}]}}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-of-{name}"}


@pytest.fixture
def keyed(settings: Settings) -> Settings:
    keys = [ApiKey(name=n, sha256=hash_key(f"key-of-{n}"), roles=r) for n, r in KEYS.items()]
    return settings.model_copy(update={"api_keys": keys})


@pytest.fixture
async def http(keyed: Settings) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(keyed))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def gated_run(http: httpx.AsyncClient, wait_run: Poll, owner: str = "sub") -> str:
    response = await http.post("/v1/runs", json=GATED, headers=bearer(owner))
    assert response.status_code == 202, response.text
    run_id: str = response.json()["run_id"]
    await wait_run(
        run_id, lambda r: r["status"] == "waiting_approval", http=http, headers=bearer(owner)
    )
    return run_id


@pytest.mark.parametrize(
    ("who", "expected"),
    [("viewer", 403), ("sub", 202), ("approver", 403), ("admin", 202), (None, 401), ("x", 401)],
)
async def test_who_may_start_runs(http: httpx.AsyncClient, who: str | None, expected: int) -> None:
    headers = bearer(who) if who else {}
    response = await http.post("/v1/runs", json=GATED, headers=headers)
    assert response.status_code == expected, response.text
    if expected == 401:
        assert response.headers["www-authenticate"] == "Bearer"


async def test_who_may_read_decide_and_cancel(
    http: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await gated_run(http, wait_run)
    run_url = f"/v1/runs/{run_id}"
    for who, code in [("viewer", 200), ("sub", 200), ("approver", 200), ("admin", 200)]:
        assert (await http.get(run_url, headers=bearer(who))).status_code == code
        assert (await http.get("/v1/runs", headers=bearer(who))).status_code == code
        assert (await http.get(f"{run_url}/steps/gate", headers=bearer(who))).status_code == code
    assert (await http.get(run_url)).status_code == 401
    assert (await http.get(f"{run_url}/steps/gate")).status_code == 401
    assert (await http.get(run_url, headers={"Authorization": "Basic eA=="})).status_code == 401

    decide = f"{run_url}/approvals/apr-gate"
    for who in ("viewer", "sub", "sub2"):
        response = await http.post(decide, json={"decision": "approve"}, headers=bearer(who))
        assert response.status_code == 403, who
    for who in ("viewer", "approver", "sub2"):
        assert (await http.post(f"{run_url}/cancel", headers=bearer(who))).status_code == 403

    assert (await http.get(f"{run_url}/audit", headers=bearer("viewer"))).status_code == 200
    assert (await http.get(f"{run_url}/audit")).status_code == 401
    budget = f"{run_url}/budget"
    for who, code in [("viewer", 403), ("sub", 403), ("approver", 202), ("admin", 202)]:
        response = await http.post(budget, json={"max_tool_calls": 9}, headers=bearer(who))
        assert response.status_code == code, who
    for who, code in [("viewer", 403), ("sub2", 403), ("sub", 202), ("approver", 202)]:
        for action in ("pause", "resume"):
            response = await http.post(f"{run_url}/{action}", headers=bearer(who))
            assert response.status_code == code, (action, who)

    response = await http.post(decide, json={"decision": "approve"}, headers=bearer("approver"))
    assert response.status_code == 202
    run = await wait_run(run_id, http=http, headers=bearer("viewer"))
    assert run["status"] == "completed"
    assert run["approvals"][0]["decided_by"] == "approver"

    own = await gated_run(http, wait_run, owner="sub")
    assert (await http.post(f"/v1/runs/{own}/cancel", headers=bearer("sub"))).status_code == 202
    other = await gated_run(http, wait_run, owner="sub2")
    assert (await http.post(f"/v1/runs/{other}/cancel", headers=bearer("admin"))).status_code == 202


async def test_four_eyes_forbids_approving_ones_own_run(
    keyed: Settings, worker: Worker, wait_run: Poll
) -> None:
    strict = keyed.model_copy(update={"four_eyes": True})
    transport = httpx.ASGITransport(app=create_app(strict))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        run_id = await gated_run(http, wait_run, owner="admin")
        decide = f"/v1/runs/{run_id}/approvals/apr-gate"
        mine = await http.post(decide, json={"decision": "approve"}, headers=bearer("admin"))
        assert mine.status_code == 403 and "four-eyes" in mine.json()["detail"]
        other = await http.post(decide, json={"decision": "approve"}, headers=bearer("approver"))
        assert other.status_code == 202


async def test_without_keys_only_loopback_is_served(settings: Settings) -> None:
    assert not settings.api_keys
    app = create_app(settings)
    remote = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=remote, base_url="http://localhost") as http:
        response = await http.get("/v1/runs")
        assert response.status_code == 403
        assert "loopback" in response.json()["detail"]
        assert (await http.get("/healthz")).status_code == 200
    local = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=local, base_url="http://localhost") as http:
        assert (await http.get("/v1/runs")).status_code == 200
        # Through a proxy on this host: not local, whatever it says.
        for header in ({"X-Forwarded-For": "127.0.0.1"}, {"Via": "1.1 proxy"}):
            response = await http.get("/v1/runs", headers=header)
            assert response.status_code == 403, header
            assert "came through a proxy" in response.json()["detail"]
