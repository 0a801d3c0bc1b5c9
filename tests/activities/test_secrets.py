"""Secrets and API keys stay out of workflow history: tools name a secret, activities
resolve it, and the exported history never contains a value."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import SecretStr
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer, Worker

from activities.model import ModelActivities
from activities.tools.bound import build_tool_activities, call_redacted
from activities.tools.builtin import reveal
from activities.tools.registry import IMPLEMENTATIONS, ToolContext
from activities.verify import VerifyActivities
from api.app import create_app
from longrun.catalogue import CATALOGUE, SecretRef
from longrun.contracts import CheckRequest, Expect, SecretGrant, ToolCall, ToolCheck
from longrun.dev.stack import ServerThread, TemporalDevServer, temporal_binary
from longrun.settings import ApiKey, Settings, hash_key
from longrun.temporal import DATA_CONVERTER
from tests.helpers import Poll, allow
from workflows import RunWorkflow

SECRET = "Bearer s3cr3t-VALUE-9f2c"
API_KEY = "api-key-7d41-never-in-history"
INTERN_KEY = "api-key-of-someone-granted-no-secret"
OPS = SecretGrant(owner="ops", names=["*"])


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The test settings, with one secret and one API key."""
    return settings.model_copy(
        update={
            "secrets": {"svc_token": SecretStr(SECRET)},
            "api_keys": [
                ApiKey(name="ops", sha256=hash_key(API_KEY), roles=["admin"], secrets=["*"]),
                ApiKey(name="intern", sha256=hash_key(INTERN_KEY), roles=["admin"]),
            ],
        }
    )


@pytest.fixture
def guarded(settings: Settings) -> Iterator[str]:
    """A service that answers only with the right Authorization header."""
    app = FastAPI()

    @app.get("/private")
    async def private(request: Request) -> JSONResponse:
        ok = request.headers.get("authorization") == SECRET
        # A careless service that echoes the credential back.
        echoed = request.headers.get("authorization")
        return JSONResponse({"ok": ok, "echo": echoed}, status_code=200 if ok else 401)

    with ServerThread(app) as server:
        allow(settings, server.url)
        yield server.url


@pytest.fixture
async def http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(settings))
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=headers
    ) as c:
        yield c


def _context(settings: Settings, grant: SecretGrant) -> ToolContext:
    """What a tool of a run carrying `grant` gets."""
    return ToolContext(
        run_id="run-x",
        step_id="s",
        idempotency_key="k",
        workspace=Path("."),
        settings=settings,
        grant=grant,
    )


def readable(exported: str) -> str:
    """The exported history with every payload decoded (the CLI prints them as base64)."""
    texts = [exported]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            with contextlib.suppress(ValueError):
                texts.append(base64.b64decode(node, validate=True).decode())

    walk(json.loads(exported))
    return "\n".join(texts)


