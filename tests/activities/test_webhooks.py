"""Webhooks: a receiver gets a signed POST when an approval is requested, the run pauses
and it ends; a delivery the receiver failed is sent again with the same delivery id."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from temporalio.client import Client
from temporalio.worker import Worker

from activities.webhooks import signed_headers
from longrun.dev.stack import ServerThread
from longrun.settings import Settings
from tests.helpers import REPO, Poll, submit

SECRET = "whsec-test-7f3a"


@pytest.fixture
def settings(settings: Settings, receiver: Receiver) -> Settings:
    """The test settings, with a webhook secret and the receiver allowed."""
    allowed = [*settings.http_allow_hosts, receiver.server.url.removeprefix("http://")]
    return settings.model_copy(
        update={"webhook_secret": SecretStr(SECRET), "http_allow_hosts": allowed}
    )


class Receiver:
    """Records each delivery; fails the first attempt of the first one."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> JSONResponse:
            body = await request.body()
            self.received.append({"headers": dict(request.headers), "body": body})
            if len(self.received) == 1:
                return JSONResponse({"busy": True}, status_code=503)
            return JSONResponse({"ok": True})

        self.server = ServerThread(app)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    target = Receiver()
    with target.server:
        yield target


async def test_a_receiver_gets_each_event_signed_once_per_delivery_id(
    api: httpx.AsyncClient, client: Client, worker: Worker, receiver: Receiver, wait_run: Poll
) -> None:
    hook = f"{receiver.server.url}/hook"
    steps = [
        {"id": "gate", "approval": {"message": "go?"}},
        {"id": "after", "tool": "echo", "depends_on": ["gate"]},
    ]
    run_id = await submit(api, steps, webhooks=[hook])
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    assert (await api.post(f"/v1/runs/{run_id}/pause", json={})).status_code == 202
    await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    await wait_run(run_id, lambda r: r["pause_reason"] == "requested")
    assert (await api.post(f"/v1/runs/{run_id}/resume", json={})).status_code == 202
    await wait_run(run_id)
    # The run closes once its deliveries are done (the first one is retried).
    await client.get_workflow_handle(run_id).result()

    deliveries: dict[str, list[dict[str, Any]]] = {}
    for got in receiver.received:
        headers, body = got["headers"], got["body"]
        payload = Webhook(SECRET.encode()).verify(body, headers)  # as a receiver checks it
        assert payload["delivery_id"] == headers["webhook-id"]
        assert payload["run_id"] == run_id
        assert payload["event"]["type"] == headers["x-longrun-event"]
        deliveries.setdefault(payload["delivery_id"], []).append(payload)
    # One delivery per event; the first was sent again after the receiver's 503.
    types = [tries[0]["event"]["type"] for tries in deliveries.values()]
    assert types == ["approval.requested", "run.paused", "run.ended"]
    assert [len(tries) for tries in deliveries.values()] == [2, 1, 1]
    assert all(tries[0] == tries[-1] for tries in deliveries.values())  # the same body again
    assert deliveries[next(reversed(deliveries))][0]["event"]["data"]["status"] == "completed"


async def test_webhooks_that_cannot_be_delivered_are_refused_at_submission(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    steps = [{"id": "a", "tool": "echo"}]
    temporal = f"http://{settings.temporal_address}/"  # one of longrun's own services
    for bad in ("http://example.com/hook", "ftp://127.0.0.1/x", temporal):
        response = await api.post(
            "/v1/runs", json={"goal": "g", "plan": {"steps": steps}, "webhooks": [bad]}
        )
        assert response.status_code == 422, (bad, response.text)


def test_a_captured_delivery_cannot_be_replayed_later() -> None:
    body = json.dumps({"delivery_id": "d-1", "run_id": "r", "event": {}}).encode()
    headers = signed_headers(SECRET, "d-1", body)
    receiver = Webhook(SECRET.encode())
    assert receiver.verify(body, headers)["delivery_id"] == "d-1"  # fresh: taken
    # Captured ten minutes ago and replayed now: refused as stale; with its timestamp moved
    # forward, its signature no longer matches.
    earlier = datetime.now(UTC) - timedelta(minutes=10)
    captured = signed_headers(SECRET, "d-1", body, earlier)
    with pytest.raises(WebhookVerificationError, match="too old"):
        receiver.verify(body, captured)
    forged = {**captured, "webhook-timestamp": headers["webhook-timestamp"]}
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver.verify(body, forged)
    tampered = body.replace(b'"r"', b'"s"')
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver.verify(tampered, headers)


def test_the_guides_receiver_verifies_a_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    guide = (REPO / "docs" / "guide.md").read_text()
    [snippet] = re.findall(r"```python\n(import os\n\nfrom standardwebhooks.*?)```", guide, re.S)
    monkeypatch.setenv("LONGRUN_WEBHOOK_SECRET", SECRET)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    body = b'{"delivery_id": "d-2", "run_id": "r", "event": {}}'
    assert scope["on_post"](body, signed_headers(SECRET, "d-2", body))["delivery_id"] == "d-2"
    stale = signed_headers(SECRET, "d-2", body, datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError):
        scope["on_post"](body, stale)
