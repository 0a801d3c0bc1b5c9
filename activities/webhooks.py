"""`webhook.deliver`: one run event POSTed to one webhook URL, signed, retried until the
receiver takes it (or refuses it for good).

Signed as Standard Webhooks (standardwebhooks.com) sign: `webhook-id` (the delivery id, the
same on every attempt, for the receiver to apply a delivery once), `webhook-timestamp` (of
this attempt; receivers refuse stale ones, so a captured delivery cannot be replayed) and
`webhook-signature` (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`) under the bytes of
LONGRUN_WEBHOOK_SECRET; and `X-Longrun-Event`, the event type. The body:
`{"delivery_id", "run_id", "event"}`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import Webhook
from temporalio import activity

from activities.errors import fatal, reported_with_attempt, retry_after_seconds, transient
from activities.tools.destinations import Refused, checked_client
from longrun.contracts import WebhookDelivery
from longrun.settings import Settings

TIMEOUT_S = 10.0


def signed_headers(
    secret: str, delivery_id: str, body: bytes, now: datetime | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt to deliver `body`, signed `now`."""
    now = now or datetime.now(UTC)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret.encode()).sign(delivery_id, now, body),
    }


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
            payload = {
                "delivery_id": delivery.delivery_id,
                "run_id": delivery.run_id,
                "event": delivery.event.model_dump(mode="json"),
            }
            body = json.dumps(payload).encode()
            headers = {
                "Content-Type": "application/json",
                "X-Longrun-Event": delivery.event.type,
                **signed_headers(secret.get_secret_value(), delivery.delivery_id, body),
            }
            try:
                async with checked_client(self._settings, timeout_s=TIMEOUT_S) as client:
                    response = await client.post(url, content=body, headers=headers)
            except Refused as exc:
                raise fatal(f"webhook {delivery.url}: {exc}", type="DestinationRefused") from None
            status = response.status_code
            if status in (408, 429) or status >= 500:
                raise transient(
                    f"webhook {delivery.url} answered {status}",
                    retry_after_s=retry_after_seconds(response.headers.get("retry-after")),
                )
            if status >= 400:
                raise fatal(f"webhook {delivery.url} refused the delivery: {status}")
            return status
