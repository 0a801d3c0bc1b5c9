"""Tool calls routed by longrun for a model that calls tools badly with "auto" tool choice:
the stand-in writes calls as text, as small models on llama.cpp do; longrun notices on the
first answer, asks that turn again for one structured action, and routes the model's calls
from then on."""

from __future__ import annotations

import json

import httpx
from temporalio.worker import Worker

from activities import routing
from longrun import prompts
from longrun.contracts import ToolCallRequest
from longrun.dev.standin import PROFILES
from tests.helpers import Poll, StandIn
from tests.test_agent import act, plan, start
from tests.test_watchdog import OUTPUT_ACCEPTANCE

TOOLS = [
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}},
]


async def test_a_model_that_writes_tool_calls_as_text_gets_them_routed(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**{**PROFILES["llama-cpp"].model_dump(), "tool_calls_as_text": True})
    marker = "routed-agent"
    write = ("write_file", {"path": "out.txt", "content": "ok"})
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "write ok into out.txt"))},
            act(marker, write),  # written as text: the model calls tools badly
            act(marker, write),  # the same turn asked again, routed
            act(marker, ("finish", {"summary": "wrote it"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    acts = standin.calls(marker, role="act")
    assert [bool(c["tools"]) for c in acts] == [True, False, False]
    assert all(
        any(prompts.ROUTED_ACTION in str(m["content"]) for m in c["messages"]) for c in acts[1:]
    )
    # The routed turn sees the earlier call and its result as plain turns.
    assert not any(m["role"] == "tool" for m in acts[2]["messages"])
    assert any("Tool result:" in str(m["content"]) for m in acts[2]["messages"])


def test_what_counts_as_calling_tools_badly() -> None:
    call = ToolCallRequest(id="c", name="write_file", arguments="{}")
    assert routing.calls_badly(None, [call], TOOLS) is None
    assert routing.calls_badly("All done: the file is written.", [], TOOLS) is None
    # A tool it was not offered is refused by the run and explained, not routed.
    stray = ToolCallRequest(id="c", name="shell", arguments="{}")
    assert routing.calls_badly(None, [stray], TOOLS) is None
    as_text = json.dumps({"name": "write_file", "arguments": {"path": "a"}})
    assert routing.calls_badly(as_text, [], TOOLS) == "it wrote a tool call as text"
    fenced = f"```json\n{as_text}\n```"
    assert routing.calls_badly(fenced, [], TOOLS) == "it wrote a tool call as text"


def test_a_routed_action_becomes_the_actors_answer() -> None:
    content, calls = routing.routed_answer(
        {"tool": "write_file", "arguments": {"path": "a"}}, turn=3
    )
    assert content is None
    assert calls == [ToolCallRequest(id="routed_3", name="write_file", arguments='{"path": "a"}')]
    assert routing.routed_answer({"tool": "done", "summary": "did it"}, 4) == ("did it", [])
    assert routing.routed_answer({"tool": "done"}, 5) == ('{"tool": "done"}', [])
    schema = routing.action_schema(TOOLS)
    assert schema["properties"]["tool"]["enum"] == ["write_file", "finish", "done"]
    plain = routing.routed_messages(
        [
            {"role": "user", "content": "do it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "x", "function": {"name": "write_file", "arguments": '{"path": "a"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "x", "content": '{"written": 1}'},
        ],
        TOOLS,
    )
    assert plain[1] == {
        "role": "assistant",
        "content": '{"tool": "write_file", "arguments": {"path": "a"}}',
    }
    assert plain[2] == {"role": "user", "content": 'Tool result: {"written": 1}'}
    assert plain[-1]["content"].endswith(prompts.ROUTED_ACTION)
