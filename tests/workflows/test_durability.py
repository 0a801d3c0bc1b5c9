"""Durability: a worker killed with SIGKILL and a Temporal server restarted mid-run."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel

from activities.tools.registry import ToolContext, tool
from api.app import create_app
from longrun.contracts import SideEffect
from longrun.dev.stack import ServerThread, TemporalDevServer, free_port
from longrun.settings import Settings
from longrun.temporal import connect
from tests.helpers import Poll, StandIn, allow, start_worker, stop_processes, submit
from worker import serving

pytestmark = pytest.mark.long


class Effects:
    """A side-effect target: counts arrivals per step and applies each idempotency key once."""

    def __init__(self) -> None:
        self.arrivals: dict[str, int] = {}
        self.applied: dict[str, set[str]] = {}
        self.hold_first: set[str] = set()
        app = FastAPI()

        @app.post("/effects/{name}")
        async def effect(name: str, request: Request) -> dict[str, int]:
            self.arrivals[name] = self.arrivals.get(name, 0) + 1
            self.applied.setdefault(name, set()).add(request.headers["idempotency-key"])
            if name in self.hold_first and self.arrivals[name] == 1:
                await asyncio.sleep(60)  # the worker dies while waiting for this answer
            return {"applied": len(self.applied[name])}

        self.server = ServerThread(app)


@pytest.fixture
def effects(settings: Settings) -> Iterator[Effects]:
    target = Effects()
    with target.server:
        allow(settings, target.server.url)
        yield target


def _post(effects: Effects, name: str) -> dict[str, object]:
    return {
        "id": name,
        "tool": "http_request",
        "args": {"method": "POST", "url": f"{effects.server.url}/effects/{name}"},
        "requires_approval": False,
    }


async def _kill_on_arrival(effects: Effects, name: str, worker: subprocess.Popen[bytes]) -> None:
    """SIGKILL `worker` once the effect `name` has arrived (its call is then in flight)."""
    for _ in range(600):
        if effects.arrivals.get(name):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"no run reached the effect '{name}'")
    worker.send_signal(signal.SIGKILL)
    worker.wait()


async def test_worker_killed_mid_run_finishes_each_step_once(
    api: httpx.AsyncClient,
    settings: Settings,
    standin: StandIn,
    effects: Effects,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    effects.hold_first.add("slow")
    first = start_worker(settings, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    try:
        run_id = await submit(
            api,
            [
                _post(effects, "a"),
                {"id": "think", "model": {"prompt": "crash model one"}},
                _post(effects, "b"),
                _post(effects, "slow"),
                {"id": "reflect", "model": {"prompt": "crash model two"}},
                _post(effects, "c"),
            ],
        )
        await _kill_on_arrival(effects, "slow", first)
        second = start_worker(settings, tmp_path)
        run = await wait_run(run_id, timeout_s=120)
        assert run["status"] == "completed", run
    finally:
        stop_processes(first, second)

    # Steps that completed before the kill did not run again.
    assert effects.arrivals["a"] == effects.arrivals["b"] == 1
    assert effects.arrivals["c"] == 1
    # The step in flight was retried, under the same idempotency key, so it applied once.
    assert effects.arrivals["slow"] == 2
    assert effects.applied["slow"] == {f"{run_id}:slow"}
    assert len(standin.calls("crash model one")) == 1
    assert len(standin.calls("crash model two")) == 1
    assert run["steps"][3]["attempts"] == 2


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[TemporalDevServer]:
    async with TemporalDevServer(tmp_path / "restart.sqlite", port=free_port()) as server:
        yield server


async def test_temporal_restart_mid_run_completes(
    own_server: TemporalDevServer, settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    settings = settings.model_copy(update={"temporal_address": own_server.address})
    client = await connect(settings)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as api,
        serving(client, settings),
    ):
        run_id = await submit(
            api,
            [
                {"id": "before", "tool": "echo", "args": {"value": 1}},
                {"id": "pause", "wait": {"seconds": 3}},
                {"id": "after", "model": {"prompt": "after the restart"}},
            ],
        )
        await wait_run(run_id, lambda r: r["steps"][1]["status"] == "running", http=api)
        own_server.stop()
        await asyncio.sleep(1)
        own_server.start()
        await own_server.wait_ready()
        run = await wait_run(run_id, timeout_s=120, http=api)
    assert run["status"] == "completed", run
    assert [s["status"] for s in run["steps"]] == ["completed"] * 3
    assert len(standin.calls("after the restart")) == 1


async def test_worker_killed_after_a_model_call_does_not_repeat_it(
    api: httpx.AsyncClient,
    settings: Settings,
    standin: StandIn,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    marker = "agent-crash"
    standin.scenario(
        [
            {
                "match": marker,
                "role": "plan",
                "json": {"steps": [{"id": "go", "intent": "count", "expected_evidence": "n.txt"}]},
            },
            {
                "match": marker,
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "python", "arguments": {"code": "open('n.txt','w')"}}],
            },
            {"match": marker, "role": "act", "times": 1, "reply": "n.txt is there"},
        ]
    )
    first = start_worker(settings, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    try:
        response = await api.post(
            "/v1/runs", json={"goal": f"{marker}: make n.txt", "tools": ["python"]}
        )
        run_id = response.json()["run_id"]
        # The model asked for an irreversible call: the run waits for a person.
        run = await wait_run(run_id, lambda r: bool(r["pending_approvals"]))
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = start_worker(settings, tmp_path)
        approval_id = run["pending_approvals"][0]["approval_id"]
        decision = await api.post(
            f"/v1/runs/{run_id}/approvals/{approval_id}", json={"decision": "approve"}
        )
        assert decision.status_code == 202
        run = await wait_run(run_id, timeout_s=120)
    finally:
        stop_processes(first, second)
    assert run["status"] == "completed", run
    assert len(standin.calls(marker, role="plan")) == 1
    assert len(standin.calls(marker, role="act")) == 2
    assert (settings.workspaces_dir / run_id / "workspace" / "n.txt").exists()


async def test_a_model_call_on_a_killed_worker_is_retried_within_its_heartbeat_timeout(
    api: httpx.AsyncClient,
    settings: Settings,
    standin: StandIn,
    wait_run: Poll,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    # The first answer streams for about a minute; the worker dies while it does.
    standin.rule(match="stalled model", reply="word " * 240, chunk_delay_s=0.4, times=1)
    first = start_worker(settings, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    try:
        run_id = await submit(api, [{"id": "m", "model": {"prompt": "stalled model: talk"}}])
        for _ in range(600):
            if standin.generating():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the model call never started")
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.time()
        second = start_worker(settings, tmp_path)
        run = await wait_run(run_id, timeout_s=120)
        assert run["status"] == "completed", run
    finally:
        stop_processes(first, second)
    calls = standin.calls("stalled model")
    assert len(calls) == 2  # retried on the new worker, long before the stream would end
    assert run["steps"][0]["attempts"] == 2
    # How long the run stood still (printed in JUnit XML; never asserted).
    record_property("stall_s", round(calls[1]["at"] - killed_at, 1))


async def test_a_worker_stopped_with_sigterm_lets_its_tool_call_finish(
    api: httpx.AsyncClient, settings: Settings, wait_run: Poll, tmp_path: Path
) -> None:
    script = "echo start >> log.txt; sleep 3; echo end >> log.txt"
    step = {"id": "sh", "tool": "shell", "args": {"argv": ["sh", "-c", script]}}
    first = start_worker(settings, tmp_path)
    second = None
    try:
        run_id = await submit(api, [{**step, "requires_approval": False}])
        log = settings.workspaces_dir / run_id / "workspace" / "log.txt"
        while not log.exists():  # noqa: ASYNC110 (another process writes it)
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGTERM)  # a rolling deploy stops the worker
        second = start_worker(settings, tmp_path)
        assert await asyncio.to_thread(first.wait, 30) == 0
        run = await wait_run(run_id)
        assert run["status"] == "completed", run
        assert log.read_text() == "start\nend\n"  # once, on the worker that started it
    finally:
        stop_processes(first, second)


async def test_a_worker_started_before_temporal_waits_for_it(
    settings: Settings, standin: StandIn, wait_run: Poll, tmp_path: Path
) -> None:
    port = free_port()
    settings = settings.model_copy(update={"temporal_address": f"127.0.0.1:{port}"})
    worker = start_worker(settings, tmp_path, ready=False)
    try:
        log = tmp_path / "worker-0.log"
        while "is not reachable" not in log.read_text():
            assert worker.poll() is None, log.read_text()
            await asyncio.sleep(0.1)
        async with TemporalDevServer(tmp_path / "late.sqlite", port=port):
            transport = httpx.ASGITransport(app=create_app(settings))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
                run_id = await submit(api, [{"id": "e", "tool": "echo"}])
                run = await wait_run(run_id, timeout_s=90, http=api)
        assert run["status"] == "completed", run
        assert "worker polling" in log.read_text()
    finally:
        stop_processes(worker)


class NewerArgs(BaseModel):
    n: int = 0


@tool("newer_than_the_workers", args=NewerArgs, side_effect=SideEffect.READ_ONLY)
async def newer_than_the_workers(args: NewerArgs, ctx: ToolContext) -> dict[str, Any]:
    """A tool this test's API knows and a worker process does not."""
    return {"n": args.n}


