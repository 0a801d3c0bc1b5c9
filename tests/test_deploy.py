"""A rolling deploy with runs in flight: version 1 workers keep the runs that started on them,
version 2 (a change that would break their replay) takes new runs and the long run's next
segment, and a bad version is taken back without stranding its runs. Real worker processes
on the test's own Temporal deployment."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client, WorkflowExecutionStatus

from api.app import create_app
from longrun.settings import Settings
from tests.conftest import Poll
from tests.helpers import REPO, start_worker, stop_processes, submit
from tests.unpatched_run import PatchedTimerFirstRun, TimerFirstRun
from tests.workflows.test_replay import replays_and_is_kept
from worker import check_replay, serving

APPROVAL = {"id": "g", "approval": {"message": "go on?"}}


def _waiting(run: dict[str, Any]) -> bool:
    return run["status"] == "waiting_approval"


async def _approve(api: httpx.AsyncClient, run_id: str) -> None:
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    approval = run["pending_approvals"][0]["approval_id"]
    answer = await api.post(f"/v1/runs/{run_id}/approvals/{approval}", json={"decision": "approve"})
    assert answer.status_code == 202, answer.text


def _longrun(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "LONGRUN_DEPLOYMENT": settings.deployment,
        "LONGRUN_TASK_QUEUE": settings.task_queue,
    }
    return subprocess.run(
        [sys.executable, "-m", "longrun.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


async def _versions(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    ready = (await api.get("/readyz")).json()
    return {v["build_id"]: v for v in ready["versions"]}


async def test_a_rolling_deploy_keeps_runs_on_their_version_until_a_hand_over(
    client: Client, settings: Settings, wait_run: Poll, tmp_path: Path
) -> None:
    deployed = settings.model_copy(
        update={"deployment": f"deploy-{uuid.uuid4().hex[:8]}", "continue_as_new_every": 2}
    )
    label = {"deploy": deployed.deployment}
    where = f"LongrunLabels = 'deploy:{deployed.deployment}'"
    env = {"LONGRUN_DEPLOYMENT": deployed.deployment}
    v1 = start_worker(deployed, tmp_path, env={**env, "LONGRUN_BUILD_ID": "v1"})
    v2 = None
    transport = httpx.ASGITransport(app=create_app(deployed))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            # The first version of a deployment becomes current as its worker starts.
            assert (await _versions(api))["v1"]["status"] == "current"

            # On version 1: a run waiting for approval, a long plan waiting in its second
            # segment, and a run whose child waits.
            waiting = await submit(api, [APPROVAL], labels=label)
            chain = [
                ({"approval": {"message": "a3?"}} if i == 3 else {"tool": "echo"})
                | {"id": f"a{i}", "depends_on": [f"a{i - 1}"] if i > 1 else []}
                for i in range(1, 7)
            ]
            long = await submit(api, chain, labels=label)
            child_plan = {"goal": "child", "plan": {"steps": [APPROVAL]}}
            parent = await submit(api, [{"id": "c", "run": child_plan}], labels=label)
            child = f"{parent}:c"
            for run_id in (waiting, long, child):
                run = await wait_run(run_id, _waiting, http=api)
                assert run["version"] == "v1", run
            assert any(
                e["action"] == "continued as new"
                for e in (await api.get(f"/v1/runs/{long}/audit")).json()["entries"]
            )

            # Version 2 changes the workflow so that their histories no longer replay. Its
            # worker starts (not current: LONGRUN_PROMOTE=manual) and the gate catches it.
            v2 = start_worker(
                deployed,
                tmp_path,
                env={**env, "LONGRUN_BUILD_ID": "v2", "LONGRUN_PROMOTE": "manual"},
                module="tests.unpatched_run",
            )
            found = await check_replay(client, 50, where, (TimerFirstRun,))
            broken = {line.split(" ", 1)[0] for line in found.failures}
            assert {waiting, long, parent} <= broken, found.failures
            assert all("nondetermin" in line.lower() for line in found.failures)
            assert await check_replay(client, 50, where, (PatchedTimerFirstRun,)) == (
                found.replayed,
                [],
                0,
            )
            assert (await _versions(api))["v2"]["status"] == "inactive"

            made = _longrun(deployed, "deployment", "current", "v2")
            assert made.returncode == 0, made.stderr
            fresh = await submit(api, [APPROVAL], labels=label)
            assert (await wait_run(fresh, _waiting, http=api))["version"] == "v2"
            # Runs in flight stay where they started.
            for run_id in (waiting, long, child):
                assert (await api.get(f"/v1/runs/{run_id}")).json()["version"] == "v1"
            listed = await api.get("/v1/runs", params={"version": "v1", "status": "open"})
            assert {r["run_id"] for r in listed.json()["runs"]} >= {waiting, long, parent}

            for run_id in (waiting, long, child):
                await _approve(api, run_id)
            for run_id in (waiting, parent, child):
                run = await wait_run(run_id, http=api)
                assert (run["status"], run["version"]) == ("completed", "v1"), run
            # The long plan moved to version 2 at its next hand-over, and says so.
            run = await wait_run(long, http=api)
            assert (run["status"], run["version"]) == ("completed", "v2"), run
            page = await api.get(f"/v1/runs/{long}/events/page", params={"limit": 500})
            moves = [
                e["data"]
                for e in page.json()["events"]
                if e["type"] == "run.continued" and "moved_from" in e["data"]
            ]
            assert moves == [{"segment": 3, "version": "v2", "moved_from": "v1"}], moves
            # Its two segments on version 1 (the second handed over because version 2
            # became current) replay, and are kept among the saved histories.
            segments = sorted(
                [s async for s in client.list_workflows(f"WorkflowId = '{long}'")],
                key=lambda s: s.start_time,
            )
            assert [s.status for s in segments[:2]] == [
                WorkflowExecutionStatus.CONTINUED_AS_NEW
            ] * 2
            for number, segment in enumerate(segments[:2], start=1):
                name = f"moved_at_hand_over_{number}"
                await replays_and_is_kept(client, long, name, segment.run_id)

            # Version 1 has drained: nothing open on it, so its workers may stop.
            listed = await api.get("/v1/runs", params={"version": "v1", "status": "open"})
            assert listed.json()["runs"] == []
            assert (await _versions(api))["v1"]["open_runs"] == 0
            status = _longrun(deployed, "deployment", "status")
            assert "drained: its workers may stop" in status.stdout, status.stdout

            # Version 2 turns out bad: taking it back starts new runs on version 1 again,
            # while the run pinned to version 2 finishes there.
            back = _longrun(deployed, "deployment", "current", "v1")
            assert back.returncode == 0, back.stderr
            after = await submit(api, [{"id": "e", "tool": "echo", "args": {"value": 1}}])
            run = await wait_run(after, http=api)
            assert (run["status"], run["version"]) == ("completed", "v1"), run
            await _approve(api, fresh)
            run = await wait_run(fresh, http=api)
            assert (run["status"], run["version"]) == ("completed", "v2"), run
            assert (await _versions(api))["v2"]["open_runs"] == 0
    finally:
        stop_processes(v1, v2)
    logs = {p.name: p.read_text() for p in tmp_path.glob("worker-*.log")}
    assert len(logs) == 2
    for name, text in logs.items():
        assert "nondetermin" not in text.lower(), f"{name}:\n{text}"


async def test_an_unversioned_worker_runs_runs_and_their_hand_overs(
    settings: Settings, client: Client, wait_run: Poll
) -> None:
    # LONGRUN_VERSIONING=false: no deployment, so its workflow tasks may name no versioning
    # behavior (Temporal refuses every task that does, and the run never starts).
    unversioned = settings.model_copy(
        update={
            "versioning": False,
            "continue_as_new_every": 2,
            "task_queue": f"unversioned-{uuid.uuid4().hex[:8]}",
        }
    )
    steps = [
        {"id": f"w{i}", "tool": "write_file", "args": {"path": f"{i}", "content": "x"}}
        for i in range(5)
    ]
    app = create_app(unversioned)
    transport = httpx.ASGITransport(app=app)
    async with (
        serving(client, unversioned),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
    ):
        run_id = await submit(api, steps)
        run = await wait_run(run_id, http=api)
    assert run["status"] == "completed", run
    segments = await client.count_workflows(f"WorkflowId = '{run_id}'")
    assert segments.count >= 3
