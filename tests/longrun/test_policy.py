"""The permission policy: forbidden tools refused at submission and at call time, and
approvals required by rule, which no step can opt out of."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.worker import Worker

from api.app import create_app
from longrun.policy import Policy, PolicyError
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, submit

POLICY = """
[tools.shell]
allowed = false

[tools.python]
approval = "never"

[[tools.http_request.require_approval_when]]
arg = "method"
not_in = ["GET", "HEAD"]

[[tools.write_file.require_approval_when]]
arg = "path"
not_prefix = "out/"
"""


@pytest.fixture
async def governed(settings: Settings, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    app = create_app(settings.model_copy(update={"policy_file": policy}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def test_forbidden_tools_are_refused_at_submission(governed: httpx.AsyncClient) -> None:
    plan = {"steps": [{"id": "a", "tool": "shell", "args": {"argv": ["true"]}}]}
    response = await governed.post("/v1/runs", json={"goal": "g", "plan": plan})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "plan", "steps", 0, "tool"]
    assert "not allowed by this server's policy" in error["msg"]
    response = await governed.post("/v1/runs", json={"goal": "g", "tools": ["read_file", "shell"]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "tools", 1]
    # Acceptance checks run unattended: no forbidden tool, no call a rule gates.
    for check, reason in [
        ({"tool": "shell", "args": {"argv": ["true"]}}, "not allowed"),
        ({"tool": "write_file", "args": {"path": "x", "content": ""}}, "not as a check"),
    ]:
        criterion = {"id": "c", "check": {**check, "expect": {"exit_code": 0}}}
        response = await governed.post("/v1/runs", json={"goal": "g", "acceptance": [criterion]})
        assert response.status_code == 422, response.text
        assert reason in response.json()["detail"][0]["msg"]


async def test_rules_require_approval_and_bind_every_step(
    governed: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        governed,
        [
            {"id": "inside", "tool": "write_file", "args": {"path": "out/a.md", "content": "a"}},
            {
                "id": "outside",
                "tool": "write_file",
                "args": {"path": "notes/a.md", "content": "a"},
                "requires_approval": False,  # a rule binds: this cannot opt out
            },
            {"id": "code", "tool": "python", "args": {"code": "print(1)"}},
        ],
    )
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=governed)
    [pending] = run["pending_approvals"]
    assert pending["step_id"] == "outside"
    assert "not_prefix" in pending["summary"]
    assert run["steps"][0]["status"] == "completed"  # out/ needs no approval
    await governed.post(f"/v1/runs/{run_id}/approvals/apr-outside", json={"decision": "approve"})
    run = await wait_run(run_id, http=governed)
    # python is irreversible, but this policy waives its approval.
    assert run["status"] == "completed", run
    assert [a["step_id"] for a in run["approvals"]] == ["outside"]


async def test_an_agent_asking_for_a_forbidden_tool_is_told_why(
    governed: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [
            {
                "match": "policy-agent",
                "role": "plan",
                "json": {"steps": [{"id": "s", "intent": "i", "expected_evidence": "e"}]},
            },
            {
                "match": "policy-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "shell", "arguments": {"argv": ["true"]}}],
            },
            {"match": "policy-agent", "role": "act", "times": 1, "reply": "done without it"},
        ]
    )
    response = await governed.post("/v1/runs", json={"goal": "policy-agent: try"})
    run_id = response.json()["run_id"]
    run = await wait_run(run_id, http=governed)
    assert run["status"] == "completed", run
    acts = standin.calls("policy-agent", role="act")
    assert "shell" not in acts[0]["tools"]  # never offered
    told = acts[1]["messages"][-1]["content"]
    assert "forbidden by the server's policy" in told
    audit = (await governed.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert any(e["action"] == "refused" and "policy" in e["detail"] for e in audit)


def test_a_bad_policy_file_stops_start_up(settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[tools.shell]\nallowed = 'perhaps'\n")
    with pytest.raises(PolicyError, match=r"policy\.toml"):
        create_app(settings.model_copy(update={"policy_file": bad}))


def test_url_prefixes_match_urls_as_written() -> None:
    policy = Policy.model_validate(
        {
            "tools": {
                "http_request": {
                    "require_approval_when": [{"arg": "url", "prefix": "https://api.stripe.com/v1"}]
                },
                "write_file": {"require_approval_when": [{"arg": "path", "prefix": "deploy/"}]},
            }
        }
    )
    stripe = {"url": "https://api.stripe.com/v1/charges", "method": "GET"}
    assert policy.binding_approval("http_request", stripe) is not None
    assert policy.binding_approval("http_request", {"url": "https://example.com/"}) is None
    # Paths are still compared canonically.
    assert policy.binding_approval("write_file", {"path": "./deploy/x"}) is not None
    assert policy.binding_approval("write_file", {"path": "deploy/../x"}) is None


def test_a_command_given_a_secret_needs_a_rule_that_vouches_for_it() -> None:
    policy = Policy.model_validate(
        {"tools": {"shell": {"secrets_vouched_when": [{"arg": "argv", "prefix": "./deploy.sh "}]}}}
    )
    env = {"secret_env": {"T": {"secret": "deploy_token"}}}
    assert policy.secret_approval("shell", {"argv": ["./deploy.sh", "prod"], **env}) is None
    why = policy.secret_approval("shell", {"argv": ["sh", "-c", "echo $T | base64"], **env})
    assert why == "policy: shell gets the secrets deploy_token and no rule vouches for it"
    # "./deploy.sh" as the start of a longer word is not the command vouched for.
    assert policy.secret_approval("shell", {"argv": ["./deploy.shx", "prod"], **env})
    assert policy.secret_approval("shell", {"argv": ["sh", "-c", "true"]}) is None
