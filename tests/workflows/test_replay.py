"""Replay: histories of the run workflow replay without non-determinism errors.

Histories saved under tests/histories/ guard running jobs against workflow code changes
(workflows/changes.py): those of runs started with the baseline's one marker and no memo
under before-started-with/; those of runs started since, whose memo names the changes they
start with (`started_with`) and which record no marker for them, beside them. A change
retired from the registry takes the histories of runs started before it with it.
After a deliberate change, registered in workflows/changes.py, record new ones beside the
old with `LONGRUN_RECORD_HISTORIES=1 pytest tests/workflows/test_replay.py` (existing files
are kept; rename them first to add a history from new code beside the old ones).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from api.app import create_app
from longrun.catalogue import CATALOGUE
from longrun.contracts import Plan, RunConfig, RunInput, Step
from longrun.plans import normalize_plan
from longrun.settings import Settings
from longrun.temporal import DATA_CONVERTER
from longrun.versions import VERSION_KEY
from tests.helpers import REPO, Poll, StandIn, submit
from tests.unpatched_run import TimerFirstRun
from worker import check_replay, held_back
from workflows import RunWorkflow
from workflows.changes import CHANGES

HISTORIES = REPO / "tests" / "histories"


def _replayer() -> Replayer:
    # The default sandbox, stricter than the worker's (which imports `workflows` once for all
    # runs): every module of the run workflow is imported afresh under the sandbox's
    # restrictions, so a non-deterministic call on any replayed path fails here.
    return Replayer(
        workflows=[RunWorkflow],
        data_converter=DATA_CONVERTER,
        workflow_runner=SandboxedWorkflowRunner(),
    )


async def replays_and_is_kept(
    client: Client, run_id: str, name: str, segment: str | None = None
) -> None:
    """The run's history (of one segment, if given) replays; with LONGRUN_RECORD_HISTORIES
    it is saved as `name`."""
    history = await client.get_workflow_handle(run_id, run_id=segment).fetch_history()
    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
    saved = HISTORIES / f"{name}.json"
    if os.environ.get("LONGRUN_RECORD_HISTORIES") and not saved.exists():
        saved.write_text(history.to_json())


async def test_saved_histories_replay() -> None:
    files = sorted(HISTORIES.rglob("*.json"))
    assert files, "no saved histories to replay"
    for path in files:
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_fresh_histories_replay(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    scenarios = {
        "approved_plan": [
            {"id": "fetch", "tool": "echo", "args": {"value": {"n": 1}}},
            {"id": "think", "model": {"prompt": "n is {{steps.fetch.output.value.n}}"}},
            {"id": "side", "tool": "echo", "depends_on": ["fetch"]},
            {"id": "gate", "approval": {"message": "ok?"}, "depends_on": ["think", "side"]},
            {"id": "nap", "wait": {"seconds": 0.1}},
            {
                "id": "write",
                "tool": "write_file",
                "args": {"path": "out/r.md", "content": "{{steps.think.output.text}}"},
            },
        ],
        "failed_step": [
            {"id": "ok", "tool": "echo"},
            {"id": "bad", "tool": "read_file", "args": {"path": "missing.txt"}},
            {"id": "never", "tool": "echo"},
        ],
        # Quick tools as local activities (markers), one failing after an approval.
        "quick_tools_local": [
            {"id": "w", "tool": "write_file", "args": {"path": "q.txt", "content": "q"}},
            {"id": "r", "tool": "read_file", "args": {"path": "q.txt"}, "depends_on": ["w"]},
            {"id": "e", "tool": "echo", "args": {"value": "{{steps.r.output.content}}"}},
            {"id": "gate", "approval": {"message": "ok?"}, "depends_on": ["e"]},
            {"id": "gone", "tool": "read_file", "args": {"path": "no.txt"}, "depends_on": ["gate"]},
        ],
        "skipped_on_reject": [
            {"id": "maybe", "tool": "echo", "requires_approval": True, "on_reject": "skip"},
            {"id": "after", "tool": "echo"},
        ],
        # Model calls that heartbeat and retry for a window (the model-heartbeat-retry-window
        # patch), a re-ask that quotes the reason, a step with its own retries.
        "model_steps_streamed": [
            {
                "id": "city",
                "model": {
                    "prompt": "replay-city",
                    "json_schema": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                    "max_tokens": 64,
                },
            },
            {"id": "plain", "model": {"prompt": "replay plain"}, "retry": {"max_attempts": 2}},
        ],
    }
    standin.rule(match="replay-city", times=1, json={"town": "Oslo"})
    standin.scenario(
        [
            {
                "match": "replay-agent",
                "role": "plan",
                "json": {"steps": [{"id": "w", "intent": "write", "expected_evidence": "a.txt"}]},
            },
            {
                "match": "replay-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}},
                    {"name": "shell", "arguments": {"argv": ["true"]}},
                ],
            },
            {
                "match": "replay-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "finish"}],
            },
        ]
    )
    response = await api.post(
        "/v1/runs", json={"goal": "replay-agent: write a.txt", "tools": ["write_file"]}
    )
    runs = {"agent_goal_with_context": response.json()["run_id"]}
    extras: dict[str, dict[str, Any]] = {
        "compensated": {"on_failure": "compensate", "budget": {"max_tool_calls": 1}},
    }
    scenarios["compensated"] = [
        {"id": "w", "tool": "write_file", "args": {"path": "w.txt", "content": "w"}},
        {"id": "bad", "tool": "read_file", "args": {"path": "missing.txt"}},
    ]
    for name, steps in scenarios.items():
        runs[name] = await submit(api, steps, **extras.get(name, {}))
    for name, run_id in runs.items():
        run = await wait_run(run_id, lambda r: r["status"] != "running")
        if run["status"] == "paused":  # over budget: raise it
            await api.post(f"/v1/runs/{run_id}/budget", json={"max_tool_calls": 10})
            run = await wait_run(run_id, lambda r: r["status"] not in ("running", "paused"))
        for approval in run["pending_approvals"]:
            decision = "reject" if name == "skipped_on_reject" else "approve"
            await api.post(
                f"/v1/runs/{run_id}/approvals/{approval['approval_id']}",
                json={"decision": decision},
            )
        run = await wait_run(run_id)
        assert run["status"] in ("completed", "failed"), run
        await replays_and_is_kept(client, run_id, name)


async def test_segments_of_a_long_agent_run_replay(
    settings: Settings, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # Fourteen steps in segments of five: hand-overs, and a compaction in the third segment.
    steps = [{"id": f"s{i}", "intent": f"part {i}", "expected_evidence": "x"} for i in range(14)]
    standin.scenario([{"match": "replay-long", "role": "plan", "json": {"steps": steps}}])
    app = create_app(settings.model_copy(update={"continue_as_new_every": 5}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as api:
        response = await api.post("/v1/runs", json={"goal": "replay-long: go", "tools": ["note"]})
        run_id = response.json()["run_id"]
        run = await wait_run(run_id, http=api)
    assert run["status"] == "completed", run["error"]
    assert standin.calls("Finished steps to merge in", role="complete")
    segments = [wf async for wf in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(segments) == 3
    for n, segment in enumerate(sorted(segments, key=lambda s: s.start_time), start=1):
        await replays_and_is_kept(client, run_id, f"agent_segment_{n}", segment.run_id)


async def test_segments_of_a_plan_run_that_compensates_after_a_hand_over_replay(
    settings: Settings, client: Client, worker: Worker, wait_run: Poll
) -> None:
    steps = [
        {"id": "w", "tool": "write_file", "args": {"path": "w.txt", "content": "w"}},
        *({"id": f"e{i}", "tool": "echo"} for i in range(3)),
        {"id": "bad", "tool": "read_file", "args": {"path": "missing.txt"}},
    ]
    app = create_app(settings.model_copy(update={"continue_as_new_every": 3}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as api:
        run_id = await submit(api, steps, on_failure="compensate")
        run = await wait_run(run_id, http=api)
    assert run["status"] == "failed"
    assert run["result"] == {"compensated": ["w"], "not_undone": []}
    segments = [wf async for wf in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(segments) == 2
    for n, segment in enumerate(sorted(segments, key=lambda s: s.start_time), start=1):
        name = f"compensated_after_hand_over_{n}"
        await replays_and_is_kept(client, run_id, name, segment.run_id)


async def test_a_run_paused_for_its_model_and_resumed_replays(
    settings: Settings, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # The model-unavailable-pause and activity-ids patches: a window that runs out, a
    # pause, a resume and the call asked again.
    standin.rule(match="replay-down", status=503, message="down")
    app = create_app(settings.model_copy(update={"model_retry_window_s": 1.0}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as api:
        run_id = await submit(
            api,
            [{"id": "first", "tool": "echo"}, {"id": "m", "model": {"prompt": "replay-down"}}],
        )
        await wait_run(run_id, lambda r: r["pause_reason"] == "model_unavailable", http=api)
        standin.reset()
        await api.post(f"/v1/runs/{run_id}/resume")
        run = await wait_run(run_id, http=api)
    assert run["status"] == "completed", run["error"]
    await replays_and_is_kept(client, run_id, "model_paused_and_resumed")


async def test_a_run_changed_by_requests_replays(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # Decisions, pauses, resumes and budget changes sent as signals with request ids (the
    # saved `changed_by_updates` history keeps the way runs took them as updates before).
    run_id = await submit(
        api, [{"id": "gate", "approval": {"message": "go?"}}, {"id": "after", "tool": "echo"}]
    )
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    url = f"/v1/runs/{run_id}"
    assert (await api.post(f"{url}/pause", json={"reason": "look first"})).status_code == 202
    assert (await api.post(f"{url}/budget", json={"max_tool_calls": 3})).status_code == 202
    assert (await api.post(f"{url}/approvals/apr-gate", json={"decision": "approve"})).is_success
    refused = await api.post(f"{url}/approvals/apr-gate", json={"decision": "reject"})
    assert refused.status_code == 409
    await wait_run(run_id, lambda r: r["status"] == "paused")
    assert (await api.post(f"{url}/resume")).status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    await replays_and_is_kept(client, run_id, "changed_by_requests")


async def test_a_run_out_of_time_while_waiting_replays(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # The time-budget-while-waiting patch: a limit raised (a new timer), then time up at
    # an approval gate while a timer step sleeps beside it.
    run_id = await submit(
        api,
        [{"id": "gate", "approval": {"message": "go?"}}, {"id": "nap", "wait": {"seconds": 60}}],
        budget={"max_duration_s": 0.5, "on_budget_exhausted": "fail"},
    )
    assert (await api.post(f"/v1/runs/{run_id}/budget", json={"max_duration_s": 1})).is_success
    run = await wait_run(run_id)
    assert run["status"] == "failed" and "time budget (1 s)" in run["error"], run
    await replays_and_is_kept(client, run_id, "time_budget_while_waiting")


async def test_a_run_cancelled_with_a_call_in_flight_replays(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # The tool-cancel-waits patch: the cancel waits for the shell call to stop, then
    # compensation undoes the write.
    sleep = {"argv": ["sleep", "30"]}
    run_id = await submit(
        api,
        [
            {"id": "w", "tool": "write_file", "args": {"path": "w.txt", "content": "w"}},
            {"id": "sh", "tool": "shell", "args": sleep, "requires_approval": False},
        ],
    )
    await wait_run(run_id, lambda r: r["steps"][1]["status"] == "running")
    await api.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True})
    run = await wait_run(run_id)
    assert run["status"] == "cancelled" and run["result"]["compensated"] == ["w"], run
    await replays_and_is_kept(client, run_id, "cancelled_with_a_call_in_flight")


async def test_a_run_with_an_approval_deadline_and_figures_replays(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # A deadline's durable timer and its decision by `timeout`, the event log, and the
    # figures kept in the memo at the end (figures-memo).
    steps = [
        {
            "id": "late",
            "tool": "echo",
            "requires_approval": True,
            "approval_timeout_s": 1,
            "on_timeout": "skip",
        },
        {"id": "gate", "approval": {"message": "go?"}, "depends_on": ["late"]},
    ]
    run_id = await submit(api, steps)
    await wait_run(
        run_id, lambda r: r["status"] == "waiting_approval" and r["approvals"][0]["decision"]
    )
    assert (
        await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "approve"})
    ).is_success
    run = await wait_run(run_id)
    assert run["status"] == "completed" and run["figures"]["approvals"] == 1
    await replays_and_is_kept(client, run_id, "deadline_and_figures")


async def test_check_replay_names_runs_a_change_would_break(
    api: httpx.AsyncClient,
    client: Client,
    worker: Worker,
    wait_run: Poll,
    settings: Settings,
    tmp_path: Path,
) -> None:
    label = {"check": uuid.uuid4().hex[:12]}
    ended = await submit(api, [{"id": "a", "tool": "echo"}], labels=label)
    waiting = await submit(api, [{"id": "g", "approval": {"message": "ok?"}}], labels=label)
    await wait_run(ended)
    await wait_run(waiting, lambda r: r["status"] == "waiting_approval")
    where = f"LongrunLabels = 'check:{label['check']}'"
    assert await check_replay(client, 10, where) == (2, [], 0)
    replayed, failures, _ = await check_replay(client, 10, where, (TimerFirstRun,))
    assert replayed == 2 and len(failures) == 2
    assert all("nondetermin" in f.lower() for f in failures), failures
    assert {f.split(" ", 1)[0] for f in failures} == {ended, waiting}
    # The command, as an operator runs it before a deploy: this code replays them all.
    env = {**os.environ, "TEMPORAL_ADDRESS": settings.temporal_address}
    checked = subprocess.run(
        [sys.executable, "-m", "longrun.cli", "check-replay", "--where", where],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert "2 runs replayed, 0 do not replay" in checked.stdout
    # A sample: another run like the waiting one (same version, same patches) is not
    # replayed once one of its kind was.
    alike = await submit(api, [{"id": "g", "approval": {"message": "ok?"}}], labels=label)
    await wait_run(alike, lambda r: r["status"] == "waiting_approval")
    # Its kind is told by its version as visibility lists it, which follows a moment later.
    for _ in range(100):
        listed = [r async for r in client.list_workflows(f"WorkflowId = '{alike}'")]
        if listed and listed[0].typed_search_attributes.get(VERSION_KEY) is not None:
            break
        await asyncio.sleep(0.1)
    assert await check_replay(client, 10, where, per_set=1) == (2, [], 1)
    for run_id in (waiting, alike):
        await client.get_workflow_handle(run_id).terminate("test")


async def test_changes_held_back_are_counted_from_the_open_runs_started_without_them(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    gate = [{"id": "g", "approval": {"message": "ok?"}}]
    named = await submit(api, gate)  # the API names every change at start
    await wait_run(named, lambda r: r["status"] == "waiting_approval")
    # Started with no memo naming a change, as every run started before the registry was.
    older = f"run-{uuid.uuid4().hex}"
    inp = RunInput(
        run_id=older,
        goal="wait",
        plan=normalize_plan(Plan(steps=[Step.model_validate(gate[0])]), CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    await client.start_workflow(RunWorkflow.run, inp, id=older, task_queue=settings.task_queue)
    await wait_run(older, lambda r: r["status"] == "waiting_approval")
    where = f"WorkflowId = '{named}' OR WorkflowId = '{older}'"
    for _ in range(100):  # visibility lists a started run a moment later
        held = await held_back(client, 10, where)
        if set(held.values()) == {1}:
            break
        await asyncio.sleep(0.1)
    assert set(held) == set(CHANGES) and set(held.values()) == {1}, held
    env = {**os.environ, "TEMPORAL_ADDRESS": settings.temporal_address}
    listed = subprocess.run(
        [sys.executable, "-m", "longrun.cli", "check-replay", "--changes", "--where", where],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "recovery-not-counted" in listed.stdout and "can be retired" not in listed.stdout
    for run_id in (named, older):
        await client.get_workflow_handle(run_id).terminate("test")


async def test_a_run_under_a_grant_with_an_escalated_bound_decision_replays(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll
) -> None:
    # A call a standing grant covers (signals to and from the grants workflow), then an
    # approval escalated at its deadline and decided naming its digest.
    granted = await api.post(
        "/v1/approvals/grants", json={"tool": "echo", "label": "replay:grants", "uses": 1}
    )
    assert granted.status_code == 201, granted.text
    steps = [
        {"id": "covered", "tool": "echo", "args": {"value": "g"}, "requires_approval": True},
        {
            "id": "up",
            "tool": "echo",
            "requires_approval": True,
            "approval_timeout_s": 1,
            "on_timeout": "escalate",
            "depends_on": ["covered"],
        },
    ]
    run_id = await submit(api, steps, labels={"replay": "grants"})
    run = await wait_run(
        run_id, lambda r: any(a["role"] == "admin" for a in r["pending_approvals"])
    )
    [asked] = run["pending_approvals"]
    decided = await api.post(
        f"/v1/runs/{run_id}/approvals/{asked['approval_id']}",
        json={"decision": "approve", "digest": asked["digest"]},
    )
    assert decided.status_code == 202, decided.text
    run = await wait_run(run_id)
    assert run["status"] == "completed" and len(run["approvals"]) == 1, run
    await replays_and_is_kept(client, run_id, "granted_escalated_and_bound")
