"""Recording a model activity's calls for a cassette (longrun/cassettes.py): while an
activity collects, the endpoint notes each exchange it completes; the activity keeps them
as one artifact of the run and names it in its result, and `cassette` gathers them from
the run's history (`longrun cassette RUN_ID`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from temporalio.api.history.v1 import MarkerRecordedEventAttributes
from temporalio.client import Client

from longrun.artifacts import ArtifactStore, store_for
from longrun.cassettes import Cassette, Entry, Exchange, ToolCall, entry_of
from longrun.contracts import RecordedCall
from longrun.settings import Settings

TOOL_PREFIX = "tool."  # of the tool activities' names
UNDO_SUFFIX = "-undo"  # of the step id an undo call runs under (workflows/undo.py)
LOCAL_ACTIVITY_MARKER = "core_local_activity"  # the SDK's marker of a local activity
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
    entries: list[Entry] = []
    tools: list[ToolCall] = []
    model: str | None = None  # the first call's
    async for kind, activity_id, given, result in completed_activities(client, run_id):
        if isinstance(result, dict) and result.get("recorded"):
            raw = await asyncio.to_thread(store.get, run_id, result["recorded"])
            for found in json.loads(raw):
                exchange = Exchange.model_validate(found)
                model = model or str(exchange.request.get("model"))
                entries.append(entry_of(exchange, kind))
        elif kind.startswith(TOOL_PREFIX):
            tools.append(
                ToolCall(
                    activity_id=activity_id,
                    tool=kind.removeprefix(TOOL_PREFIX),
                    args=given,
                    output=result,
                )
            )
    return Cassette(run_id=run_id, model=model, profile=profile, entries=entries, tools=tools)


async def recorded_calls(client: Client, run_id: str) -> list[RecordedCall]:
    """The tool calls the run made in its own steps (not undo calls), with their outputs,
    oldest first: what a counterfactual fork of it answers from."""
    calls = []
    async for kind, _, given, result in completed_activities(client, run_id):
        if not kind.startswith(TOOL_PREFIX) or not isinstance(given, dict):
            continue
        if given.get("run_id") != run_id or str(given.get("step_id")).endswith(UNDO_SUFFIX):
            continue
        if isinstance(result, dict) and isinstance(result.get("output"), dict):
            calls.append(
                RecordedCall(
                    tool=kind.removeprefix(TOOL_PREFIX),
                    args=given.get("args") or {},
                    output=result["output"],
                )
            )
    return calls


async def completed_activities(
    client: Client, run_id: str
) -> AsyncIterator[tuple[str, str, Any, Any]]:
    """Each activity the run completed, in every segment of its history, oldest first: its
    type, id, input and result (decoded: plain JSON values). A local activity's input is
    the call its result names (a quick tool's), else None."""
    segments = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}'")]
    for segment in sorted(segments, key=lambda w: w.start_time):
        history = await client.get_workflow_handle(run_id, run_id=segment.run_id).fetch_history()
        scheduled: dict[int, tuple[str, str, Any]] = {}
        for event in history.events:
            if event.HasField("marker_recorded_event_attributes"):
                local = await _local_activity(client, event.marker_recorded_event_attributes)
                if local is not None:
                    yield local
            elif event.HasField("activity_task_scheduled_event_attributes"):
                asked = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = (
                    asked.activity_type.name,
                    asked.activity_id,
                    asked.input.payloads,
                )
            elif event.HasField("activity_task_completed_event_attributes"):
                done = event.activity_task_completed_event_attributes
                kind, activity_id, payloads = scheduled[done.scheduled_event_id]
                given = await client.data_converter.decode(payloads)
                # An activity that returns nothing may complete without a payload.
                decoded = await client.data_converter.decode(done.result.payloads)
                yield (
                    kind,
                    activity_id,
                    given[0] if given else None,
                    decoded[0] if decoded else None,
                )


async def _local_activity(
    client: Client, marker: MarkerRecordedEventAttributes
) -> tuple[str, str, Any, Any] | None:
    """A completed local activity's type, id, input and result, from its marker (None: a
    marker of something else, or of a call that failed)."""
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or "result" not in marker.details:
        return None
    [data] = marker.details["data"].payloads
    about = json.loads(data.data)
    decoded = await client.data_converter.decode(marker.details["result"].payloads)
    result = decoded[0] if decoded else None
    given = result.pop("call", None) if isinstance(result, dict) else None
    return str(about["activity_type"]), str(about["activity_id"]), given, result
