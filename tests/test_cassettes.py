"""Cassettes: a run's model calls recorded by the worker, exported from its history, and
played back by the stand-in, which answers the same requests the same way and refuses a
changed one naming the nearest recorded request. Recorded on the stand-in here, and on a
real server in tests/cassettes/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from activities.recording import cassette
from api.app import create_app
from longrun.cassettes import Cassette, key_of
from longrun.settings import Settings
from tests.helpers import Poll, StandIn
from tests.test_agent import act, plan, start
from worker import serving

CASSETTES = Path(__file__).parent / "cassettes"
OUT_ACCEPTANCE = [
    {
        "id": "out",
        "check": {"tool": "read_file", "args": {"path": "out.txt"}, "expect": {"contains": "ok"}},
    }
]


async def _run(
    client: Client, settings: Settings, wait_run: Poll, body: dict[str, Any]
) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=create_app(settings))
    async with (
        serving(client, settings),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
    ):
        run_id = await start(api, **body)
        return await wait_run(run_id, http=api)


async def test_a_recorded_run_plays_back_and_a_changed_prompt_names_the_nearest(
    client: Client, settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    marker = "cassette-run"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "write ok into out.txt"))},
            act(marker, ("write_file", {"path": "out.txt", "content": "ok"})),
            act(marker, ("finish", {"summary": "wrote it"})),
        ]
    )
    body = {
        "goal": f"{marker}: write ok into out.txt",
        "acceptance": OUT_ACCEPTANCE,
        "tools": ["write_file"],
    }
    recording = settings.model_copy(update={"record_model_calls": True})
    recorded = await _run(client, recording, wait_run, body)
    assert recorded["status"] == "completed", recorded
    found = await cassette(client, recording, recorded["run_id"], "openai")
    roles = [e.activity for e in found.entries]
    assert roles[0] == "model.plan" and roles.count("model.act") == 2, roles
    assert [(t.tool, t.output is not None) for t in found.tools] == [("write_file", True)]
    asked = len(standin.calls(marker))

    # Played back: the same requests get the same answers, and no rule is needed.
    standin.reset()
    standin.play(json.loads(found.model_dump_json()))
    again = await _run(client, settings, wait_run, body)
    assert again["status"] == "completed", again
    assert again["result"]["summary"] == "wrote it"
    assert len(standin.calls(marker)) == asked
    assert [c["outcome"] for c in standin.calls(marker)] == ["ok"] * asked

    # A changed goal changes the planner's prompt: the cassette has no answer and says
    # which recorded request is nearest and where they differ.
    changed = await _run(client, settings, wait_run, {**body, "goal": f"{marker}: write OK"})
    assert changed["status"] == "failed", changed
    assert "has no answer for this request" in changed["error"]
    assert "nearest recorded: entry 0 (model.plan), message 1 (user) differs" in changed["error"]


def test_requests_are_keyed_by_what_they_ask_not_how() -> None:
    asked = {
        "model": "a",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "t"}}],
    }
    same = {**asked, "model": "b", "max_tokens": 99, "stream": False}
    assert key_of(asked) == key_of(same)
    assert key_of(asked) != key_of({**asked, "messages": [{"role": "user", "content": "ho"}]})
    assert key_of(asked) != key_of({**asked, "tools": []})


def test_the_recorded_cassettes_are_valid() -> None:
    for path in sorted(CASSETTES.glob("*.json")):
        Cassette.model_validate_json(path.read_bytes())
