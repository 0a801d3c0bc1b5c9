"""Live events: `GET /v1/runs/{id}/events` over real HTTP streams a run's events as they
happen; a client that reconnects gets each event exactly once, across hand-overs, and a
client of an ended run gets the whole log, archived events included."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from longrun.dev.stack import free_port
from longrun.settings import Settings
from longrun.temporal import DATA_CONVERTER
from tests.helpers import api_process, start_api, stop_processes
from workflows import RunWorkflow

Event = dict[str, str]


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """The API as its own process (streams need a real server), segments of 3 steps."""
    with api_process(settings.model_copy(update={"continue_as_new_every": 3}), tmp_path) as url:
        yield url


async def read_events(
    url: str, headers: dict[str, str] | None = None, until: Callable[[Event], bool] | None = None
) -> list[Event]:
    """Events of a stream, until it closes (or `until` holds for one: then disconnect)."""
    events: list[Event] = []
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream("GET", url, headers=headers or {}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        current: Event = {}
        async for line in response.aiter_lines():
            if line:
                field, _, value = line.partition(":")
                current[field] = value.removeprefix(" ")
                continue
            if "data" in current:
                events.append(current)
                if until is not None and until(current):
                    break
            current = {}
    return events


def chain(ids: list[str], after: str | None = None) -> list[dict[str, Any]]:
    """Echo steps, each after the one before."""
    steps = []
    for step_id in ids:
        steps.append({"id": step_id, "tool": "echo", "depends_on": [after] if after else []})
        after = step_id
    return steps


async def test_a_client_that_reconnects_gets_every_event_once_across_hand_overs(
    api_url: str, client: Client, worker: Worker
) -> None:
    steps = chain(["a0", "a1", "a2", "a3"])
    steps.append({"id": "gate", "approval": {"message": "go on?"}, "depends_on": ["a3"]})
    steps += chain(["b0", "b1", "b2", "b3"], after="gate")
    async with httpx.AsyncClient(base_url=api_url) as api:
        created = await api.post("/v1/runs", json={"goal": "events", "plan": {"steps": steps}})
        run_id = created.json()["run_id"]
        url = f"{api_url}/v1/runs/{run_id}/events"
        first = await read_events(url, until=lambda e: e["event"] == "approval.requested")
        decided = await api.post(
            f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"}
        )
        assert decided.status_code == 202
    rest = await read_events(url, headers={"Last-Event-ID": first[-1]["id"]})
    ids = [int(e["id"]) for e in first + rest]
    assert ids == list(range(1, len(ids) + 1))  # no gap, no duplicate
    types = [e["event"] for e in first + rest]
    # The approval step waits rather than starts; every step completes.
    assert types.count("step.started") == 8 and types.count("step.completed") == 9
    assert types.count("run.continued") >= 2
    assert "approval.decided" in types
    assert types[-1] == "run.ended" and '"status":"completed"' in rest[-1]["data"]
    # A client of the ended run gets the whole log, then the stream closes; `after` works
    # as Last-Event-ID does.
    whole = await read_events(url)
    assert [int(e["id"]) for e in whole] == ids
    later = await read_events(f"{url}?after={ids[-3]}")
    assert [int(e["id"]) for e in later] == ids[-2:]


async def _counter(api: httpx.AsyncClient, name: str) -> float:
    """One counter of the API's Prometheus text."""
    text = (await api.get("/metrics")).text
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{name}_total"
    )


