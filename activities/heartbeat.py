"""Heartbeats of long activities: a dead worker is noticed within the heartbeat timeout,
and cancellation reaches the work."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

HEARTBEAT_EVERY_S = 1.0


async def _heartbeat_forever() -> None:
    # Sleep first: work that finishes within a second needs no heartbeat round trip.
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY_S)
        # The same calls also serve the CLI's checks; a local activity has no heartbeat.
        if activity.in_activity() and not activity.info().is_local:
            activity.heartbeat()


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat every second while the body runs (the SDK sends them at its own pace)."""
    beat = asyncio.create_task(_heartbeat_forever())
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