async def test_secret_values_never_reach_history(
    http: httpx.AsyncClient,
    client: Client,
    worker: Worker,
    guarded: str,
    wait_run: Poll,
    temporal_server: TemporalDevServer,
) -> None:
    token = {"secret": "svc_token"}
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    plan = {
        "steps": [
            {
                "id": "call",
                "tool": "http_request",
                "args": {"url": f"{guarded}/private", "headers": {"Authorization": token}},
            },
            {
                "id": "env",
                "tool": "shell",
                "args": {
                    # Compares a digest, so the plan itself holds no secret.
                    "argv": ["sh", "-c", f'printf %s "$TOKEN" | sha256sum | grep -q {digest}'],
                    "secret_env": {"TOKEN": token},
                },
                "requires_approval": False,
            },
        ]
    }
    response = await http.post("/v1/runs", json={"goal": "use a secret", "plan": plan})
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    # A command given a secret could pass it on in any form: a person looks first.
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=http)
    [pending] = run["pending_approvals"]
    assert "shell gets the secrets svc_token" in pending["summary"]
    decided = await http.post(
        f"/v1/runs/{run_id}/approvals/{pending['approval_id']}", json={"decision": "approve"}
    )
    assert decided.status_code == 202, decided.text
    run = await wait_run(run_id, http=http)
    assert run["status"] == "completed", run
    assert run["steps"][0]["output"]["json"] == {"ok": True, "echo": "[secret]"}
    # The secret-approval patch replays.
    history = await client.get_workflow_handle(run_id).fetch_history()
    replayer = Replayer(workflows=[RunWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure

    exported = subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "show",
            "--workflow-id",
            run_id,
            "--address",
            temporal_server.address,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    shown = readable(exported)
    assert "svc_token" in shown  # the history names the secret...
    assert "s3cr3t" not in shown  # ...but never holds its value
    assert API_KEY not in shown and hash_key(API_KEY) not in shown


async def test_secrets_are_named_only_by_keys_granted_them(
    settings: Settings, http: httpx.AsyncClient, client: Client
) -> None:
    step = {
        "id": "call",
        "tool": "http_request",
        "args": {"url": "http://127.0.0.1:9/", "headers": {"X": {"secret": "svc_token"}}},
    }
    body = {"goal": "g", "plan": {"steps": [step]}, "labels": {"t": "granted-secrets"}}
    intern = {"Authorization": f"Bearer {INTERN_KEY}"}
    refused = await http.post("/v1/runs", json=body, headers=intern)
    assert refused.status_code == 403
    assert "'intern' is not granted the secrets svc_token" in refused.json()["detail"]
    # Also in an acceptance check, and nothing was started.
    check = {
        "id": "c",
        "check": {"tool": "http_request", "args": step["args"], "expect": {"contains": "ok"}},
    }
    agent = {"goal": "g", "acceptance": [check], "labels": {"t": "granted-secrets"}}
    assert (await http.post("/v1/runs", json=agent, headers=intern)).status_code == 403
    started = await client.count_workflows("LongrunLabels = 't:granted-secrets'")
    assert started.count == 0
    granted = await http.post("/v1/runs", json={**body, "labels": {}})
    assert granted.status_code == 202, granted.text
    await client.get_workflow_handle(granted.json()["run_id"]).terminate("test")


async def test_a_check_may_hand_a_secret_only_to_a_command_the_policy_vouches_for(
    settings: Settings, client: Client, tmp_path: Path
) -> None:
    check = {
        "id": "c",
        "check": {
            "tool": "shell",
            "args": {
                "argv": ["./probe.sh", "--quiet"],
                "secret_env": {"T": {"secret": "svc_token"}},
            },
            "expect": {"exit_code": 0},
        },
    }
    body = {"goal": "g", "acceptance": [check]}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=headers
    ) as c:
        refused = await c.post("/v1/runs", json=body)
    assert refused.status_code == 422
    assert "shell gets the secrets svc_token and no rule vouches" in refused.text
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[tools.shell.secrets_vouched_when]]\narg = "argv"\nprefix = "./probe.sh "\n'
    )
    vouched = create_app(settings.model_copy(update={"policy_file": policy}))
    transport = httpx.ASGITransport(app=vouched)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=headers
    ) as c:
        response = await c.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    await client.get_workflow_handle(response.json()["run_id"]).terminate("test")


async def test_an_unknown_secret_fails_the_step_by_name(
    http: httpx.AsyncClient, worker: Worker, guarded: str, wait_run: Poll
) -> None:
    plan = {
        "steps": [
            {
                "id": "call",
                "tool": "http_request",
                "args": {"url": f"{guarded}/private", "headers": {"X": {"secret": "nope"}}},
            }
        ]
    }
    run_id = (await http.post("/v1/runs", json={"goal": "g", "plan": plan})).json()["run_id"]
    run = await wait_run(run_id, http=http)
    assert run["status"] == "failed"
    assert "no secret named 'nope'" in run["steps"][0]["error"]


async def test_an_acceptance_check_that_prints_a_secret_shows_it_redacted(
    settings: Settings,
) -> None:
    checks = VerifyActivities(settings, ModelActivities(settings))
    check = ToolCheck(
        tool="shell",
        args={
            "argv": ["sh", "-c", 'echo "token=$T"'],
            "secret_env": {"T": {"secret": "svc_token"}},
        },
        expect=Expect(exit_code=1),  # fails, so the evidence shows the output
    )
    request = CheckRequest(
        run_id="run-" + "0" * 32,
        check_id="c",
        goal="g",
        tool_check=check,
        judge_model="m",
        grant=OPS,
    )
    verdict = await ActivityEnvironment().run(checks.acceptance, request)
    assert not verdict.passed
    assert "token=[secret]" in verdict.evidence and "s3cr3t" not in verdict.evidence