async def test_many_watchers_of_a_run_share_its_queries(
    api_url: str, client: Client, worker: Worker
) -> None:
    watchers = 20
    steps = [*chain(["a0", "a1"]), {"id": "gate", "approval": {"message": "?"}}]
    async with httpx.AsyncClient(base_url=api_url) as api:
        created = await api.post("/v1/runs", json={"goal": "watched", "plan": {"steps": steps}})
        url = f"{api_url}/v1/runs/{created.json()['run_id']}/events"
        await read_events(url, until=lambda e: e["event"] == "approval.requested")
        pages = await _counter(api, "longrun_event_pages")
        queries = await _counter(api, "longrun_event_queries")

        async def watch() -> None:
            # Each watcher reads the log so far, then waits on the stream a while.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3):
                    await read_events(url)

        await asyncio.gather(*(watch() for _ in range(watchers)))
        served = await _counter(api, "longrun_event_pages") - pages
        asked = await _counter(api, "longrun_event_queries") - queries
    # Every watcher polled several times; Temporal was asked about once per poll interval.
    assert served >= watchers * 2, (served, asked)
    assert asked * 5 <= served, (served, asked)


async def test_a_long_run_archives_its_early_events_and_still_serves_them(
    settings: Settings, tmp_path: Path, client: Client, worker: Worker
) -> None:
    port = free_port()
    proc = start_api(settings.model_copy(update={"continue_as_new_every": 50}), tmp_path, port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as api:
            steps = chain([f"s{i}" for i in range(160)])
            created = await api.post("/v1/runs", json={"goal": "many", "plan": {"steps": steps}})
            run_id = created.json()["run_id"]
            events = await read_events(f"{api.base_url}/v1/runs/{run_id}/events")
    finally:
        stop_processes(proc)
    ids = [int(e["id"]) for e in events]
    assert ids == list(range(1, len(ids) + 1))
    assert [e["event"] for e in events].count("step.completed") == 160
    # The later segments started with a short log and references to the rest.
    segments = [wf async for wf in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(segments) >= 3
    replayer = Replayer(workflows=[RunWorkflow], data_converter=DATA_CONVERTER)
    for segment in segments:
        history = await client.get_workflow_handle(run_id, run_id=segment.run_id).fetch_history()
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
    page = await client.get_workflow_handle(run_id).query("events", {"after": 0})
    assert page["archived"] and page["first_kept"] > 1


async def test_bad_resume_points_are_refused(api_url: str) -> None:
    async with httpx.AsyncClient(base_url=api_url) as api:
        unknown = await api.get("/v1/runs/run-" + "0" * 32 + "/events")
        assert unknown.status_code == 404
        bad = await api.get("/v1/runs/run-" + "0" * 32 + "/events", headers={"Last-Event-ID": "x"})
        assert bad.status_code in (404, 422)
        negative = await api.get("/v1/runs/run-" + "0" * 32 + "/events?after=-1")
        assert negative.status_code == 422


async def test_events_as_json_pages_wait_for_the_next_and_say_when_the_run_ended(
    api: httpx.AsyncClient, worker: Worker
) -> None:
    plan = {"steps": [{"id": "w", "wait": {"seconds": 1.5}}, {"id": "e", "tool": "echo"}]}
    created = await api.post("/v1/runs", json={"goal": "pages", "plan": plan})
    run_id = created.json()["run_id"]
    seen: list[dict[str, Any]] = []
    after, ended = 0, False
    while not ended:
        page = await api.get(f"/v1/runs/{run_id}/events/page", params={"after": after, "wait_s": 5})
        assert page.status_code == 200, page.text
        body = page.json()
        seen += body["events"]
        after, ended = body["next_after"], body["ended"]
    assert [e["id"] for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1]["type"] == "run.ended"
    again = (await api.get(f"/v1/runs/{run_id}/events/page", params={"after": after})).json()
    assert again == {"events": [], "next_after": after, "ended": True}
    for bad in ({"after": -1}, {"wait_s": 31}, {"limit": 0}, {"limit": 501}, {"wait_s": "x"}):
        refused = await api.get(f"/v1/runs/{run_id}/events/page", params=bad)
        assert refused.status_code == 422, (bad, refused.text)
    unknown = await api.get(f"/v1/runs/run-{'0' * 32}/events/page")
    assert unknown.status_code == 404
