"""Continue-as-new: a plan run hands its state to a fresh history segment and goes on; the
run id, status, approvals, budget and audit work across the boundary."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from api.app import create_app
from longrun.settings import Settings
from longrun.temporal import DATA_CONVERTER
from tests.helpers import LISTING_WORDS, Poll, allow, listing_server, submit
from workflows import RunWorkflow

pytestmark = pytest.mark.long


@pytest.fixture
async def short(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API with history segments of three steps."""
    app = create_app(settings.model_copy(update={"continue_as_new_every": 3}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        yield c


async def segments(client: Client, run_id: str) -> int:
    count = await client.count_workflows(f"WorkflowId = '{run_id}'")
    return count.count


async def test_a_long_plan_continues_as_new_and_completes(
    short: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps = [{"id": f"s{i}", "tool": "echo", "args": {"value": i}} for i in range(10)]
    steps.append({"id": "sum", "tool": "echo", "args": {"value": "{{steps.s0.output.value}}"}})
    run_id = await submit(short, steps, budget={"max_tool_calls": 100})
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run
    assert [s["status"] for s in run["steps"]] == ["completed"] * 11
    assert run["result"] == {"sum": {"value": 0}}  # a reference across segments
    assert run["usage"]["tool_calls"] == 11  # the ledger travelled along
    assert await segments(client, run_id) >= 4
    trail = (await short.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert trail[0]["action"] == "submitted"
    assert [e["action"] for e in trail].count("continued as new") >= 3


async def test_an_approval_pending_at_the_hand_over_is_answerable_after_it(
    short: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps = [
        {"id": "gate", "approval": {"message": "still there after the hand-over?"}},
        {"id": "after", "tool": "echo", "depends_on": ["gate"]},
    ]
    steps += [
        {"id": f"e{i}", "tool": "echo", "depends_on": [] if i == 0 else [f"e{i - 1}"]}
        for i in range(5)
    ]
    run_id = await submit(short, steps)
    run = await wait_run(
        run_id,
        lambda r: r["steps"][-1]["status"] == "completed" and r["status"] == "waiting_approval",
        http=short,
    )
    assert await segments(client, run_id) >= 2  # the approval was pending across a hand-over
    [pending] = run["pending_approvals"]
    assert pending["approval_id"] == "apr-gate"
    response = await short.post(
        f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve", "comment": "yes"}
    )
    assert response.status_code == 202
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run
    assert [a["approval_id"] for a in run["approvals"]] == ["apr-gate"]
    assert run["approvals"][0]["decided_by"] == "local"


async def test_a_thousand_steps_of_50_kb_outputs_keep_every_segment_small(
    settings: Settings, client: Client, worker: Worker, wait_run: Poll
) -> None:
    app = create_app(settings.model_copy(update={"continue_as_new_every": 250}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        fifty_kb = "print('x' * 50_000, end='', file=open('page.txt', 'w'))"
        steps = [
            {"id": "make", "tool": "python", "args": {"code": fifty_kb}, "requires_approval": False}
        ]
        steps += [
            {"id": f"r{i}", "tool": "read_file", "args": {"path": "page.txt"}} for i in range(999)
        ]
        run_id = await submit(api, steps)
        run = await wait_run(run_id, timeout_s=600, http=api)
    assert run["status"] == "completed", run["error"]
    assert run["steps"][-1]["output"]["content"]["bytes"] == 50_000
    segments = [wf async for wf in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(segments) >= 4
    for segment in segments:
        desc = await client.get_workflow_handle(run_id, run_id=segment.run_id).describe()
        info = desc.raw_description.workflow_execution_info
        assert info.history_length < 10_240
        assert info.history_size_bytes < 10 * 1024 * 1024


async def test_signals_sent_while_the_run_hands_over_are_all_applied(
    short: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # Segments of three steps, each an activity task: budget changes keep arriving through
    # about twenty hand-overs. One that lands while a hand-over is being completed makes the
    # server refuse it; the task runs again with the signal, so every change must be applied.
    steps = [
        {"id": f"s{i}", "tool": "write_file", "args": {"path": f"s{i}", "content": "s"}}
        for i in range(60)
    ]
    run_id = await submit(short, steps)
    sent = []
    for n in range(30):
        response = await short.post(f"/v1/runs/{run_id}/budget", json={"max_tool_calls": 100 + n})
        assert response.status_code == 202, response.text
        sent.append(100 + n)
        await asyncio.sleep(0.02)
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run["error"]
    assert await segments(client, run_id) >= 10
    trail = (await short.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    applied = [json.loads(e["detail"])["max_tool_calls"] for e in trail if e["action"] == "budget"]
    assert applied == sent
    assert run["budget"]["limits"]["max_tool_calls"]["limit"] == sent[-1]


async def test_cancel_after_hand_overs_undoes_steps_of_earlier_segments(
    short: httpx.AsyncClient, client: Client, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    steps: list[dict[str, Any]] = [
        {"id": "early", "tool": "write_file", "args": {"path": "a.txt", "content": "a"}},
        {"id": "look", "tool": "read_file", "args": {"path": "a.txt"}},
    ]
    steps += [{"id": f"e{i}", "tool": "echo"} for i in range(6)]
    steps.append({"id": "gate", "approval": {"message": "never answered"}})
    run_id = await submit(short, steps)
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=short)
    assert await segments(client, run_id) >= 3  # the write happened two segments ago
    workspace: Path = settings.workspaces_dir / run_id / "workspace"
    assert (workspace / "a.txt").read_text() == "a"
    response = await short.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True})
    assert response.status_code == 202
    run = await wait_run(run_id, http=short)
    assert run["status"] == "cancelled"
    # The undo log crossed the boundaries; read-only calls were never on it.
    assert run["result"] == {"compensated": ["early"], "not_undone": []}
    assert not (workspace / "a.txt").exists()


async def test_a_hand_over_carries_whole_only_the_outputs_still_needed(
    short: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    kept, dropped = "k" * 5000, "d" * 5000
    steps = [
        {"id": "kept", "tool": "echo", "args": {"value": kept}},
        {"id": "dropped", "tool": "echo", "args": {"value": dropped}},
        {"id": "e1", "tool": "echo"},
        {"id": "use", "tool": "echo", "args": {"value": "{{steps.kept.output.value}}"}},
    ]
    run_id = await submit(short, steps)
    run = await wait_run(run_id, http=short)
    assert run["status"] == "completed", run["error"]
    assert await segments(client, run_id) == 2
    use = (await short.get(f"/v1/runs/{run_id}/steps/use")).json()
    assert use["output"] == {"value": kept}  # the reference read the whole output
    assert (await short.get(f"/v1/runs/{run_id}/steps/kept")).json()["output"] == {"value": kept}
    # Nothing after the hand-over needed it: the first segment's history has it whole.
    carried = (await short.get(f"/v1/runs/{run_id}/steps/dropped")).json()["output"]
    assert carried["truncated"] is True


async def carried_bytes(client: Client, run_id: str) -> list[int]:
    """The size of what each hand-over carried; every segment replays (the bounded-carry
    patch: these histories are too big to keep among the saved ones)."""
    sizes = []
    replayer = Replayer(workflows=[RunWorkflow], data_converter=DATA_CONVERTER)
    async for wf in client.list_workflows(f"WorkflowId = '{run_id}'"):
        history = await client.get_workflow_handle(run_id, run_id=wf.run_id).fetch_history()
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
        started = history.events[0].workflow_execution_started_event_attributes
        if started.continued_execution_run_id:
            [payload] = started.input.payloads
            sizes.append(len(json.dumps(json.loads(payload.data)["carry"])))
    return sizes


async def test_a_hand_over_too_big_to_travel_stores_its_biggest_outputs(
    short: httpx.AsyncClient, client: Client, settings: Settings, worker: Worker, wait_run: Poll
) -> None:
    # Twelve end steps of ~60 KB of short strings each: together their outputs, which the
    # result needs, are ~720 KB, above what a hand-over may carry.
    words = LISTING_WORDS
    with listing_server() as url:
        allow(settings, url)
        steps: list[dict[str, Any]] = [
            {"id": f"get{n}", "tool": "http_request", "args": {"url": f"{url}/listing/{n}"}}
            for n in range(12)
        ]
        # They end while a gate waits: the hand-over comes then, carrying them all.
        steps.append({"id": "gate", "approval": {"message": "go on?"}})
        steps = [{**s, "depends_on": []} for s in steps]
        steps += [{"id": "e0", "tool": "echo", "depends_on": ["gate"]}]
        # A part of a stored output, read through its reference.
        steps.append(
            {
                "id": "pick",
                "tool": "echo",
                "args": {"value": "{{steps.get0.output.json.words.7}}"},
                "depends_on": ["e0", "get0"],
            }
        )
        run_id = await submit(short, steps)
        await wait_run(
            run_id,
            lambda r: (
                r["pending_approvals"]
                and all(s["status"] == "completed" for s in r["steps"] if s["id"].startswith("get"))
            ),
            http=short,
        )
        decided = await short.post(
            f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"}
        )
        assert decided.status_code == 202, decided.text
        run = await wait_run(run_id, timeout_s=120, http=short)
    assert run["status"] == "completed", run["error"]
    assert await segments(client, run_id) >= 2
    pick = (await short.get(f"/v1/runs/{run_id}/steps/pick")).json()
    assert pick["output"] == {"value": "item-00007-of-the-listing"}
    sizes = await carried_bytes(client, run_id)
    assert sizes and max(sizes) <= 600 * 1024, sizes
    # Every end step's output is whole in the result or reads back whole from the store.
    outputs = (await client.get_workflow_handle(run_id).result())["outputs"]
    for n in range(1, 12):
        output = outputs[f"get{n}"]
        if "artifact" in output:
            stored = await short.get(f"/v1/runs/{run_id}/artifacts/{output['artifact']}")
            output = json.loads(stored.text)
        assert output["json"] == {"n": n, "words": words}


async def test_an_audit_too_big_to_travel_is_stored_and_read_back_whole(
    short: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # 150 approvals, one after another, each with a long comment: their records and audit
    # entries outgrow what a hand-over may carry.
    gates = 150
    steps: list[dict[str, Any]] = [
        {
            "id": f"g{i}",
            "tool": "echo",
            "args": {"value": "v" * 600},
            "requires_approval": True,
            "depends_on": [f"g{i - 1}"] if i else [],
        }
        for i in range(gates)
    ]
    steps.append({"id": "end", "tool": "echo", "depends_on": [f"g{gates - 1}"]})
    run_id = await submit(short, steps)
    for i in range(gates):
        await wait_run(
            run_id,
            lambda r, i=i: any(a["approval_id"] == f"apr-g{i}" for a in r["pending_approvals"]),
            http=short,
        )
        response = await short.post(
            f"/v1/runs/{run_id}/approvals/apr-g{i}",
            json={"decision": "approve", "comment": f"yes {i} " + "c" * 3900},
        )
        assert response.status_code == 202, response.text
    run = await wait_run(run_id, timeout_s=180, http=short)
    assert run["status"] == "completed", run["error"]
    sizes = await carried_bytes(client, run_id)
    assert sizes and max(sizes) <= 600 * 1024, sizes
    audit = (await short.get(f"/v1/runs/{run_id}/audit")).json()
    assert audit["archived"]
    approved = [e["detail"] for e in audit["entries"] if e["action"] == "approve"]
    assert [d.split(" ")[0] for d in approved] == [f"apr-g{i}" for i in range(gates)]
    times = [e["at"] for e in audit["entries"]]
    assert times == sorted(times)
    # A decision stored away is still a decision: deciding it again is refused.
    again = await short.post(f"/v1/runs/{run_id}/approvals/apr-g0", json={"decision": "reject"})
    assert again.status_code == 409, again.text
