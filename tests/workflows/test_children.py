"""Child runs and for_each: budgets carved out of the parent's ledger, a child's approvals
decided through its parent, cancel-with-compensate undoing a child's write, and what a
request gets wrong refused before anything starts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, submit
from tests.workflows.test_replay import replays_and_is_kept
from worker import serving


def _workspace(settings: Settings, run_id: str) -> Path:
    return settings.workspaces_dir / run_id / "workspace"


def _child(run: dict[str, Any], item: int | None = None) -> dict[str, Any]:
    return next(c for c in run["children"] if c["item"] == item)


def _writes(name: str) -> dict[str, Any]:
    """A child plan of two tool calls: write a file, read it back."""
    return {
        "steps": [
            {"id": "write", "tool": "write_file", "args": {"path": name, "content": "{{item}}"}},
            {"id": "read", "tool": "read_file", "args": {"path": name}},
        ]
    }


async def test_a_for_each_of_five_child_runs_pauses_the_one_that_would_overspend(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """Five children of two tool calls each under a parent budget of seven: three finish,
    the fourth gets the one call left and pauses before its second; nothing overspends.
    Raising the parent's budget finishes the fourth and the fifth."""
    fan = {
        "id": "fan",
        "for_each": {
            "items": ["a", "b", "c", "d", "e"],
            "max_parallel": 1,
            "run": {"goal": "write {{item}}", "plan": _writes("{{item}}.txt")},
        },
    }
    run_id = await submit(api, [fan], budget={"max_tool_calls": 7})

    def fourth_held(run: dict[str, Any]) -> bool:
        return any(c["item"] == 3 and c["status"] == "paused" for c in run.get("children", []))

    run = await wait_run(run_id, fourth_held)
    assert run["status"] == "paused" and run["pause_reason"] == "budget"
    assert [c["status"] for c in run["children"]] == ["completed"] * 3 + ["paused"]
    fourth = _child(run, 3)
    assert fourth["budget"]["max_tool_calls"] == 1 and fourth["pause_reason"] == "budget"
    used = run["budget"]["limits"]["max_tool_calls"]
    assert used == {"limit": 7, "used": 7}
    child = (await api.get(f"/v1/runs/{fourth['run_id']}")).json()
    assert child["parent_run_id"] == run_id and child["status"] == "paused"
    assert child["usage"]["tool_calls"] == 1  # the write, not the read
    # The child's budget is its parent's to change.
    refused = await api.post(f"/v1/runs/{fourth['run_id']}/budget", json={"max_tool_calls": 9})
    assert refused.status_code == 409 and run_id in refused.json()["detail"]

    raised = await api.post(f"/v1/runs/{run_id}/budget", json={"max_tool_calls": 10})
    assert raised.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert [c["status"] for c in run["children"]] == ["completed"] * 5
    assert sum(c["usage"]["tool_calls"] for c in run["children"]) == 10
    assert run["budget"]["limits"]["max_tool_calls"]["used"] == 10
    items = run["result"]["fan"]["items"]
    assert [i["run_id"].rsplit(":", 1)[1] for i in items] == ["0", "1", "2", "3", "4"]
    assert [i["outputs"]["read"]["content"] for i in items] == ["a", "b", "c", "d", "e"]
    for child_id, letter in zip([i["run_id"] for i in items], "abcde", strict=True):
        assert (_workspace(settings, child_id) / f"{letter}.txt").read_text() == letter
    # Both sides replay, and are kept beside the other histories (tests/workflows/test_replay.py).
    await replays_and_is_kept(client, run_id, "for_each_children_budget")
    await replays_and_is_kept(client, items[3]["run_id"], "child_paused_for_budget")


