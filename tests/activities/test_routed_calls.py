"""Tool calls a model writes as text, as small models on llama.cpp do, are read as calls
however they are written; a model that tries and writes no call that can be read gets the
turn asked again for one structured action, and after several such answers in a row its
calls are routed from then on."""

from __future__ import annotations

import json

import httpx
from temporalio.worker import Worker

from activities import routed_calls
from activities.endpoint import ROUTE_AFTER, Endpoint
from longrun import prompts
from longrun.contracts import ToolCallRequest
from longrun.dev.standin import PROFILES
from longrun.settings import Settings
from tests.helpers import Poll, StandIn
from tests.workflows.test_agent import act, plan, start
from tests.workflows.test_watchdog import OUTPUT_ACCEPTANCE

# With a judge's criterion besides, a run goes on after the write until the model finishes
# (with tool checks only, it is done once they pass): the turns after a call can be seen.
JUDGED_ACCEPTANCE = [*OUTPUT_ACCEPTANCE, {"id": "said", "check": {"judge": "out.txt says ok"}}]

TOOLS = [
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object"}}},
]


async def test_a_model_that_writes_tool_calls_as_text_has_them_read(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**{**PROFILES["llama-cpp"].model_dump(), "tool_calls_as_text": True})
    marker = "text-calls-agent"
    write = ("write_file", {"path": "out.txt", "content": "ok"})
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "write ok into out.txt"))},
            act(marker, write),  # written as text: read, and run as it is
            act(marker, ("finish", {"summary": "wrote it"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=JUDGED_ACCEPTANCE,
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    acts = standin.calls(marker, role="act")
    assert [bool(c["tools"]) for c in acts] == [True, True]  # never asked again, routed
    # The call read from text is in the conversation as a native call, with its result.
    said = [m for m in acts[1]["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert said and said[-1]["tool_calls"][0]["function"]["name"] == "write_file", acts[1]
    assert any(m["role"] == "tool" for m in acts[1]["messages"])


async def test_a_call_that_cannot_be_read_gets_the_turn_asked_again_routed(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(**PROFILES["llama-cpp"].model_dump())
    marker = "routed-agent"
    write = ("write_file", {"path": "out.txt", "content": "ok"})
    cut_short = '<tool_call>\n{"name": "write_file", "arguments": {"path": "out.'
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "write ok into out.txt"))},
            act(marker, reply=cut_short),  # a call it tried to write, and could not
            act(marker, write),  # the same turn asked again, routed
            act(marker, ("finish", {"summary": "wrote it"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=JUDGED_ACCEPTANCE,
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    acts = standin.calls(marker, role="act")
    # One bad answer is asked again routed; the model is not routed for it from then on.
    assert [bool(c["tools"]) for c in acts] == [True, False, True]
    assert any(prompts.ROUTED_ACTION in str(m["content"]) for m in acts[1]["messages"])
    # The turn after sees the routed call and its result as a native call and its result.
    assert any(m["role"] == "tool" for m in acts[2]["messages"])


def test_a_model_is_routed_after_several_unreadable_answers_in_a_row() -> None:
    endpoint = Endpoint(Settings())
    why = "it wrote a tool call as text that could not be read"
    for _ in range(ROUTE_AFTER - 1):
        assert endpoint.route("m", why) and not endpoint.routes("m")
    endpoint.read_well("m")  # a call read: the count starts again
    for _ in range(ROUTE_AFTER - 1):
        endpoint.route("m", why)
    assert not endpoint.routes("m")
    endpoint.route("m", why)
    assert endpoint.routes("m") and not endpoint.routes("other")
    native = Endpoint(Settings(LONGRUN_TOOL_CHOICE="native"))
    assert not any(native.route("m", why) for _ in range(ROUTE_AFTER)) and not native.routes("m")


def test_calls_written_as_text_are_read_however_they_are_written() -> None:
    call = {"name": "write_file", "arguments": {"path": "a", "content": "b"}}
    read = [
        ToolCallRequest(id="text_3_0", name="write_file", arguments=json.dumps(call["arguments"]))
    ]
    hermes = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    for written in (
        hermes,
        f"I will write it now.\n{hermes}\nThat is all.",
        f"Here it is: {json.dumps(call)} -- done",
        f"```json\n{json.dumps(call)}\n```",
        json.dumps({"function": {**call, "arguments": json.dumps(call["arguments"])}}),
    ):
        assert routed_calls.text_calls(written, TOOLS, 3) == read, written
    several = routed_calls.text_calls(f"{hermes}{hermes.replace('write_file', 'finish')}", TOOLS, 1)
    assert [c.name for c in several] == ["write_file", "finish"]
    # A step id taken for a tool is read as the call it looks like: the run refuses it and
    # lists the tools it may call.
    stray = routed_calls.text_calls('{"name": "compute_sum", "arguments": {"a": 1}}', TOOLS, 1)
    assert [c.name for c in stray] == ["compute_sum"]
    # A call read whole runs as written; one without what its tool requires is read too:
    # the run refuses it with arguments of its tool's shape (asked again routed, Qwen2.5-
    # Coder copied the tools' schemas instead).
    lacking = routed_calls.text_calls(
        '{"name": "write_file", "arguments": {"path": "a"}}', TOOLS, 1
    )
    assert [(c.name, c.arguments) for c in lacking] == [("write_file", '{"path": "a"}')]
    # Neither prose nor an echoed schema is a call.
    assert routed_calls.text_calls("All done: the file is written.", TOOLS, 1) == []
    assert routed_calls.text_calls('{"path": {"title": "Path"}}', TOOLS, 1) == []


def test_what_counts_as_calling_tools_badly() -> None:
    call = ToolCallRequest(id="c", name="write_file", arguments="{}")
    assert routed_calls.calls_badly(None, [call], TOOLS) is None
    assert routed_calls.calls_badly("All done: the file is written.", [], TOOLS) is None
    # A tool it was not offered is refused by the run and explained, not routed.
    stray = ToolCallRequest(id="c", name="shell", arguments="{}")
    assert routed_calls.calls_badly(None, [stray], TOOLS) is None
    # Asked only of an answer no call could be read from: a call it tried to write.
    cut_short = '<tool_call>{"name": "write_file", "arguments": {"path": '
    assert routed_calls.calls_badly(cut_short, [], TOOLS) == (
        "it wrote a tool call as text that could not be read"
    )
    assert routed_calls.calls_badly('{"tool": "write_file", "arguments": [1', [], TOOLS) is not None


def test_a_routed_action_becomes_the_actors_answer() -> None:
    content, calls = routed_calls.routed_answer(
        {"tool": "write_file", "arguments": {"path": "a"}}, turn=3
    )
    assert content is None
    assert calls == [ToolCallRequest(id="routed_3", name="write_file", arguments='{"path": "a"}')]
    assert routed_calls.routed_answer({"tool": "done", "summary": "did it"}, 4) == ("did it", [])
    assert routed_calls.routed_answer({"tool": "done"}, 5) == ('{"tool": "done"}', [])
    schema = routed_calls.action_schema(TOOLS)
    assert schema["properties"]["tool"]["enum"] == ["write_file", "finish", "done"]
    plain = routed_calls.routed_messages(
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


def test_a_tool_named_in_another_spelling_is_the_tool_offered() -> None:
    def call(name: str) -> ToolCallRequest:
        return ToolCallRequest(id="c", name=name, arguments="{}")

    spelled = ["WriteFileArgs", "WriteFile", "write-file", "write_file", "FinishTool"]
    assert [c.name for c in routed_calls.named([call(n) for n in spelled], TOOLS)] == [
        "write_file",
        "write_file",
        "write_file",
        "write_file",
        "finish",
    ]
    # Anything else stays as written, for the run to refuse and list the tools.
    others = ["read_file", "writer", "compute_sum", ""]
    assert [c.name for c in routed_calls.named([call(n) for n in others], TOOLS)] == others


async def test_a_call_of_a_tool_by_its_arguments_title_runs_the_tool(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # Seen on Qwen2.5-Coder-0.5B: offered write_file, whose arguments' schema was titled
    # WriteFileArgs, it called `WriteFileArgs`. Titles are no longer offered
    # (tests/activities/test_structured.py), and such a call is read as the tool's.
    marker = "titled-call"
    standin.scenario(
        [
            act(marker, ("WriteFileArgs", {"path": "out.txt", "content": "ok"})),
            act(marker, reply="wrote it"),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["write_file"],
        strategy="direct",
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert [s["output"]["path"] for s in run["steps"]] == ["out.txt"]
