"""Cassettes: a run's model calls recorded by the worker, exported from its history, and
played back by the stand-in, which answers the same requests the same way and refuses a
changed one naming the nearest recorded request. Recorded on the stand-in here, and on a
real server in tests/cassettes/."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from temporalio.client import Client

from api.app import create_app
from longrun.cassettes import Cassette, key_of
from longrun.recording import cassette
from longrun.settings import Settings
from tests.helpers import REPO, Poll, StandIn
from tests.workflows.test_agent import act, audit_of, plan, start
from tests.workflows.test_watchdog import OUTPUT_ACCEPTANCE
from worker import serving

CASSETTES = REPO / "tests" / "cassettes"


async def _run(
    client: Client,
    settings: Settings,
    wait_run: Poll,
    body: dict[str, Any],
    until: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """Submit `body` to a worker and an API of `settings`; the run when it has ended (or
    is as `until` says), then cancelled if it has not."""
    transport = httpx.ASGITransport(app=create_app(settings))
    async with (
        serving(client, settings),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
    ):
        run_id = await start(api, **body)
        run = await wait_run(run_id, until, http=api) if until else await wait_run(run_id, http=api)
        if run["status"] not in ("completed", "failed", "cancelled"):
            await api.post(f"/v1/runs/{run_id}/cancel")
        return run


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
        # With a judge's criterion besides, the run goes on after the write to `finish`.
        "acceptance": [*OUTPUT_ACCEPTANCE, {"id": "said", "check": {"judge": "out.txt says ok"}}],
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


# What each cassette in tests/cassettes/ was recorded from, to submit again.
WRITE_OK = {
    "goal": "Write the word ok into the file out.txt",
    "acceptance": OUTPUT_ACCEPTANCE,
    "tools": ["write_file", "read_file"],
}
RECORDED = {
    # Recorded before runs went direct when no plan comes: the run asks for a plan only.
    # Its requests' criterion line was brought to the words criteria are told in since
    # (`criteria-in-prose`); the answers are as the server gave them.
    "smollm2-write-ok.json": {**WRITE_OK, "max_steps": 6, "strategy": "plan"},
    # evals/12-goal-hello.json's run, on Qwen2.5-Coder-0.5B served by llama-cpp-python; the
    # server's run went direct as `auto` does with a goal of one short sentence.
    "qwen-goal-hello.json": {
        "strategy": "direct",
        "goal": "Write the word hello into the file hello.txt.",
        "tools": ["write_file", "read_file"],
        "budget": {"max_duration_s": 600, "on_budget_exhausted": "fail"},
        "acceptance": [
            {
                "id": "hello-txt",
                "check": {
                    "tool": "read_file",
                    "args": {"path": "hello.txt"},
                    "expect": {"regex": "(?i)hello"},
                },
            }
        ],
    },
}


async def test_a_plan_a_small_model_rambled_on_a_real_server_is_repaired(
    client: Client, settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    """Recorded from SmolLM2-135M-Instruct on llama-cpp-python's server, when such answers
    were refused: each plan was invalid against the plan's full schema (which the server
    was not asked to enforce), asked again with the reason, and after three attempts the
    run failed. Played back now, an answer is repaired into a plan, with the repairs in the
    audit, and the run goes on to act (which the cassette, recorded before, cannot answer)."""
    recorded = Cassette.model_validate_json((CASSETTES / "smollm2-write-ok.json").read_bytes())
    standin.play(json.loads(recorded.model_dump_json()))
    run = await _run(client, settings, wait_run, RECORDED["smollm2-write-ok.json"])
    plans = [c for c in standin.calls(role="plan") if "refused" not in c["outcome"]]
    assert plans and [c["outcome"] for c in plans] == ["ok"] * len(plans)
    assert len(plans) < 3  # a plan came before the attempts ran out
    assert run["plan"], run
    assert not (run["error"] or "").startswith("the planner gave no valid plan"), run
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        audit = await audit_of(api, run["run_id"])
    assert [e for e in audit if e["action"] == "plan repaired"], audit
    assert standin.calls(role="act"), "it went on to act"


async def test_a_call_a_real_model_wrote_as_fenced_json_is_made(
    client: Client, settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    """Recorded from Qwen2.5-Coder-0.5B on llama-cpp-python's server, which returns the
    model's call as text: a JSON object in a Markdown fence, no native tool call. A run that
    read only native calls took the answer for a summary and ran nothing; this one writes
    the file, its criterion passes at once, and the run completes on that one answer."""
    recorded = Cassette.model_validate_json((CASSETTES / "qwen-goal-hello.json").read_bytes())
    assert recorded.entries[0].response["tool_calls"] == []
    assert "```json" in recorded.entries[0].response["content"]
    standin.play(json.loads(recorded.model_dump_json()))
    run = await _run(client, settings, wait_run, RECORDED["qwen-goal-hello.json"])
    assert run["status"] == "completed", run
    assert [c["outcome"] for c in standin.calls(role="act")] == ["ok"]
    workspace = settings.data_dir / "runs" / run["run_id"] / "workspace"
    assert (workspace / "hello.txt").read_text() == "hello"