async def test_a_child_runs_approval_is_decided_through_its_parent(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """The child's gated step shows in the parent's status and in the inbox; a decision
    sent to the parent reaches the child."""
    child_plan = {
        "steps": [
            {
                "id": "w",
                "tool": "write_file",
                "args": {"path": "x.txt", "content": "x"},
                "requires_approval": True,
            }
        ]
    }
    # A label of its own, which its child carries too: the inbox lists only these two.
    labels = {"test": "child-approval"}
    steps = [{"id": "sub", "run": {"goal": "write x", "plan": child_plan}}]
    run_id = await submit(api, steps, labels=labels)
    run = await wait_run(run_id, lambda r: bool(r["pending_approvals"]))
    child_id = f"{run_id}:sub"
    assert run["status"] == "waiting_approval"
    [pending] = run["pending_approvals"]
    assert pending["approval_id"] == "apr-w" and pending["run_id"] == child_id
    inbox = (await api.get("/v1/approvals", params={"label": "test:child-approval"})).json()
    listed = [(a["run_id"], a["parent_run_id"], a["approval_id"]) for a in inbox["approvals"]]
    assert listed == [(child_id, run_id, "apr-w")]

    decided = await api.post(f"/v1/runs/{run_id}/approvals/apr-w", json={"decision": "approve"})
    assert decided.status_code == 202, decided.text
    assert decided.json()["run_id"] == child_id
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["result"]["sub"]["run_id"] == child_id
    assert (_workspace(settings, child_id) / "x.txt").read_text() == "x"
    again = await api.post(f"/v1/runs/{run_id}/approvals/apr-w", json={"decision": "reject"})
    assert again.status_code in (404, 409)


async def test_cancelling_a_parent_with_compensate_undoes_its_childs_write(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """The parent writes, its child writes and then waits for a person; cancelling the
    parent with compensate cancels the child and undoes both writes, newest first."""
    child_plan = {
        "steps": [
            {"id": "w", "tool": "write_file", "args": {"path": "child.txt", "content": "c"}},
            {"id": "gate", "approval": {"message": "go on?"}},
        ]
    }
    run_id = await submit(
        api,
        [
            {"id": "mine", "tool": "write_file", "args": {"path": "parent.txt", "content": "p"}},
            {"id": "sub", "run": {"goal": "write and wait", "plan": child_plan}},
        ],
    )
    child_id = f"{run_id}:sub"
    await wait_run(run_id, lambda r: bool(r["pending_approvals"]))
    assert (_workspace(settings, child_id) / "child.txt").exists()
    assert (_workspace(settings, run_id) / "parent.txt").exists()

    cancelled = await api.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True})
    assert cancelled.status_code == 202, cancelled.text
    run = await wait_run(run_id)
    assert run["status"] == "cancelled"
    assert run["result"]["compensated"] == ["w", "mine"]
    child = await wait_run(child_id)
    assert child["status"] == "cancelled"
    assert not (_workspace(settings, child_id) / "child.txt").exists()
    assert not (_workspace(settings, run_id) / "parent.txt").exists()
    audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert any(e["action"] == "compensated" and child_id in (e["detail"] or "") for e in audit), (
        audit
    )
    await replays_and_is_kept(client, run_id, "parent_cancelled_compensating_child")