async def test_a_failure_of_any_kind_is_redacted(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def careless(args: Any, ctx: ToolContext) -> dict[str, Any]:
        value = reveal(ctx, SecretRef(secret="svc_token"))
        raise ValueError(f"Illegal header value {value!r}")  # what a client library says

    spec = CATALOGUE["echo"]
    monkeypatch.setitem(IMPLEMENTATIONS, "echo", careless)
    ctx = _context(settings, OPS)
    with pytest.raises(ApplicationError) as info:
        await call_redacted(spec, spec.args_model.model_validate({}), ctx)
    assert info.value.type == "ValueError" and "[secret]" in info.value.message
    assert "s3cr3t" not in info.value.message and info.value.__cause__ is None
    # A secret stored with its line break is refused as a header, by name, not retried.
    with_newline = settings.model_copy(update={"secrets": {"svc_token": SecretStr(SECRET + "\n")}})
    tools = {
        d.name: d
        for d in map(activity._Definition.must_from_callable, build_tool_activities(with_newline))
    }
    call = ToolCall(
        run_id="run-" + "1" * 32,
        step_id="s",
        idempotency_key="k",
        args={"url": "http://127.0.0.1:9/", "headers": {"Authorization": {"secret": "svc_token"}}},
        grant=OPS,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(tools["tool.http_request"].fn, call)
    assert info.value.non_retryable and "line break" in info.value.message
    assert "s3cr3t" not in info.value.message


@pytest.fixture
def capture(settings: Settings) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A server that records the headers of every request, and whose `/named` answers
    `{"secret": "svc_token"}` (what a hostile upstream would answer); its URL and records."""
    app = FastAPI()
    seen: list[dict[str, str]] = []

    @app.get("/named")
    async def named() -> dict[str, str]:
        return {"secret": "svc_token"}

    @app.get("/sink")
    async def sink(request: Request) -> dict[str, bool]:
        seen.append(dict(request.headers))
        return {"ok": True}

    with ServerThread(app) as server:
        allow(settings, server.url)
        yield server.url, seen


def _vectors(url: str) -> dict[str, list[dict[str, Any]]]:
    """Plans that reach a secret the literal plan never names."""
    named = {"secret": "svc_token"}
    sink = {"url": f"{url}/sink", "headers": {"X-Token": "{{item}}"}}
    child = {
        "goal": "child",
        "plan": {
            "steps": [
                {"id": "c", "tool": "http_request", "args": {**sink, "headers": {"X": named}}}
            ]
        },
    }
    item_child = {
        "goal": "item",
        "plan": {"steps": [{"id": "c", "tool": "http_request", "args": sink}]},
    }
    return {
        "for_each_item": [
            {"id": "f", "for_each": {"items": [named], "tool": "http_request", "args": sink}}
        ],
        "child_plan": [{"id": "r", "run": child}],
        "item_template": [{"id": "f", "for_each": {"items": [named], "run": item_child}}],
        "upstream_output": [
            {"id": "a", "tool": "http_request", "args": {"url": f"{url}/named"}},
            {
                "id": "b",
                "tool": "http_request",
                "args": {"url": f"{url}/sink", "headers": {"X-Token": "{{steps.a.output.json}}"}},
                "depends_on": ["a"],
            },
        ],
    }


@pytest.mark.parametrize(
    "vector", ["for_each_item", "child_plan", "item_template", "upstream_output"]
)
async def test_a_secret_reached_indirectly_is_refused_where_it_would_be_revealed(
    http: httpx.AsyncClient,
    worker: Worker,
    wait_run: Poll,
    capture: tuple[str, list[dict[str, str]]],
    vector: str,
) -> None:
    url, seen = capture
    steps = _vectors(url)[vector]
    body = {"goal": f"reach a secret through {vector}", "plan": {"steps": steps}}
    intern = {"Authorization": f"Bearer {INTERN_KEY}"}
    response = await http.post("/v1/runs", json=body, headers=intern)
    assert response.status_code == 202, response.text  # no secret in the literal plan
    run = await wait_run(response.json()["run_id"], http=http, timeout_s=90)
    assert run["status"] == "failed", run
    assert "may not use the secret 'svc_token'" in json.dumps(run)
    assert not [h for h in seen if SECRET in h.values()]
    if vector == "upstream_output":
        # The twin: a key granted the secret gets it sent the same way.
        granted = await http.post("/v1/runs", json=body)
        run = await wait_run(granted.json()["run_id"], http=http)
        assert run["status"] == "completed", run
        assert [h for h in seen if h.get("x-token") == SECRET]


async def test_a_run_loses_a_secret_taken_from_its_key(settings: Settings) -> None:
    ctx = _context(settings, SecretGrant(owner="intern", names=["svc_token"]))  # at its start
    with pytest.raises(ApplicationError) as info:
        reveal(ctx, SecretRef(secret="svc_token"))
    assert "'intern' that started this run is no longer granted 'svc_token'" in info.value.message
    gone = dataclasses.replace(ctx, grant=SecretGrant(owner="departed", names=["*"]))
    with pytest.raises(ApplicationError) as info:
        reveal(gone, SecretRef(secret="svc_token"))
    assert "'departed' that started this run is no longer configured" in info.value.message
