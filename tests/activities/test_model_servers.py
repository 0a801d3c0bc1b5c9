"""Model servers that are not OpenAI's: the stand-in, given a real server's profile (what
llama-cpp-python's server was seen to do), and runs that must still work on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.endpoint import model_problem
from api.app import create_app
from longrun.dev.standin import PROFILES
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, submit
from tests.workflows.test_agent import act, plan, start
from tests.workflows.test_replay import replays_and_is_kept
from worker import serving

LLAMA_CPP = PROFILES["llama-cpp"].model_dump()
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 50}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}


@pytest.fixture
async def served(
    client: Client, settings: Settings, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    """A worker and the API with the test's own settings (`@pytest.mark.settings(...)`)."""
    marker = request.node.get_closest_marker("settings")
    changed = settings.model_copy(update=marker.kwargs if marker else {})
    transport = httpx.ASGITransport(app=create_app(changed))
    async with (
        serving(client, changed),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as http,
    ):
        yield http, changed


async def test_a_plan_runs_on_a_server_without_json_schema_or_null_content(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**LLAMA_CPP)
    run_id = await submit(
        api,
        [
            {"id": "plain", "model": {"prompt": "profile-plan: say hello"}},
            {"id": "city", "model": {"prompt": "profile-plan: a city", "json_schema": CITY}},
            {"id": "fetch", "tool": "echo", "args": {"value": {"n": 7}}},
            {
                "id": "about",
                "model": {"prompt": "profile-plan: n is {{steps.fetch.output.value.n}}"},
                "depends_on": ["fetch"],
            },
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    city = next(s for s in run["steps"] if s["id"] == "city")["output"]
    assert set(city["json"]) == {"city", "temperature"}
    calls = standin.calls("profile-plan")
    # json_schema was refused (streamed, silently, as llama.cpp does; then whole, with the
    # reason), and from then on JSON was asked for as the server takes it.
    asked = [(c["response_format"], c["stream"]) for c in calls if "a city" in str(c["messages"])]
    assert asked == [("json_schema", True), ("json_schema", False), ("json_object", True)]
    assert all(c["max_tokens"] for c in calls)
    assert all(c["stream"] for c in calls if c["outcome"] == "ok")


async def test_an_agent_run_completes_on_a_llama_cpp_like_server(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**LLAMA_CPP)
    standin.scenario(
        [
            {
                "match": "profile-agent",
                "role": "plan",
                "json": {"steps": [{"id": "w", "intent": "write", "expected_evidence": "a.txt"}]},
            },
            {
                "match": "profile-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "x"}}],
            },
            {"match": "profile-agent", "role": "act", "times": 1, "reply": "wrote a"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={
            "goal": "profile-agent: write a file",
            "tools": ["write_file"],
            "acceptance": [{"id": "done", "check": {"judge": "a was written"}}],
        },
    )
    run = await wait_run(response.json()["run_id"])
    assert run["status"] == "completed", run["error"]
    acts = standin.calls("profile-agent", role="act")
    # The second turn resent the tool-only turn with content "" (the profile refuses null),
    # and the tools' schemas reached the server without length limits.
    assert acts[1]["messages"][-2]["content"] == ""
    assert all(c["outcome"] == "ok" for c in acts)
    modes = {c["response_format"] for c in standin.calls("profile-agent", role="judge")}
    assert modes == {"json_object"}  # learned from the planner's refusal, not asked again


async def test_a_server_that_streams_only_with_tools_is_asked_whole_without_them(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    """llama-cpp-python's function-calling format streams no answer to a request without
    tools: the planner's call is asked again whole, and from then on asked whole; calls
    with tools still stream."""
    standin.profile(**PROFILES["llama-cpp-tools"].model_dump())
    standin.scenario(
        [
            {"match": "tools-only", "role": "plan", "json": plan(("w", "write a"))},
            act("tools-only", ("write_file", {"path": "a", "content": "x"})),
            act("tools-only", reply="wrote a"),
        ]
    )
    run_id = await start(api, goal="tools-only: write a file", tools=["write_file"])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    calls = standin.calls("tools-only")
    asked = [(c["role"], c["stream"], c["outcome"]) for c in calls]
    # json_schema refused first (as on llama-cpp); then json_object, streamed: nothing.
    assert asked[2:4] == [("plan", True, "empty stream"), ("plan", False, "ok")], asked
    assert all(c["stream"] == bool(c["tools"]) for c in calls[4:]), asked
    assert all(outcome == "ok" for _, _, outcome in asked[3:]), asked


async def test_an_answer_that_breaks_the_schema_is_asked_again_with_the_reason(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="schema-check", times=1, json={"name": "Paris", "temperature1": "20.45"})
    standin.rule(match="schema-check", json={"city": "Paris", "temperature": 20.5})
    run_id = await submit(
        api, [{"id": "city", "model": {"prompt": "schema-check: a city", "json_schema": CITY}}]
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["steps"][0]["output"]["json"] == {"city": "Paris", "temperature": 20.5}
    first, second = standin.calls("schema-check")
    told = second["messages"][-1]["content"]
    assert "'city' is a required property" in told
    assert first["messages"][-1]["content"] != told


async def test_an_invalid_json_schema_is_refused_at_submission(
    api: httpx.AsyncClient, worker: Worker
) -> None:
    response = await api.post(
        "/v1/runs",
        json={
            "goal": "bad schema",
            "plan": {"steps": [{"id": "m", "model": {"prompt": "p", "json_schema": {"type": 5}}}]},
        },
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"][-1] == "json_schema" and "not a valid JSON schema" in error["msg"]


async def test_the_prompt_fits_a_context_window_the_server_only_names_in_its_error(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**LLAMA_CPP | {"context_window": 3000})
    standin.scenario(
        [
            {
                "match": "small-window",
                "role": "plan",
                "json": {"steps": [{"id": "s", "intent": "say", "expected_evidence": "said"}]},
            },
            {"match": "small-window", "role": "act", "reply": "said it"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={
            "goal": "small-window: " + "say something. " * 250,
            "tools": [],
            "acceptance": [{"id": "ok", "check": {"judge": "it was said"}}],
        },
    )
    run = await wait_run(response.json()["run_id"])
    assert run["status"] == "completed", run["error"]
    # The planner was asked as if the window were big and refused (silently when streamed,
    # as llama.cpp does; with the size when asked whole); then with the room the server
    # named, as was every later call.
    calls = standin.calls("small-window")
    assert any(c["outcome"] == "400 refused" and not c["stream"] for c in calls)
    for call in calls:
        if call["outcome"] == "ok":
            assert call["prompt_tokens"] + call["max_tokens"] <= 3000
    assert all(c["outcome"] == "ok" for c in standin.calls("small-window", role="act"))


async def test_a_model_that_answers_with_less_says_so_and_is_asked_within_it(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(max_answer=1000)
    run = await wait_run(await submit(api, [{"id": "m", "model": {"prompt": "max-answer: hi"}}]))
    assert run["status"] == "completed", run["error"]
    first, second = standin.calls("max-answer")
    assert first["outcome"] == "400 refused" and second["max_tokens"] == 1000
    assert run["steps"][0]["attempts"] == 1  # within the attempt, not a retry


async def test_an_answer_cut_at_max_tokens_is_still_an_answer(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="cut-short", reply="word " * 100)
    step = {"id": "m", "model": {"prompt": "cut-short: talk", "max_tokens": 20}}
    run = await wait_run(await submit(api, [step]))
    assert run["status"] == "completed", run["error"]
    assert run["steps"][0]["output"]["text"] == ("word " * 100)[:80]
    [call] = standin.calls("cut-short")
    assert call["max_tokens"] == 20


async def test_model_calls_ride_out_an_outage_longer_than_five_attempts(
    api: httpx.AsyncClient,
    worker: Worker,
    standin: StandIn,
    wait_run: Poll,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Eight failures in a row (a restarting server that says when to come back): more
    # than a count of attempts would allow; the retry window is 30 minutes.
    standin.rule(match="outage", status=503, retry_after=0.2, times=8, message="restarting")
    run = await wait_run(await submit(api, [{"id": "m", "model": {"prompt": "outage: hi"}}]))
    assert run["status"] == "completed", run["error"]
    assert run["steps"][0]["attempts"] == 9
    assert [c["outcome"] for c in standin.calls("outage")] == ["503"] * 8 + ["ok"]
    # One line a failed attempt, no tracebacks.
    lines = [r for r in caplog.records if "answered 503: " in r.getMessage()]
    assert len(lines) == 8
    assert all(r.name == "longrun.activity" and r.exc_info is None for r in lines)
    sdk = [r for r in caplog.records if r.name == "temporalio.activity" and r.levelno >= 30]
    assert sdk == []


async def test_time_a_call_waited_on_recovery_is_not_counted_against_the_time_budget(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # Three failed attempts a second apart: the run is over 3 s old when the first step
    # answers, and has worked for a fraction of that. Its budget is 2 s.
    standin.rule(match="back-soon", status=503, retry_after=1, times=3, message="restarting")
    steps = [
        {"id": "a", "model": {"prompt": "back-soon: hi"}},
        {"id": "b", "model": {"prompt": "and then"}, "depends_on": ["a"]},
    ]
    budget = {"max_duration_s": 2, "on_budget_exhausted": "pause"}
    run_id = await submit(api, steps, budget=budget)
    run = await wait_run(run_id)
    assert run["status"] == "completed", (run["error"], run["pause_reason"])
    usage = run["usage"]
    assert usage["recovering_s"] >= 3, usage
    assert usage["duration_s"] > 3, usage
    used = run["budget"]["limits"]["max_duration_s"]["used"]
    assert used == pytest.approx(usage["duration_s"] - usage["recovering_s"], abs=0.01)
    await replays_and_is_kept(client, run_id, "recovery_not_counted")


async def test_status_shows_the_attempt_and_last_error_of_a_retrying_step(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="flaky-while-watched", status=503, retry_after=1, times=3, message="busy")
    run_id = await submit(api, [{"id": "m", "model": {"prompt": "flaky-while-watched: hi"}}])
    run = await wait_run(run_id, lambda r: any(c["attempt"] >= 2 for c in r["retrying"]))
    [call] = run["retrying"]
    assert call["call"] == "step m: model test-model"
    assert call["last_error"].endswith("answered 503: busy")
    [step] = run["steps"]
    assert step["status"] == "running"
    assert (step["attempts"], step["error"]) == (call["attempt"], call["last_error"])
    # What history keeps of the failure is its message and type, no stack trace.
    desc = await client.get_workflow_handle(run_id).describe()
    [pending] = desc.raw_description.pending_activities
    failure = pending.last_failure
    assert failure.application_failure_info.type == "Transient"
    assert failure.stack_trace == "" and not failure.HasField("cause")
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["retrying"] == [] and run["steps"][0]["attempts"] == 4
    assert run["steps"][0]["error"] is None


@pytest.mark.settings(model_retry_window_s=2.0)
async def test_a_model_down_for_the_whole_window_pauses_the_run_until_resumed(
    served: tuple[httpx.AsyncClient, Settings], standin: StandIn, wait_run: Poll
) -> None:
    api, _ = served
    standin.rule(match="down-for-long", status=503, message="maintenance")
    step = {"id": "m", "model": {"prompt": "down-for-long: hi"}}
    run_id = await submit(api, [step])
    run = await wait_run(run_id, lambda r: r["status"] == "paused", http=api)
    assert run["pause_reason"] == "model_unavailable"
    assert "answered 503: maintenance" in run["pause_detail"]
    assert run["steps"][0]["status"] == "running"
    tried = len(standin.calls("down-for-long"))
    assert tried >= 2
    # Held, not retrying: the server is asked no more until a person resumes.
    await asyncio.sleep(1.5)
    assert len(standin.calls("down-for-long")) == tried
    standin.reset()
    response = await api.post(f"/v1/runs/{run_id}/resume", json={"reason": "server is back"})
    assert response.status_code == 202, response.text
    run = await wait_run(run_id, http=api)
    assert run["status"] == "completed", run["error"]
    assert run["pause_reason"] is None and run["pause_detail"] is None
    audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    actions = [(e["action"], e["detail"]) for e in audit]
    paused = [d for a, d in actions if a == "paused"]
    assert len(paused) == 1 and paused[0].startswith("model unavailable: step m: model")
    assert ("resume", "server is back") in actions


async def test_a_stream_that_dies_is_retried(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="dies-mid-stream", times=1, reply="x" * 200, die_after_chunks=3)
    run_id = await submit(api, [{"id": "m", "model": {"prompt": "dies-mid-stream: go"}}])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["steps"][0]["attempts"] == 2


@pytest.mark.settings(model_timeout_s=1.0)
async def test_a_silent_server_is_called_busy_not_unreachable(
    served: tuple[httpx.AsyncClient, Settings], standin: StandIn, wait_run: Poll
) -> None:
    api, _ = served
    standin.rule(match="busy-server", reply="slow " * 20, chunk_delay_s=3)
    step = {"id": "m", "model": {"prompt": "busy-server: go"}, "retry": {"max_attempts": 1}}
    run = await wait_run(await submit(api, [step]), http=api)
    assert run["status"] == "failed"
    assert "is busy: nothing came for 1 s" in run["error"]
    assert standin.base_url.removesuffix("/") in run["error"]


async def test_a_wrong_base_url_names_the_url_and_what_to_check(
    client: Client, settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    wrong = settings.model_copy(update={"openai_base_url": standin.url + "/v2"})
    transport = httpx.ASGITransport(app=create_app(wrong))
    async with (
        serving(client, wrong),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
    ):
        run = await wait_run(
            await submit(api, [{"id": "m", "model": {"prompt": "hello"}}]), http=api
        )
    assert run["status"] == "failed"
    assert f"{standin.url}/v2" in run["error"] and "Check OPENAI_BASE_URL" in run["error"]
    assert "'test-model'" in run["error"]
    assert run["steps"][0]["attempts"] == 1  # not retried: a retry cannot fix it


async def test_cancelling_a_run_stops_the_server_generating(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="long-answer", reply="word " * 400, chunk_delay_s=0.5)
    run_id = await submit(api, [{"id": "m", "model": {"prompt": "long-answer: go"}}])
    await wait_run(run_id, until=lambda r: r["steps"][0]["status"] == "running")
    for _ in range(100):
        if standin.generating():
            break
        await asyncio.sleep(0.1)
    assert standin.generating() == 1
    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
    await wait_run(run_id)
    # The stream would take 100 s more; closing it stopped the generation.
    for _ in range(100):
        if not standin.generating():
            break
        await asyncio.sleep(0.1)
    assert standin.generating() == 0


async def test_a_model_the_server_does_not_list_is_named_at_start(
    settings: Settings, standin: StandIn
) -> None:
    problem = await model_problem(settings)
    assert problem is not None
    assert "does not list LONGRUN_MODEL 'test-model'" in problem and "standin-1" in problem
    assert await model_problem(settings.model_copy(update={"model": "standin-1"})) is None
    gone = settings.model_copy(update={"openai_base_url": "http://127.0.0.1:9/v1"})
    unreachable = await model_problem(gone)
    assert unreachable is not None and "127.0.0.1:9" in unreachable


def test_a_scripted_answer_follows_where_the_conversation_stands(standin: StandIn) -> None:
    # Rules keyed on how many tool results the messages hold answer a call asked again
    # (its first answer lost with a killed worker) as they answered it the first time.
    standin.scenario(
        [
            {"match": "conv", "tool_results": 0, "tool_calls": [{"name": "note"}]},
            {"match": "conv", "tool_results": 1, "reply": "done"},
        ]
    )
    tools = [{"type": "function", "function": {"name": "note", "parameters": {}}}]
    asked = [{"role": "user", "content": "conv"}]
    called = {"role": "assistant", "content": None, "tool_calls": [_call("c1")]}
    answered = [*asked, called, {"role": "tool", "tool_call_id": "c1", "content": "{}"}]

    def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"model": "m", "messages": messages, "tools": tools}
        response = httpx.post(f"{standin.url}/v1/chat/completions", json=body)
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        return message

    for _ in range(2):
        assert answer(asked)["tool_calls"][0]["function"]["name"] == "note"
        assert answer(answered)["content"] == "done"


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "note", "arguments": "{}"}}


async def test_a_judge_reads_what_its_context_window_holds_of_a_full_workspace(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**LLAMA_CPP | {"context_window": 3000})
    marker = "small-judge"
    writes = [("write_file", {"path": f"f{i}.txt", "content": f"{i} " * 2000}) for i in range(5)]
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "Write the five files"))},
            act(marker, *writes),
            act(marker, reply="wrote them"),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write the five files",
        acceptance=[{"id": "ok", "check": {"judge": "the files were written"}}],
        tools=["write_file"],
        strategy="plan",
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    # The workspace alone is ~20 KB. The judge's first prompt was the first too big for the
    # window, which the server named in refusing it; then it was shown what fits.
    judged = standin.calls(marker, role="judge")
    outcomes = [c["outcome"] for c in judged]
    assert outcomes == ["400 refused", "400 refused", "ok", "ok"], outcomes
    assert all(c["prompt_tokens"] + c["max_tokens"] <= 3000 for c in judged[2:])
    assert judged[2]["prompt_tokens"] < judged[0]["prompt_tokens"] / 2
