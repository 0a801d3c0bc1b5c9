"""Live events of a run: `GET /v1/runs/{id}/events` as Server-Sent Events, and
`/events/page` as JSON pages for clients that cannot read a stream (a long poll).

Each event carries its id (counted from 1 across the whole run), its type as the SSE event
name, and itself as JSON data. A client that reconnects with `Last-Event-ID` (or
`?after=`) gets every event after that one, exactly once, whatever hand-overs happened
meanwhile; once the run has ended and its last event is sent, the stream closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from api import access
from api.access import Reader
from api.deps import SettingsDep, TemporalClient
from api.feed import POLL_S, EventFeed
from api.reading import fail_validation, stored_part
from api.schemas import answers
from longrun.contracts import EventPage, RunEvent
from longrun.settings import Settings

log = logging.getLogger("longrun.api")

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))

PING_S = 15
# While a run says nothing, ask every this many polls whether it was closed from outside
# (terminated, timed out), which its own log cannot say.
CLOSED_CHECK_POLLS = 20
RETRY_MAX_S = 10.0


@router.get(
    "/{run_id}/events",
    responses={
        **answers(404),
        200: {
            "description": "Server-Sent Events: `id`, `event` (the type) and `data` "
            "(the event as JSON, see RunEvent), until the run has ended",
            "content": {"text/event-stream": {}},
        },
    },
    response_class=EventSourceResponse,
)
async def stream_events(
    run_id: str,
    request: Request,
    client: TemporalClient,
    settings: SettingsDep,
    caller: Reader,
    after: Annotated[int | None, Query(ge=0, description="resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> EventSourceResponse:
    """The run's events as they happen, from the first (or after `Last-Event-ID` /
    `after`); the stream closes after the run's last event."""
    handle, desc = await access.run_for(client, caller, "read", run_id)
    final = await _final_page(settings, run_id, desc)
    start = after or 0
    if last_event_id is not None:
        if not last_event_id.isdigit():
            raise fail_validation(
                ("header", "last-event-id"), "must be an event id (a whole number)"
            )
        start = int(last_event_id)
    feed: EventFeed = request.app.state.events
    return EventSourceResponse(_stream(feed, handle, start, final), ping=PING_S)


class EventsPage(BaseModel):
    """Events of a run after an id, as one JSON answer."""

    events: list[RunEvent]
    next_after: int = Field(description="the last event id given: ask after it next")
    ended: bool = Field(description="the run has ended and every event of it was given")


@router.get("/{run_id}/events/page", responses=answers(404))
async def page_events(
    run_id: str,
    request: Request,
    client: TemporalClient,
    settings: SettingsDep,
    caller: Reader,
    after: Annotated[int, Query(ge=0, description="the events after this id")] = 0,
    wait_s: Annotated[
        float, Query(ge=0, le=30, description="how long to wait for one when there is none")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> EventsPage:
    """The run's events after `after` as one JSON page, for clients that cannot read a
    stream: waits up to `wait_s` for the first new one (a long poll)."""
    handle, desc = await access.run_for(client, caller, "read", run_id)
    final = await _final_page(settings, run_id, desc)
    feed: EventFeed = request.app.state.events
    found: list[RunEvent] = []
    events = _events(feed, handle, after, final)
    ended = False
    try:
        async with asyncio.timeout(wait_s):
            async for event in events:
                if event is None:  # nothing more for now
                    if found:
                        break
                    continue
                found.append(event)
                if len(found) >= limit:
                    break
            else:
                ended = True
    except TimeoutError:
        pass
    finally:
        await events.aclose()
    return EventsPage(events=found, next_after=found[-1].id if found else after, ended=ended)


async def _final_page(
    settings: Settings, run_id: str, desc: WorkflowExecutionDescription
) -> EventPage | None:
    """Every event of an ended run as it stored them when it ended, or None (a live run, or
    one that stored no events: its query answers)."""
    stored = await stored_part(settings, run_id, desc, "events")
    if stored is None:
        return None
    return EventPage.model_validate(stored).model_copy(update={"ended": True})


async def _stream(
    feed: EventFeed, handle: WorkflowHandle[Any, Any], after: int, final: EventPage | None
) -> AsyncIterator[ServerSentEvent]:
    async for event in _events(feed, handle, after, final):
        if event is not None:
            yield _sse(event)


async def _events(
    feed: EventFeed, handle: WorkflowHandle[Any, Any], after: int, final: EventPage | None
) -> AsyncGenerator[RunEvent | None, None]:
    """The run's events after `after` as they come, until its last; None each time there is
    nothing more to give for now. An ended run's `final` page needs no worker."""
    idle = 0
    backoff = POLL_S
    while True:
        try:
            if final is not None:
                page = final.model_copy(
                    update={"events": [e for e in final.events if e.id > after]}
                )
            else:
                page = await feed.page(handle, after)
        except (RPCError, WorkflowQueryFailedError) as exc:  # away or failing: keep, wait
            log.warning("events of %s: %s; trying again in %g s", handle.id, exc, backoff)
            yield None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)
            continue
        backoff = POLL_S
        events = page.events
        if after + 1 < page.first_kept and page.archived:
            earlier = await run_in_threadpool(feed.archived, handle.id, page.archived, after)
            events = [e for e in earlier if e.id < page.first_kept] + events
        for event in events:
            yield event
            after = event.id
        if page.ended and after >= page.last:
            return
        if events and after < page.last:
            continue  # more to read at once
        idle = 0 if events else idle + 1
        if idle >= CLOSED_CHECK_POLLS:
            idle = 0
            if await _closed(handle):
                return
        yield None
        await asyncio.sleep(POLL_S)


async def _closed(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether Temporal closed the run from outside (terminated, timed out); not known
    while it does not answer."""
    try:
        desc = await handle.describe()
    except RPCError:
        return False
    return desc.status not in (None, WorkflowExecutionStatus.RUNNING)


def _sse(event: RunEvent) -> ServerSentEvent:
    return ServerSentEvent(data=event.model_dump_json(), event=event.type, id=str(event.id))
