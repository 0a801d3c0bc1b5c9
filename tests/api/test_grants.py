"""Standing approvals: calls a grant covers run without asking, each use in the audit; any
other call asks a person; a grant stops at its revocation, its expiry and its last use, and
never covers a run of another tenant or, with four eyes, one of its giver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from longrun.settings import ApiKey, Settings, hash_key
from tests.helpers import Poll, api_app

KEYS = {
    "sam": (["submitter", "viewer"], "acme"),
    "ana": (["approver", "viewer"], "acme"),
    "both": (["submitter", "approver"], "acme"),
    "rex": (["submitter", "viewer"], "globex"),
}


def who(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-{name}"}


@pytest.fixture
async def http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    keys = [
        ApiKey(name=name, sha256=hash_key(f"key-{name}"), roles=roles, tenant=tenant)
        for name, (roles, tenant) in KEYS.items()
    ]
    update = {"api_keys": keys, "four_eyes": True}
    async with api_app(settings.model_copy(update=update)) as client:
        yield client


def echo(value: str, step: str = "e") -> dict[str, Any]:
    return {"id": step, "tool": "echo", "args": {"value": value}, "requires_approval": True}


async def submit(
    http: httpx.AsyncClient, steps: list[dict[str, Any]], by: str = "sam", team: str = "ops"
) -> str:
    body = {"goal": "g", "plan": {"steps": steps}, "labels": {"team": team}}
    response = await http.post("/v1/runs", json=body, headers=who(by))
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def grant(http: httpx.AsyncClient, by: str = "ana", **spec: Any) -> str:
    response = await http.post("/v1/approvals/grants", json=spec, headers=who(by))
    assert response.status_code == 201, response.text
    return str(response.json()["grant_id"])


async def settled(wait_run: Poll, http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run once it has completed or waits for a person."""
    return await wait_run(
        run_id,
        lambda r: r["status"] in ("completed", "waiting_approval", "failed"),
        http=http,
        headers=who("ana"),
    )


async def test_a_grant_lets_exactly_the_matching_calls_through_until_it_ends(
    http: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    granted = await grant(
        http, tool="echo", args={"value": {"prefix": "ok-"}}, label="team:ops", uses=2
    )
    # Matching: runs without asking; the audit names the grant.
    first = await settled(wait_run, http, await submit(http, [echo("ok-1")]))
    assert first["status"] == "completed", first
    audit = (await http.get(f"/v1/runs/{first['run_id']}/audit", headers=who("ana"))).json()
    assert any(e["actor"] == granted and e["action"] == "approve" for e in audit["entries"])
    # Not matching: another value, another tool, another label, another tenant's run.
    asked = [
        await submit(http, [echo("no-1")]),
        await submit(
            http,
            [{"id": "e", "tool": "read_file", "args": {"path": "ok-x"}, "requires_approval": True}],
        ),
        await submit(http, [echo("ok-2")], team="dev"),
        await submit(http, [echo("ok-3")], by="rex"),
    ]
    for run_id in asked[:3]:
        run = await settled(wait_run, http, run_id)
        assert run["status"] == "waiting_approval", run
    other = await wait_run(
        asked[3], lambda r: r["status"] == "waiting_approval", http=http, headers=who("rex")
    )
    assert other["pending_approvals"], other
    # Its second and last use; a third matching call asks.
    second = await settled(wait_run, http, await submit(http, [echo("ok-4")]))
    assert second["status"] == "completed", second
    third = await settled(wait_run, http, await submit(http, [echo("ok-5")]))
    assert third["status"] == "waiting_approval", third
    [listed] = [
        g
        for g in (await http.get("/v1/approvals/grants", headers=who("sam"))).json()["grants"]
        if g["grant_id"] == granted
    ]
    assert (listed["used"], listed["uses_left"]) == (2, 0)


async def test_a_grant_stops_at_its_revocation_and_its_expiry(
    http: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    revoked = await grant(http, tool="echo", label="team:rev", hours=1)
    covered = await settled(wait_run, http, await submit(http, [echo("a")], team="rev"))
    assert covered["status"] == "completed", covered
    gone = await http.delete(f"/v1/approvals/grants/{revoked}", headers=who("ana"))
    assert gone.status_code == 200, gone.text
    again = await http.delete(f"/v1/approvals/grants/{revoked}", headers=who("ana"))
    assert again.status_code == 409 and "revoked by ana" in again.text
    after = await settled(wait_run, http, await submit(http, [echo("b")], team="rev"))
    assert after["status"] == "waiting_approval", after

    await grant(http, tool="echo", label="team:brief", hours=1 / 3600)  # one second
    await asyncio.sleep(1.5)
    expired = await settled(wait_run, http, await submit(http, [echo("c")], team="brief"))
    assert expired["status"] == "waiting_approval", expired


async def test_a_grant_given_with_a_decision_covers_the_next_calls_but_not_its_givers_runs(
    http: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    steps = [echo("v-1", "one"), {**echo("v-2", "two"), "depends_on": ["one"]}]
    run_id = await submit(http, steps)
    run = await settled(wait_run, http, run_id)
    [asked] = run["pending_approvals"]
    assert asked["tool"] == "echo"
    terms = {"args": {"value": {"prefix": "v-"}}, "uses": 5}
    decided = await http.post(
        f"/v1/runs/{run_id}/approvals/{asked['approval_id']}",
        json={"decision": "approve", "digest": asked["digest"], "grant": terms},
        headers=who("ana"),
    )
    assert decided.status_code == 202 and "granted" in decided.text, decided.text
    run = await settled(wait_run, http, run_id)
    assert run["status"] == "completed", run  # the second call ran under the grant
    # Four eyes: a grant never covers a run of the one who gave it.
    await grant(http, by="both", tool="echo", label="team:self", uses=5)
    own = await settled(wait_run, http, await submit(http, [echo("x")], by="both", team="self"))
    assert own["status"] == "waiting_approval", own
    theirs = await settled(wait_run, http, await submit(http, [echo("y")], team="self"))
    assert theirs["status"] == "completed", theirs


async def test_bad_grants_are_refused_and_change_nothing(
    http: httpx.AsyncClient, worker: Worker
) -> None:
    bad: list[dict[str, Any]] = [
        {"tool": "echo", "label": "team:ops"},  # no end
        {"tool": "echo", "uses": 1},  # no scope
        {"tool": "echo", "label": "team:ops", "run_id": "run-" + "0" * 32, "uses": 1},
        {"tool": "echo", "label": "team:ops", "uses": 0},
        {"tool": "echo", "label": "team:ops", "uses": 1, "args": {"v": {}}},
        {
            "tool": "echo",
            "label": "team:ops",
            "uses": 1,
            "args": {"v": {"prefix": "a", "equals": 1}},
        },
    ]
    for spec in bad:
        response = await http.post("/v1/approvals/grants", json=spec, headers=who("ana"))
        assert response.status_code == 422, (spec, response.text)
    missing = await http.post(
        "/v1/approvals/grants",
        json={"tool": "echo", "run_id": "run-" + "0" * 32, "uses": 1},
        headers=who("ana"),
    )
    assert missing.status_code == 404
    unknown = await http.delete("/v1/approvals/grants/grant-0123456789abcdef", headers=who("ana"))
    assert unknown.status_code == 404
    assert (await http.get("/v1/approvals/grants", headers=who("ana"))).json() == {"grants": []}
