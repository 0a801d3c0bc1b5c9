"""Webhooks: a signed POST to each of the run's webhook URLs when an approval is requested,
the run pauses, or it ends. Each delivery is an activity with its own retries; the run
waits for them before it ends or hands over, so none is dropped."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import RunEvent, WebhookDelivery

NOTIFIED = (
    "approval.requested",
    "approval.reminder",
    "approval.escalated",
    "run.paused",
    "run.ended",
)
DELIVERY_TIMEOUT = timedelta(seconds=30)
# About an hour of tries for a receiver that is down, then the delivery is given up.
DELIVERY_RETRIES = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
    maximum_attempts=20,
)


class Webhooks:
    """Deliveries of the run's events to its webhook URLs."""

    def __init__(self, run_id: str, urls: list[str]) -> None:
        self._run_id = run_id
        self._urls = urls
        self.pending: list[asyncio.Future[Any]] = []

    def notify(self, event: RunEvent) -> None:
        """Deliver `event` to every URL, if it is one that webhooks carry."""
        if event.type not in NOTIFIED:
            return
        for n, url in enumerate(self._urls):
            delivery = WebhookDelivery(
                run_id=self._run_id,
                url=url,
                delivery_id=f"{self._run_id}:{event.id}:{n}",
                event=event,
            )
            self.pending.append(
                workflow.start_activity(
                    "webhook.deliver",
                    delivery,
                    start_to_close_timeout=DELIVERY_TIMEOUT,
                    retry_policy=DELIVERY_RETRIES,
                    summary=f"webhook: {event.type} to {url[:100]}",
                )
            )

    async def settle(self) -> None:
        """Wait for the deliveries under way (one that fails for good is left failed: the
        run goes on)."""
        pending, self.pending = self.pending, []
        await asyncio.gather(*pending, return_exceptions=True)