async def test_a_for_each_over_a_tool_gathers_outputs_in_order_and_skips_failures(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    """Items from an earlier step's output, two at a time; a failed item is skipped with
    its error when `on_failure` says so."""
    run_id = await submit(
        api,
        [
            {"id": "list", "tool": "echo", "args": {"value": ["ok.txt", "missing.txt", "ok.txt"]}},
            {"id": "seed", "tool": "write_file", "args": {"path": "ok.txt", "content": "yes"}},
            {
                "id": "each",
                "depends_on": ["list", "seed"],
                "for_each": {
                    "items": "{{steps.list.output.value}}",
                    "max_parallel": 2,
                    "tool": "read_file",
                    "args": {"path": "{{item}}"},
                },
                "on_failure": "skip",
            },
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    out = run["result"]["each"]
    assert [i and i["content"] for i in out["items"]] == ["yes", None, "yes"]
    assert list(out["errors"]) == ["1"] and "missing.txt" in out["errors"]["1"]


async def test_child_run_requests_are_checked_where_they_are_wrong(
    api: httpx.AsyncClient,
) -> None:
    """Errors inside a child's plan are located there; `{{item}}` outside a for_each, items
    that are no list reference, and children nested too deep are refused."""

    async def problems(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        response = await api.post("/v1/runs", json={"goal": "g", "plan": {"steps": steps}})
        assert response.status_code == 422, response.text
        found: list[dict[str, Any]] = response.json()["detail"]
        return found

    bad_child = {"steps": [{"id": "x", "tool": "nope"}]}
    [error] = await problems([{"id": "c", "run": {"goal": "g", "plan": bad_child}}])
    assert error["loc"] == ["body", "plan", "steps", 0, "run", "plan", "steps", 0, "tool"]
    [error] = await problems([{"id": "e", "tool": "echo", "args": {"value": "{{item}}"}}])
    assert "malformed reference" in error["msg"]
    [error] = await problems(
        [
            {"id": "x", "tool": "echo"},
            {"id": "f", "for_each": {"items": "a {{steps.x.output}}", "tool": "echo"}},
        ]
    )
    assert error["loc"][-1] == "items"
    nested: dict[str, Any] = {"goal": "leaf", "plan": {"steps": [{"id": "s", "tool": "echo"}]}}
    for _ in range(4):
        nested = {"goal": "g", "plan": {"steps": [{"id": "n", "run": nested}]}}
    [error] = await problems(nested["plan"]["steps"])
    assert "3 levels" in error["msg"]
    # More children than the server allows one run (LONGRUN_MAX_CHILD_RUNS, 100).
    many = {"items": list(range(101)), "run": {"goal": "g {{item}}"}}
    [error] = await problems([{"id": "m", "for_each": many}])
    assert error["loc"] == ["body", "plan", "steps"] and "101 child runs" in error["msg"]


async def test_an_agent_delegates_a_sub_goal_to_a_child_run(
    api: httpx.AsyncClient,
    worker: Worker,
    standin: StandIn,
    wait_run: Poll,
    settings: Settings,
) -> None:
    """The boss's agent hands a sub-goal to a child run with its own acceptance; the child
    plans, writes and is judged on its own; the boss gets its result back as a tool answer."""
    standin.scenario(
        [
            {
                "match": "boss:",
                "role": "plan",
                "json": {
                    "steps": [{"id": "hand", "intent": "delegate it", "expected_evidence": "done"}]
                },
            },
            {
                "match": "boss:",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {
                        "name": "delegate",
                        "arguments": {
                            "goal": "worker: write hello.txt",
                            "acceptance": ["hello.txt holds hello"],
                        },
                    }
                ],
            },
            {"match": "boss:", "role": "act", "times": 1, "reply": "the worker did it"},
            {
                "match": "worker:",
                "role": "plan",
                "json": {
                    "steps": [{"id": "write", "intent": "write", "expected_evidence": "a file"}]
                },
            },
            {
                "match": "worker:",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "hello.txt", "content": "hello"}}
                ],
            },
            {"match": "worker:", "role": "act", "times": 1, "reply": "written"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={"goal": "boss: get hello.txt written", "tools": ["delegate", "write_file"]},
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    [handed] = [s for s in run["steps"] if s["kind"] == "run"]
    assert handed["status"] == "completed"
    child_id = handed["output"]["run_id"]
    assert child_id == f"{run_id}:{handed['id']}"
    child = (await api.get(f"/v1/runs/{child_id}")).json()
    assert child["status"] == "completed" and child["parent_run_id"] == run_id
    assert [c["id"] for c in child["acceptance"]] == ["c1"]
    assert (settings.workspaces_dir / child_id / "workspace" / "hello.txt").read_text() == "hello"
    # The boss was offered delegate; so was the worker (one level down of three).
    boss_acts = standin.calls("boss:", role="act")
    assert "delegate" in boss_acts[0]["tools"]
    assert "delegate" in standin.calls("worker:", role="act")[0]["tools"]
    assert run["children"][0]["usage"]["tool_calls"] == 1
    assert run["budget"]["limits"]["max_tool_calls"]["used"] >= 1


async def test_a_failed_child_is_undone_with_its_parent(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """A child fails after writing; the parent's `on_failure: compensate` undoes the child's
    write (in the child's workspace) and its own, newest first."""
    child_plan = {
        "steps": [
            {"id": "w", "tool": "write_file", "args": {"path": "child.txt", "content": "c"}},
            {"id": "r", "tool": "read_file", "args": {"path": "missing.txt"}},
        ]
    }
    run_id = await submit(
        api,
        [
            {"id": "mine", "tool": "write_file", "args": {"path": "parent.txt", "content": "p"}},
            {"id": "sub", "run": {"goal": "write, then fail", "plan": child_plan}},
        ],
        on_failure="compensate",
    )
    run = await wait_run(run_id)
    assert run["status"] == "failed" and "missing.txt" in run["error"]
    assert run["result"]["compensated"] == ["w", "mine"]
    child_id = f"{run_id}:sub"
    assert (await api.get(f"/v1/runs/{child_id}")).json()["status"] == "failed"
    assert not (_workspace(settings, child_id) / "child.txt").exists()
    assert not (_workspace(settings, run_id) / "parent.txt").exists()


async def test_children_are_charged_once_across_continue_as_new(
    client: Client, settings: Settings, wait_run: Poll
) -> None:
    """A parent that continues as new every two steps keeps its ended children, and their
    charges, in the carry: four children of one call each cost exactly four."""
    changed = settings.model_copy(update={"continue_as_new_every": 2})
    transport = httpx.ASGITransport(app=create_app(changed))
    one_call = {"steps": [{"id": "e", "tool": "echo", "args": {"value": 1}}]}
    steps = [{"id": f"c{i}", "run": {"goal": f"child {i}", "plan": one_call}} for i in range(4)]
    async with (
        serving(client, changed),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
    ):
        run_id = await submit(api, steps, budget={"max_tool_calls": 4})
        run = await wait_run(run_id, http=api)
        audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert run["status"] == "completed", run["error"]
    assert any(e["action"] == "continued as new" for e in audit)
    assert [c["status"] for c in run["children"]] == ["completed"] * 4
    assert run["budget"]["limits"]["max_tool_calls"] == {"limit": 4, "used": 4}


async def test_a_failed_item_with_compensate_undoes_the_items_before_it(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """A for_each over write_file, one item at a time: the third item's path is refused by
    the tool, and `on_failure: compensate` fails the run and undoes the two writes."""
    fan = {
        "id": "each",
        "for_each": {
            "items": ["a.txt", "b.txt", "../out.txt"],
            "tool": "write_file",
            "args": {"path": "{{item}}", "content": "x"},
        },
        "on_failure": "compensate",
    }
    run_id = await submit(api, [fan])
    run = await wait_run(run_id)
    assert run["status"] == "failed" and "item 2" in run["error"]
    assert run["result"]["compensated"] == ["each[1]", "each[0]"]
    workspace = _workspace(settings, run_id)
    assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


async def test_pausing_a_parent_pauses_its_children_and_resuming_resumes_them(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    """A paused parent's child holds before its next call even once its approval is
    decided; resuming the parent lets it finish."""
    child_plan = {
        "steps": [
            {"id": "gate", "approval": {"message": "go on?"}},
            {"id": "after", "tool": "echo", "args": {"value": 1}},
        ]
    }
    run_id = await submit(
        api, [{"id": "sub", "run": {"goal": "wait, then echo", "plan": child_plan}}]
    )
    child_id = f"{run_id}:sub"
    await wait_run(run_id, lambda r: bool(r["pending_approvals"]))
    paused = await api.post(f"/v1/runs/{run_id}/pause", json={"reason": "lunch"})
    assert paused.status_code == 202, paused.text
    for _ in range(200):  # the pause reaches the child (it holds at its next call)
        audit = (await api.get(f"/v1/runs/{child_id}/audit")).json()["entries"]
        if any(e["action"] == "pause" and run_id in (e["detail"] or "") for e in audit):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the child was not paused: {audit}")
    decided = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    assert decided.status_code == 202, decided.text

    def held_after_gate(run: dict[str, Any]) -> bool:
        steps = {s["id"]: s["status"] for s in run["steps"]}
        return steps["gate"] == "completed" and run["status"] == "paused"

    child = await wait_run(child_id, held_after_gate)
    assert {s["id"]: s["status"] for s in child["steps"]}["after"] == "pending"
    assert child["pause_reason"] == "requested"

    assert (await api.post(f"/v1/runs/{run_id}/resume", json={})).status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["result"]["sub"]["outputs"]["after"] == {"value": 1}
