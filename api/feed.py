"""Where the API reads a run's events: one `events` query per run per poll interval
however many clients watch it, and the archived events a long run stored away."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from prometheus_client import CollectorRegistry, Counter
from temporalio.client import WorkflowHandle

from api.archive import archived
from longrun import wire
from longrun.contracts import EventPage, EventsQuery, RunEvent
from longrun.settings import Settings

POLL_S = 0.5
QUERY_TIMEOUT_S = 10.0
FORGET_AFTER_S = 60.0


class EventFeed:
    """Pages of run events, shared between the clients that watch the same run."""

    def __init__(self, settings: Settings, registry: CollectorRegistry) -> None:
        self._settings = settings
        self._served = Counter(
            "longrun_event_pages",
            "pages of run events served to watching clients",
            registry=registry,
        )
        self._queried = Counter(
            "longrun_event_queries",
            "`events` queries sent to Temporal for them",
            registry=registry,
        )
        # run id -> (when, `after` asked, the page answered)
        self._pages: dict[str, tuple[float, int, EventPage]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def page(self, handle: WorkflowHandle[object, object], after: int) -> EventPage:
        """The run's events after `after`, from a page that came less than POLL_S ago when
        one covers them, else from the run."""
        run_id = handle.id
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        self._served.inc()
        async with lock:
            now = time.monotonic()
            cached = self._pages.get(run_id)
            if cached is not None and now - cached[0] < POLL_S and _covers(cached, after):
                shared = cached[2]
                events = [e for e in shared.events if e.id > after]
                return shared.model_copy(update={"events": events})
            self._queried.inc()
            page: EventPage = await handle.query(
                wire.EVENTS,
                EventsQuery(after=after),
                result_type=EventPage,
                rpc_timeout=_timeout(),
            )
            # Stamped when it came: the clients that waited for it meanwhile take it, not
            # each a query of its own in turn when a query takes longer than POLL_S.
            answered = time.monotonic()
            self._pages[run_id] = (answered, after, page)
            self._forget_old(answered)
            return page

    def archived(self, run_id: str, artifacts: list[str], after: int) -> list[RunEvent]:
        """The archived events after `after`, oldest first (blocking: store reads)."""
        events = archived(self._settings, run_id, artifacts, "events")
        return [e for e in map(RunEvent.model_validate, events) if e.id > after]

    def _forget_old(self, now: float) -> None:
        for run_id, (at, _, _) in list(self._pages.items()):
            if now - at > FORGET_AFTER_S:
                del self._pages[run_id]
                self._locks.pop(run_id, None)


def _covers(cached: tuple[float, int, EventPage], after: int) -> bool:
    """Whether a page fetched after `cached[1]` holds every event after `after` the run
    had then: it started early enough, and either reached the newest or goes past `after`."""
    _, base, page = cached
    if base > after:
        return False
    newest = page.events[-1].id if page.events else base
    return newest >= page.last or newest > after


def _timeout() -> timedelta:
    return timedelta(seconds=QUERY_TIMEOUT_S)