async def test_a_step_naming_a_tool_the_worker_lacks_fails_saying_so(
    api: httpx.AsyncClient, settings: Settings, wait_run: Poll, tmp_path: Path
) -> None:
    worker = start_worker(settings, tmp_path)
    try:
        step = {"id": "new", "tool": "newer_than_the_workers", "args": {"n": 1}}
        run_id = await submit(api, [{"id": "first", "tool": "echo"}, {**step}])
        run = await wait_run(run_id)
    finally:
        stop_processes(worker)
    assert run["status"] == "failed", run
    assert run["steps"][0]["status"] == "completed"
    assert run["steps"][1]["status"] == "failed"
    assert "no tool 'newer_than_the_workers' on the worker" in run["steps"][1]["error"]
    assert "same version as the API" in run["error"]


async def test_worker_killed_mid_fan_out_finishes_each_child_once(
    api: httpx.AsyncClient,
    settings: Settings,
    effects: Effects,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    """A for_each of four child runs, two at a time; the worker dies while one child's call
    is in flight. The new worker finishes every child; each effect applies once, and the
    parent's budget is charged each call once."""
    effects.hold_first.add("b")
    first = start_worker(settings, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    post = {**_post(effects, "{{item}}"), "id": "post"}
    child = {"goal": "post {{item}}", "plan": {"steps": [post]}}
    fan = {"id": "fan", "for_each": {"items": list("abcd"), "max_parallel": 2, "run": child}}
    try:
        run_id = await submit(api, [fan], budget={"max_tool_calls": 4})
        await _kill_on_arrival(effects, "b", first)
        second = start_worker(settings, tmp_path)
        run = await wait_run(run_id, timeout_s=120)
        assert run["status"] == "completed", run
    finally:
        stop_processes(first, second)
    assert effects.arrivals == {"a": 1, "b": 2, "c": 1, "d": 1}
    assert effects.applied["b"] == {f"{run_id}:fan:1:post"}
    assert [c["status"] for c in run["children"]] == ["completed"] * 4
    assert run["budget"]["limits"]["max_tool_calls"] == {"limit": 4, "used": 4}
