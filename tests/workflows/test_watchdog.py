"""The progress watchdog: a goal-only run that goes nowhere is held `stalled` with the
evidence, a person's guidance carries it on, and left alone it fails, stalled. Stand-in
scenarios over real HTTP and a real Temporal server."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from tests.helpers import Poll, StandIn
from tests.workflows.test_agent import act, file_contains, plan, start
from tests.workflows.test_replay import replays_and_is_kept

OUTPUT_ACCEPTANCE = [file_contains("out", "out.txt", "ok")]


def _paused(run: dict[str, Any]) -> bool:
    return run["status"] != "running"


async def _calling_a_tool_it_lacks(
    api: httpx.AsyncClient, standin: StandIn, marker: str, **watchdog: Any
) -> str:
    """A run of one planned step whose actor keeps calling a tool the run does not have."""
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("do", "do it"))},
            {
                "match": marker,
                "role": "act",
                "tool_calls": [{"name": "shell", "arguments": {"command": "true"}}],
            },
        ]
    )
    return await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["write_file"],
        watchdog=watchdog,
    )


async def test_a_run_repeating_one_call_is_held_stalled_and_guidance_carries_it_on(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-loops"
    label = uuid.uuid4().hex[:12]
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("look", "find what to write"))},
            # The actor reads the same missing file over and over: the third time it is
            # told so, and the third time after that the run is held.
            {
                "match": marker,
                "role": "act",
                "times": 6,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "todo.txt"}}],
            },
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["read_file", "write_file"],
        labels={"watch": label},
        watchdog={"restarts": 0},
    )
    run = await wait_run(run_id, _paused)
    assert (run["status"], run["pause_reason"]) == ("paused", "stalled"), run
    assert "read_file" in run["pause_detail"] and "3 times" in run["pause_detail"], run
    acts = standin.calls(marker, role="act")
    assert len(acts) == 6  # held within a few turns
    told = acts[3]["messages"][-1]
    assert told["role"] == "tool" and "Note from longrun" in told["content"], told
    [held] = run["pending_approvals"]
    assert held["kind"] == "stalled" and held["approval_id"] == "stall-look"
    assert held["arguments"] == {
        "kind": "repeated_call",
        "call": 'read_file {"path": "todo.txt"}',
        "times": 3,
    }
    inbox = (await api.get("/v1/approvals")).json()
    assert any(
        a["approval_id"] == "stall-look" and a["run_id"] == run_id for a in inbox["approvals"]
    )
    page = {"limit": 500, "wait_s": 5}
    events = (await api.get(f"/v1/runs/{run_id}/events/page", params=page)).json()
    paused = [e for e in events["events"] if e["type"] == "run.paused"]
    assert [e["data"]["reason"] for e in paused] == ["stalled"], [
        e["type"] for e in events["events"]
    ]
    # A resume is not how it goes on: the answer says what is.
    refused = await api.post(f"/v1/runs/{run_id}/resume", json={"reason": "go"})
    assert refused.status_code == 409 and "stalled" in refused.text, refused.text

    standin.scenario(
        [
            act(
                "write ok into out.txt, not todo",
                ("write_file", {"path": "out.txt", "content": "ok"}),
            ),
            act("write ok into out.txt, not todo", ("finish", {"summary": "wrote it"})),
        ]
    )
    answer = await api.post(
        f"/v1/runs/{run_id}/approvals/stall-look",
        json={"decision": "approve", "comment": "write ok into out.txt, not todo"},
    )
    assert answer.status_code == 202, answer.text
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert (run["figures"]["stalls"], run["figures"]["guidance"]) == (1, 1)
    guided = standin.calls("write ok into out.txt, not todo", role="act")
    # The step started afresh with the guidance: no turns of the loop that stalled.
    assert not any(m["role"] == "tool" for m in guided[0]["messages"])
    metrics = (await api.get("/v1/metrics", params={"label": f"watch:{label}"})).json()
    assert metrics["drift"]["stalls_per_run"] == 1.0
    assert metrics["recovery_rate"] == 1.0
    await replays_and_is_kept(client, run_id, "agent_stalled_and_guided")


async def test_a_step_going_round_in_circles_starts_afresh_before_anyone_is_asked(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-circles"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("look", "find what to write"))},
            # Six reads of the same missing file: told at the third, stalled at the sixth.
            {
                "match": marker,
                "role": "act",
                "times": 6,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "todo.txt"}}],
            },
            # Afresh, told why, the model writes the file.
            act("went nowhere", ("write_file", {"path": "out.txt", "content": "ok"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["read_file", "write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["pending_approvals"] == [] and run["figures"]["stalls"] == 0, run
    assert run["figures"]["restarts"] == 1, run["figures"]
    [fresh] = standin.calls("went nowhere", role="act")
    # The circling conversation was set aside: the step's first turn again, told why.
    assert not any(m["role"] == "tool" for m in fresh["messages"]), fresh["messages"]
    said = fresh["messages"][-1]["content"]
    assert "read_file" in said and "do it another way" in said, said
    audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()
    restarted = [e for e in audit["entries"] if e["action"] == "restarted"]
    assert len(restarted) == 1 and restarted[0]["actor"] == "longrun", audit
    await replays_and_is_kept(client, run_id, "agent_stalled_step_restarted")


async def test_a_step_restarted_as_often_as_allowed_is_then_held(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-circles-on"
    run_id = await _calling_a_tool_it_lacks(api, standin, marker, invalid_answers=2, restarts=1)
    run = await wait_run(run_id, _paused)
    assert (run["status"], run["pause_reason"]) == ("paused", "stalled"), run
    assert run["figures"]["restarts"] == 1, run["figures"]
    # Told, then stalled (4 answers); afresh, told again, then stalled and held (4 more).
    assert len(standin.calls(marker, role="act")) == 8
    await api.post(f"/v1/runs/{run_id}/cancel")


async def test_a_stalled_run_left_alone_fails_stalled(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-invalid"
    run_id = await _calling_a_tool_it_lacks(
        api, standin, marker, invalid_answers=2, decide_within_s=2, restarts=0
    )
    run = await wait_run(run_id)
    assert run["status"] == "failed", run
    assert run["error"].startswith("stalled: the model's last 2 answers called no allowed tool")
    assert "nobody decided within 2 s" in run["error"]
    # Told after the first two (invalid-answers-coached), held after two more.
    acts = standin.calls(marker, role="act")
    assert len(acts) == 4
    assert "Note from longrun: your last 2 answers" in acts[2]["messages"][-1]["content"]
    assert run["figures"]["stalls"] == 1


async def test_a_person_who_rejects_going_on_fails_the_stalled_run(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-echoes"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("say", "say things"))},
            # One look at a.txt, then b.txt again and again.
            {
                "match": marker,
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
            },
            {
                "match": marker,
                "role": "act",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "b.txt"}}],
            },
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["read_file"],
        watchdog={"repeats": 2, "restarts": 0},
    )
    run = await wait_run(run_id, _paused)
    assert run["pause_reason"] == "stalled", run
    [held] = run["pending_approvals"]
    assert held["arguments"]["kind"] == "repeated_call", held
    answer = await api.post(
        f"/v1/runs/{run_id}/approvals/{held['approval_id']}",
        json={"decision": "reject", "comment": "not worth it"},
    )
    assert answer.status_code == 202, answer.text
    run = await wait_run(run_id)
    assert run["status"] == "failed", run
    assert (
        run["error"].startswith("stalled: ") and "rejected going on: not worth it" in run["error"]
    )


async def test_turns_without_a_verified_step_hold_the_run(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-wanders"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("find", "find the answer"))},
            *(act(marker, ("read_file", {"path": f"{n}.txt"})) for n in range(5)),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=OUTPUT_ACCEPTANCE,
        tools=["read_file"],
        watchdog={"turns_without_progress": 2, "restarts": 0},
    )
    run = await wait_run(run_id, _paused)
    assert run["pause_reason"] == "stalled", run
    assert run["pause_detail"] == "2 model turns without a verified step (now on 'find')"
    [held] = run["pending_approvals"]
    assert held["arguments"] == {"kind": "no_progress", "turns": 2, "on": "find"}
    assert len(standin.calls(marker, role="act")) == 2
    await api.post(f"/v1/runs/{run_id}/cancel")


async def test_watchdog_settings_are_for_goal_only_runs_and_checked(
    api: httpx.AsyncClient,
) -> None:
    with_plan = await api.post(
        "/v1/runs",
        json={
            "goal": "g",
            "plan": {"steps": [{"id": "e", "tool": "echo"}]},
            "watchdog": {"repeats": 3},
        },
    )
    assert with_plan.status_code == 422 and "watchdog" in with_plan.text
    for bad in ({"repeats": 1}, {"phase_share": 0}, {"decide_within_s": -1}, {"nap": 1}):
        answer = await api.post("/v1/runs", json={"goal": "g", "watchdog": bad})
        assert answer.status_code == 422, (bad, answer.text)
