"""`webhook.deliver`: one run event POSTed to one webhook URL, signed, retried until the
receiver takes it (or refuses it for good). Every attempt carries the same delivery id.

Headers: `X-Longrun-Delivery` (the id), `X-Longrun-Event` (the event type) and
`X-Longrun-Signature: sha256=<hex>`, the HMAC-SHA256 of the body under
LONGRUN_WEBHOOK_SECRET. The body: `{"delivery_id", "run_id", "event"}`.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
from temporalio import activity

from activities.errors import fatal, reported_with_attempt, retry_after_seconds, transient
from activities.tools.builtin import destination_refusal
from longrun.contracts import WebhookDelivery
from longrun.settings import Settings

TIMEOUT_S = 10.0


def signature(secret: str, body: bytes) -> str:
    """The signature header's value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookActivities:
    """Webhook deliveries for the runs of one worker."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @activity.defn(name="webhook.deliver")
    async def deliver(self, delivery: WebhookDelivery) -> int:
        """POST the event; the receiver's status code."""
        with reported_with_attempt():
            secret = self._settings.webhook_secret
            if secret is None:
                raise fatal("webhooks are configured but LONGRUN_WEBHOOK_SECRET is not set")
            url = httpx.URL(delivery.url)
            refusal = destination_refusal(self._settings, url)
            if refusal is not None:
                raise fatal(f"webhook {delivery.url}: {refusal}")
            payload = {
                "delivery_id": delivery.delivery_id,
                "run_id": delivery.run_id,
                "event": delivery.event.model_dump(mode="json"),
            }
            body = json.dumps(payload).encode()
            headers = {
                "Content-Type": "application/json",
                "X-Longrun-Delivery": delivery.delivery_id,
                "X-Longrun-Event": delivery.event.type,
                "X-Longrun-Signature": signature(secret.get_secret_value(), body),
            }
            async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
                response = await client.post(url, content=body, headers=headers)
            status = response.status_code
            if status in (408, 429) or status >= 500:
                raise transient(
                    f"webhook {delivery.url} answered {status}",
                    retry_after_s=retry_after_seconds(response.headers.get("retry-after")),
                )
            if status >= 400:
                raise fatal(f"webhook {delivery.url} refused the delivery: {status}")
            return status
