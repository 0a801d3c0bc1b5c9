"""The longrun worker: hosts the run workflow and every activity on the task queue."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client
from temporalio.worker import Worker

from activities import activities_for
from longrun.settings import Settings, get_settings
from longrun.telemetry import configure_tracing
from longrun.temporal import connect, ensure_search_attributes
from workflows import RunWorkflow

log = logging.getLogger("longrun.worker")


@asynccontextmanager
async def serving(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """A running worker on the task queue: the run workflow and every activity."""
    async with (
        activities_for(settings) as activities,
        Worker(
            client,
            task_queue=settings.task_queue,
            workflows=[RunWorkflow],
            activities=activities,
        ) as worker,
    ):
        yield worker


async def run_worker(settings: Settings) -> None:
    """Poll the task queue until SIGINT or SIGTERM, then finish in-flight work and exit."""
    client = await connect(settings)
    await ensure_search_attributes(client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with serving(client, settings):
        log.info(
            "worker polling task queue %r on %s (namespace %s)",
            settings.task_queue,
            settings.temporal_address,
            settings.temporal_namespace,
        )
        await stop.wait()


def main() -> None:
    """Entry point of `python worker.py` and `longrun worker`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = get_settings()
    configure_tracing("longrun-worker", settings)
    asyncio.run(run_worker(settings))


if __name__ == "__main__":
    main()
