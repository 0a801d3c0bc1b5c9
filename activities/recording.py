"""Recording a model activity's calls for a cassette (longrun/cassettes.py): while an
activity collects, the endpoint notes each exchange it completes; the activity keeps them
as one artifact of the run and names it in its result, and `cassette` gathers them from
the run's history (`longrun cassette RUN_ID`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from temporalio.client import Client

from activities.artifacts import ArtifactStore, store_for
from longrun.cassettes import Cassette, Entry, Exchange, ToolCall, entry_of
from longrun.settings import Settings

TOOL_PREFIX = "tool."  # of the tool activities' names
# The exchanges of the activity running in this task, if it records.
_COLLECTED: ContextVar[list[Exchange] | None] = ContextVar("longrun_exchanges", default=None)


@contextmanager
def collecting(enabled: bool) -> Iterator[list[Exchange]]:
    """Collect the exchanges of the calls made within (none unless `enabled`)."""
    found: list[Exchange] = []
    token = _COLLECTED.set(found if enabled else None)
    try:
        yield found
    finally:
        _COLLECTED.reset(token)


def note(request: dict[str, Any], response: dict[str, Any]) -> None:
    """An exchange completed: keep it, if the activity records."""
    found = _COLLECTED.get()
    if found is not None:
        found.append(Exchange(request=request, response=response))


async def kept(store: ArtifactStore, run_id: str, exchanges: list[Exchange]) -> str | None:
    """The exchanges stored as one artifact of the run: its id, or None if there are none."""
    if not exchanges:
        return None
    data = json.dumps([e.model_dump(mode="json") for e in exchanges]).encode()
    return await asyncio.to_thread(store.put, run_id, data)


async def cassette(client: Client, settings: Settings, run_id: str, profile: str) -> Cassette:
    """The run's recorded model calls and its tool calls, in the order it made them, from
    its history (every segment) and its artifacts."""
    store = store_for(settings)
    segments = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}'")]
    entries: list[Entry] = []
    tools: list[ToolCall] = []
    model: str | None = None  # the first call's
    for segment in sorted(segments, key=lambda w: w.start_time):
        history = await client.get_workflow_handle(run_id, run_id=segment.run_id).fetch_history()
        scheduled: dict[int, tuple[str, str, Any]] = {}
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                asked = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = (
                    asked.activity_type.name,
                    asked.activity_id,
                    asked.input.payloads,
                )
            elif event.HasField("activity_task_completed_event_attributes"):
                done = event.activity_task_completed_event_attributes
                kind, activity_id, given = scheduled[done.scheduled_event_id]
                # An activity that returns nothing may complete without a payload.
                decoded = await client.data_converter.decode(done.result.payloads)
                result = decoded[0] if decoded else None
                if isinstance(result, dict) and result.get("recorded"):
                    raw = await asyncio.to_thread(store.get, run_id, result["recorded"])
                    for found in json.loads(raw):
                        exchange = Exchange.model_validate(found)
                        model = model or str(exchange.request.get("model"))
                        entries.append(entry_of(exchange, kind))
                elif kind.startswith(TOOL_PREFIX):
                    [args] = await client.data_converter.decode(given)
                    tools.append(
                        ToolCall(
                            activity_id=activity_id,
                            tool=kind.removeprefix(TOOL_PREFIX),
                            args=args,
                            output=result,
                        )
                    )
    return Cassette(
        run_id=run_id,
        model=model,
        profile=profile,
        entries=entries,
        tools=tools,
    )
